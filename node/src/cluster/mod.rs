//! The cluster commands, on the folder `cluster init` writes: `init` (a
//! new cluster), `members` (`add-node`, `remove-node`) and `rotate`
//! (`rotate-ca`). They depend in that order, never back.

pub mod init;
pub mod members;
pub mod rotate;
