//! What clients reach: the WebSocket connection actor, the raw terminal
//! endpoint, the request table every front end dispatches through, tokens,
//! frame decoding and reassembly, and `NodeCtx`, the node as the front ends see it.

pub mod connection;
pub mod escapes;
pub mod fragments;
pub mod frames;
pub mod grep;
pub mod history;
pub mod ops;
pub mod page;
pub mod plain;
pub mod raw;
pub mod request;
pub mod send;
pub mod tokens;
pub mod wait;
