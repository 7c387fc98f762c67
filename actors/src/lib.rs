//! termesh-actors: the runtime. Pure logic (ring, credit, modes, screen,
//! the mirror's core) with unit tests, and the actix actors that drive it,
//! grouped in folders by what they own (docs/architecture.md, "Layout";
//! lower folders never import higher ones):
//!
//! - `output`: a session's output side: ring, credit, the publisher and
//!   its vocabulary, the feed handle;
//! - `store`: persistence (sled);
//! - `session`: the session actor, its PTY, modes and screen model;
//! - `liveness`: host stall crediting, the watchdog, connection liveness;
//! - `directory`: the node's sessions (registry, create, revive, hooks,
//!   watchers);
//! - `cluster`: peer links, mirrors and forwarding;
//! - `front`: what clients reach: connections, the raw endpoint, the
//!   request table, tokens, and `NodeCtx`.

pub mod clock;
pub mod cluster;
pub mod directory;
pub mod error;
pub mod front;
pub mod keeper;
pub mod liveness;
pub mod metrics;
pub mod notify;
pub mod os;
pub mod output;
pub mod private_fs;
pub mod session;
pub mod store;
