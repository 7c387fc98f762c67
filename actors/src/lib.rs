//! termesh-actors: the runtime. Pure logic (ring, credit, modes, screen)
//! with unit tests, and the actix actors that drive it.

pub mod credit;
pub mod modes;
pub mod ring;
pub mod screen;
pub mod metrics;
pub mod pty;
pub mod session;
pub mod create;
pub mod error;
pub mod registry;
pub mod ops;
pub mod connection;
pub mod raw;
