//! A session's output side, local or mirrored: the replay ring, credit
//! accounting, the publisher that serves subscribers from them, the
//! vocabulary it speaks (`Subscribe`, `Deliver`, `Delivery`, ...), and the
//! `Feed` handle a connection reaches a session's output by.

pub mod credit;
pub mod feed;
pub mod publisher;
pub mod ring;
pub mod vocab;
