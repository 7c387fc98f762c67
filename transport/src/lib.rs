//! termesh-transport: wire types and codecs. `client` is the WebSocket
//! protocol of PROTOCOL.md (MessagePack maps keyed by `t`); `peer` is the
//! protocol between the nodes of a cluster, with its QUIC and TLS set-up;
//! `keeper` is the node's wire to its PTY keeper (a unix socket, terminals
//! passed beside the messages). No actors here.

pub mod client;
pub mod codec;
pub mod drive;
pub mod fuzz;
pub mod hops;
pub mod https;
pub mod keeper;
pub mod peer;
pub mod reply;
pub mod session;

pub use client::*;
pub use codec::{decode_client, encode_output, encode_server, DecodeError, MAX_INBOUND_FRAME};
pub use drive::*;
pub use reply::MAX_REPLY;
pub use session::*;
