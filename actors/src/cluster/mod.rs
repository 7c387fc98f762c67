//! The cluster: peer links (`peer`: one actor per peer, the QUIC driver
//! below it), mirrors of other nodes' sessions (`mirror`), and the
//! forwarding of requests to a session's owner (`forward`). Reaches the
//! rest of the node only through `ClusterCtx` and the `Answer` handle it
//! is given, never through the front end.

pub mod forward;
pub mod mirror;
pub mod owner;
pub mod peer;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use termesh_transport::{ClientMsg, ServerMsg};

use crate::directory::registry::Directory;
use crate::liveness::stall::StallClock;
use crate::metrics::Metrics;

/// A forwarded request (and a mirror's subscribe, a peer's ping) not
/// answered in this long gets `unavailable`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(8);

/// The node as the cluster code sees it: its own directory, what the other
/// nodes announced, the links, the mirrors and how they are sized, and the
/// stall clock the breaker discounts. Part of `NodeCtx`.
#[derive(Clone)]
pub struct ClusterCtx {
    /// This node's name.
    pub node: String,
    pub dir: Directory,
    pub metrics: Arc<Metrics>,
    pub stall: StallClock,
    /// The other nodes' sessions (empty on a single node).
    pub view: peer::view::ClusterView,
    /// The other nodes' links, for forwarded requests.
    pub peers: forward::Peers,
    /// This node's mirrors of other nodes' sessions.
    pub mirrors: mirror::Mirrors,
    pub mirror: mirror::MirrorSettings,
}

impl std::fmt::Debug for ClusterCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterCtx")
            .field("node", &self.node)
            .finish()
    }
}

/// How this node answers a request a peer forwarded: the request table's
/// answer, given to the peer actors by the front end (which the cluster
/// does not import).
/// A request answered at once, or handed back to be answered later.
pub enum Now {
    Answer(ServerMsg),
    Later(ClientMsg),
}

pub trait Answer: Send + Sync + 'static {
    /// The answer now, for a request answered at once and in order (or
    /// refused); a request handed back is `later`'s to answer.
    fn now(&self, msg: ClientMsg) -> Now;
    /// The answer of a request that waits.
    fn later(&self, msg: ClientMsg) -> Pin<Box<dyn Future<Output = ServerMsg>>>;
}
