//! `MirrorActor`: this node's copy of another node's session, started when
//! a client here first subscribes to it. It subscribes once to the owner
//! (over the owner's `PeerActor`, output on the data stream, with a credit
//! window of its own), keeps the owner's seqs in a ring of its own, and
//! serves every subscriber here through a `Publisher`, exactly as a local
//! session does. Snapshots and screens are rendered by the owner (see
//! docs/architecture.md, "Mirrors"). A mirror whose link drops keeps its
//! ring, tells its subscribers `unreachable`, and resumes from its own last
//! seq when the link is back; with no subscriber it lingers, then goes.
//! Its logic, the owner's life as named states, is the plain `core`; the
//! actor only carries out what the core asks and keeps the timers.

pub mod core;
mod upstream;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::ClusterCtx;
use crate::cluster::peer::PeerActor;
use crate::metrics::Metrics;
use crate::session::{Ack, ClaimSize, Deliver, Subscribe, Unsubscribe};
use core::{Ask, MirrorCore};

pub use core::{Owner, MIRROR_WINDOW};
pub use upstream::{FromOwner, ToOwner};

/// A trickle of output is acked this soon.
const ACK_DELAY: Duration = Duration::from_millis(5);

/// How long a mirror that left the node's map still answers subscribes
/// sent to it just before (they found it in the map).
const LEAVE_GRACE: Duration = Duration::from_secs(1);
/// How long the owner may take to answer a subscribe before the clients
/// waiting for the mirror's first one get `unavailable` (as a forwarded
/// request times out): a cut link is not known as such until the breaker
/// trips, which takes longer.
const ANSWER_WITHIN: Duration = crate::cluster::REQUEST_TIMEOUT;

/// How a node's mirrors are sized.
#[derive(Debug, Clone)]
pub struct MirrorSettings {
    pub ring_bytes: usize,
    pub ring_frames: usize,
    /// How long a mirror without subscribers stays.
    pub linger: Duration,
}

/// The node's mirrors by session id.
#[derive(Clone, Default)]
pub struct Mirrors(Arc<Mutex<HashMap<Arc<str>, Addr<MirrorActor>>>>);

impl std::fmt::Debug for Mirrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mirrors({})", self.len())
    }
}

impl Mirrors {
    pub fn len(&self) -> usize {
        self.0.lock().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The mirror of `id`, started with `make` when there is none.
    pub fn get_or_start(&self, id: &str, make: impl FnOnce() -> MirrorActor) -> Addr<MirrorActor> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(addr) = map.get(id).filter(|a| a.connected()) {
            return addr.clone();
        }
        let addr = make().start();
        map.insert(Arc::from(id), addr.clone());
        addr
    }

    /// Puts a leaving mirror back, unless another took its place.
    fn reclaim(&self, id: &str, addr: &Addr<MirrorActor>) -> bool {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(id) {
            Some(other) if other != addr && other.connected() => false,
            _ => {
                map.insert(Arc::from(id), addr.clone());
                true
            }
        }
    }

    fn remove(&self, id: &str, addr: &Addr<MirrorActor>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(id) == Some(addr) {
            map.remove(id);
        }
    }
}

pub struct MirrorActor {
    id: Arc<str>,
    owner: String,
    node: ClusterCtx,
    peer: Addr<PeerActor>,
    core: MirrorCore<Recipient<Deliver>>,
    linger: Duration,
    ack_scheduled: bool,
    /// Since when no subscriber is here.
    empty_since: Option<Instant>,
    /// Out of the node's map after its linger, stopping after a grace.
    leaving: bool,
    mirrors: Mirrors,
}

impl MirrorActor {
    pub fn new(id: &str, owner: String, node: ClusterCtx, peer: Addr<PeerActor>) -> Self {
        let id: Arc<str> = Arc::from(id);
        let settings = &node.mirror;
        let core = MirrorCore::new(
            id.clone(),
            &owner,
            (settings.ring_bytes, settings.ring_frames),
            node.metrics.clone(),
        );
        MirrorActor {
            id,
            owner,
            linger: settings.linger,
            mirrors: node.mirrors.clone(),
            core,
            node,
            peer,
            ack_scheduled: false,
            empty_since: None,
            leaving: false,
        }
    }

    /// Carries out what the core asks, in order.
    fn run(&mut self, ctx: &mut Context<Self>) {
        for ask in self.core.take_asks() {
            match ask {
                Ask::Subscribe { from_seq } => {
                    self.peer.do_send(ToOwner::Subscribe {
                        session: self.id.clone(),
                        from_seq,
                        window: MIRROR_WINDOW,
                        sink: ctx.address().recipient(),
                    });
                    let ask = self.core.asked();
                    ctx.run_later(ANSWER_WITHIN, move |act, ctx| {
                        act.core.unanswered(ask);
                        act.run(ctx);
                    });
                }
                Ask::Ack { seq } => self.peer.do_send(ToOwner::Ack {
                    session: self.id.clone(),
                    seq,
                }),
                Ask::AckSoon if !self.ack_scheduled => {
                    self.ack_scheduled = true;
                    ctx.run_later(ACK_DELAY, |act, ctx| {
                        act.ack_scheduled = false;
                        act.core.ack_due();
                        act.run(ctx);
                    });
                }
                Ask::AckSoon => {}
                Ask::Snapshot(w) => self.ask_snapshot(w, ctx),
                Ask::Probe { sub, from } => self.probe_ahead(sub, from, ctx),
                Ask::Repaint => self.peer.do_send(ToOwner::Repaint {
                    session: self.id.clone(),
                }),
                Ask::ClaimSize { size, apply } => self.peer.do_send(ToOwner::ClaimSize {
                    session: self.id.clone(),
                    size,
                    apply,
                }),
                Ask::Stop => ctx.stop(),
            }
        }
    }

    fn gone_empty(&mut self, ctx: &mut Context<Self>) {
        if !self.core.is_unwatched() {
            return;
        }
        self.empty_since = Some(Instant::now());
        let linger = self.linger;
        ctx.run_later(linger, move |act, ctx| {
            if act.empty_since.is_some_and(|t| t.elapsed() >= linger) {
                tracing::debug!(session = %act.id, "mirror: no subscriber for {linger:?}, going");
                act.leave(ctx);
            }
        });
    }

    /// Goes after its linger: first out of the node's map, so no new
    /// subscriber is sent here; a subscribe already on its way meanwhile
    /// keeps the mirror (back in the map if no other took its place, else
    /// answered `unavailable` so the client subscribes again).
    fn leave(&mut self, ctx: &mut Context<Self>) {
        self.leaving = true;
        self.mirrors.remove(&self.id, &ctx.address());
        ctx.run_later(LEAVE_GRACE, |act, ctx| {
            if act.leaving {
                ctx.stop();
            }
        });
    }
}

impl Actor for MirrorActor {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Context<Self>) {
        Metrics::gauge(&self.node.metrics.mirrors, 1);
        tracing::debug!(session = %self.id, owner = %self.owner, "mirror started");
    }

    fn stopped(&mut self, ctx: &mut Context<Self>) {
        Metrics::gauge(&self.node.metrics.mirrors, -1);
        self.core.shut();
        self.peer.do_send(ToOwner::End {
            session: self.id.clone(),
        });
        self.mirrors.remove(&self.id, &ctx.address());
    }
}

impl Handler<Subscribe> for MirrorActor {
    type Result = ();

    fn handle(&mut self, msg: Subscribe, ctx: &mut Context<Self>) {
        self.empty_since = None;
        if self.leaving {
            if !self.mirrors.reclaim(&self.id, &ctx.address()) {
                // Another mirror took this one's place: answered as one
                // that is out of reach, so the client subscribes again.
                self.core.shut_out(msg.into());
                return;
            }
            self.leaving = false;
        }
        self.core.subscribe(msg.into());
        self.run(ctx);
    }
}

impl Handler<Unsubscribe> for MirrorActor {
    type Result = ();

    fn handle(&mut self, msg: Unsubscribe, ctx: &mut Context<Self>) {
        self.core.unsubscribe(msg.sub);
        self.gone_empty(ctx);
    }
}

/// A viewer here sizes the session through its forwarded `resize`; the
/// mirror stands for this node's sizers at the owner, so that one leaving
/// gives the size back as one at the owner does.
impl Handler<ClaimSize> for MirrorActor {
    type Result = ();

    fn handle(&mut self, msg: ClaimSize, ctx: &mut Context<Self>) {
        self.core.claim_size(msg.sub, (msg.cols, msg.rows));
        self.run(ctx);
    }
}

impl Handler<Ack> for MirrorActor {
    type Result = ();

    fn handle(&mut self, msg: Ack, ctx: &mut Context<Self>) {
        self.core.ack(msg.sub, msg.seq);
        self.run(ctx);
    }
}

impl Handler<FromOwner> for MirrorActor {
    type Result = ();

    fn handle(&mut self, msg: FromOwner, ctx: &mut Context<Self>) {
        match msg {
            FromOwner::Data(data) => {
                termesh_transport::peer::hop_output("out_mirror", &data);
                self.core.from_owner(data)
            }
            FromOwner::Link(up) => self.core.link(up),
        }
        self.run(ctx);
    }
}
