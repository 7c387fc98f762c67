//! Liveness that a loaded host cannot fool: the stall clock, the watchdog
//! that credits host stalls to it, and the verdicts on client connections.

pub mod conn;
pub mod stall;
pub mod watchdog;
