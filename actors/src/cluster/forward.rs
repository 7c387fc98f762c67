//! Requests that travel between nodes, on the node a client is connected
//! to: which node owns what the request names, and the forward itself (to
//! that owner's `PeerActor`, bounded by the request timeout). The owner
//! answers with the request table's answer (`request`), exactly as for a
//! local client, so replies and error codes are the same from any node.

use std::sync::{Arc, RwLock};

use actix::Addr;
use termesh_transport::{ClientMsg, ErrorCode, ServerMsg};

use super::ClusterCtx;
use crate::cluster::mirror::MirrorActor;
use crate::cluster::peer::{Forward, PeerActor};
use crate::error::ApiError;
use crate::output::feed::Feed;

pub use super::REQUEST_TIMEOUT;

/// A configured peer as the rest of the node reaches it.
#[derive(Debug, Clone)]
pub struct PeerHandle {
    pub entry: termesh_config::NodeEntry,
    pub addr: Addr<PeerActor>,
    pub stats: Arc<crate::cluster::peer::LinkStats>,
}

/// Every configured peer, by node name, in the config's order.
#[derive(Debug, Clone, Default)]
pub struct Peers(Arc<RwLock<Vec<PeerHandle>>>);

impl Peers {
    pub fn insert(
        &self,
        entry: termesh_config::NodeEntry,
        addr: Addr<PeerActor>,
        stats: Arc<crate::cluster::peer::LinkStats>,
    ) {
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(PeerHandle { entry, addr, stats });
    }

    /// Takes `name` out (a reload removed it from the cluster).
    pub fn remove(&self, name: &str) -> Option<PeerHandle> {
        let mut peers = self.0.write().unwrap_or_else(|p| p.into_inner());
        let at = peers.iter().position(|p| p.entry.name == name)?;
        Some(peers.remove(at))
    }

    pub fn get(&self, name: &str) -> Option<Addr<PeerActor>> {
        self.all()
            .into_iter()
            .find(|p| p.entry.name == name)
            .map(|p| p.addr)
    }

    pub fn all(&self) -> Vec<PeerHandle> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Where a request goes.
pub enum Route {
    Here,
    Owner(String),
}

impl ClusterCtx {
    /// Who answers a request about `session`: this node when it owns it
    /// (or nobody does: the local answer is `not_found`), else its owner;
    /// `unavailable` when the owner's link is down.
    pub fn route_session(&self, session: &str) -> Result<Route, ApiError> {
        if self.dir.get(session).is_some() {
            return Ok(Route::Here);
        }
        if self.dir.closing() {
            return Err(shutting_down(&self.node));
        }
        match self.view.get(session) {
            Some((info, true)) => Ok(Route::Owner(info.node)),
            Some((info, false)) => Err(unreachable_node(&info.node)),
            None => match self.unheard() {
                unheard if unheard.is_empty() => Ok(Route::Here),
                unheard => Err(maybe_theirs(session, &unheard)),
            },
        }
    }

    /// Peers that have not sent their directory since this node started
    /// (their links not up yet): an id unknown here may be theirs.
    fn unheard(&self) -> Vec<String> {
        self.peers
            .all()
            .into_iter()
            .map(|p| p.entry.name)
            .filter(|name| !self.view.heard(name))
            .collect()
    }

    /// The feed of another node's session: its mirror here, started on
    /// first use; `unavailable` while the owner's link is down.
    pub fn mirror_feed(&self, id: &str) -> Result<(Arc<str>, Feed), ApiError> {
        let Some((info, up)) = self.view.get(id) else {
            return Err(match self.unheard() {
                unheard if unheard.is_empty() => ApiError::not_found(id),
                unheard => maybe_theirs(id, &unheard),
            });
        };
        if !up {
            return Err(unreachable_node(&info.node));
        }
        let peer = self
            .peers
            .get(&info.node)
            .ok_or_else(|| unreachable_node(&info.node))?;
        let addr = self.mirrors.get_or_start(&info.id, || {
            MirrorActor::new(&info.id, info.node.clone(), self.clone(), peer)
        });
        Ok((Arc::from(info.id.as_str()), Feed::of(&addr)))
    }

    /// Who runs a `create` naming `node`.
    pub fn route_create(&self, node: Option<&str>) -> Result<Route, ApiError> {
        match node {
            None => Ok(Route::Here),
            Some(n) if n == self.node => Ok(Route::Here),
            Some(n) => match self.peers.get(n) {
                Some(_) => Ok(Route::Owner(n.to_string())),
                None => Err(ApiError::new(
                    ErrorCode::NotFound,
                    format!("no node `{n}` in this cluster"),
                )),
            },
        }
    }

    /// Sends `msg` to `owner` and waits (bounded) for its answer: the
    /// message the client gets, an `error` included. The request is queued
    /// to the peer before this returns (`do_send`: a busy peer actor's
    /// mailbox cannot hold it back), so requests sent one after another
    /// reach the owner in that order, and a client that leaves at once
    /// (its connection stops, dropping this future) still had it sent.
    pub fn forward(
        &self,
        owner: &str,
        msg: ClientMsg,
    ) -> impl std::future::Future<Output = Result<ServerMsg, ApiError>> + 'static {
        // The forward spends one hop of the budget; the owner answers
        // what it is sent.
        let hops = termesh_transport::peer::HOP_BUDGET - 1;
        let owner = owner.to_string();
        let sent_at = self.stall.total();
        let (reply, answer) = tokio::sync::oneshot::channel();
        let peer = self
            .peers
            .get(&owner)
            .inspect(|peer| peer.do_send(Forward { msg, hops, reply }));
        let view = self.view.clone();
        async move {
            let peer = peer.ok_or_else(|| unreachable_node(&owner))?;
            match tokio::time::timeout(REQUEST_TIMEOUT, answer).await {
                Ok(Ok(ServerMsg::Created { id, session })) => {
                    // Known here at once, before the owner's delta arrives,
                    // so the client's next request finds it.
                    view.upsert(&owner, session.clone());
                    Ok(ServerMsg::Created { id, session })
                }
                Ok(Ok(answer)) => Ok(answer),
                // Dropped unanswered: the link is down, or went down.
                Ok(Err(_)) => Err(unreachable_node(&owner)),
                Err(_) => {
                    peer.do_send(crate::cluster::peer::TimedOut { sent_at });
                    Err(ApiError::new(
                        ErrorCode::Unavailable,
                        format!(
                            "node `{owner}` did not answer within {}s",
                            REQUEST_TIMEOUT.as_secs()
                        ),
                    ))
                }
            }
        }
    }
}

/// An id this node does not know while `unheard` peers have not told it
/// their sessions: not `not_found`, since it may be theirs (PROTOCOL.md
/// section 13: what a client sees does not depend on the node).
fn maybe_theirs(id: &str, unheard: &[String]) -> ApiError {
    ApiError::new(
        ErrorCode::Unavailable,
        format!(
            "no session `{id}` here, and node(s) {} have not told this node their sessions yet: it may be theirs",
            unheard.join(", ")
        ),
    )
}

/// What a node shutting down answers about any session: it is going away
/// (its sessions are not removed), so `unavailable`.
pub fn shutting_down(node: &str) -> ApiError {
    ApiError::new(
        ErrorCode::Unavailable,
        format!("node `{node}` is shutting down"),
    )
}

pub fn unreachable_node(node: &str) -> ApiError {
    ApiError::new(
        ErrorCode::Unavailable,
        format!("node `{node}` cannot be reached now"),
    )
}
