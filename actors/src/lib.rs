//! termesh-actors: the runtime. Pure logic (ring, credit, modes, screen)
//! with unit tests, and the actix actors that drive it.

pub mod connection;
pub mod create;
pub mod credit;
pub mod error;
pub mod feed;
pub mod forward;
pub mod fragments;
pub mod hook;
pub mod liveness;
pub mod metrics;
pub mod mirror;
pub mod modes;
pub mod ops;
pub mod peer;
pub mod portable;
pub mod priority;
pub mod pty;
pub mod publisher;
pub mod raw;
pub mod registry;
pub mod request;
pub mod revive;
pub mod ring;
pub mod screen;
pub mod session;
pub mod stall;
pub mod store;
pub mod tokens;
pub mod watch;
pub mod watchdog;
