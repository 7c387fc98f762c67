//! The node's directory of sessions: the registry actor that creates,
//! restores (taking up programs the PTY keeper held), revives and removes
//! them, the table of sessions everyone reads, the checks of create
//! requests, the agent hook secret, and the watch queues that tell
//! clients and peers of changes.

pub mod bells;
pub mod create;
pub mod homes;
pub mod hook;
pub mod registry;
pub mod restore;
pub mod revive;
mod table;
pub mod watch;
