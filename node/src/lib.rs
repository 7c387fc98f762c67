//! termesh-node: the `termesh` binary's parts: the node server (HTTP,
//! WebSocket, REST, wiring, shutdown) and the command-line clients.

pub mod client;
pub mod cluster;
pub mod export;
pub mod hooks;
pub mod keeper;
pub mod server;
pub mod stop;
pub mod tail;
pub mod text;
pub mod token;
pub mod token_file;
