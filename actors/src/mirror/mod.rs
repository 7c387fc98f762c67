//! `MirrorActor`: this node's copy of another node's session, started when
//! a client here first subscribes to it. It subscribes once to the owner
//! (over the owner's `PeerActor`, output on the data stream, with a credit
//! window of its own), keeps the owner's seqs in a ring of its own, and
//! serves every subscriber here through a `Publisher`, exactly as a local
//! session does. Snapshots and screens are rendered by the owner (see
//! docs/architecture.md, "Mirrors"). A mirror whose link drops keeps its
//! ring, tells its subscribers `unreachable`, and resumes from its own last
//! seq when the link is back; with no subscriber it lingers, then goes.

mod upstream;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use termesh_transport::peer::DataMsg;
use termesh_transport::EventKind;

use crate::forward::unreachable_node;
use crate::metrics::Metrics;
use crate::ops::NodeCtx;
use crate::peer::PeerActor;
use crate::publisher::{Publisher, SnapshotWanted};
use crate::session::{Ack, Delivery, Subscribe, Unsubscribe};

pub use upstream::{FromOwner, ToOwner};

/// Output the owner may send a mirror ahead of its acks.
pub const MIRROR_WINDOW: u64 = 2 << 20;

/// How long a mirror that left the node's map still answers subscribes
/// sent to it just before (they found it in the map).
const LEAVE_GRACE: Duration = Duration::from_secs(1);

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    /// No subscription at the owner (the link is down, or not asked yet).
    Down,
    /// Asked; waiting for `subscribed`.
    Asked,
    Live,
}

pub struct MirrorActor {
    id: Arc<str>,
    owner: String,
    node: NodeCtx,
    peer: Addr<PeerActor>,
    settings: MirrorSettings,
    /// `None` until the owner's first `subscribed` says where to start.
    publisher: Option<Publisher>,
    /// Subscribes that arrived before the publisher.
    pending: Vec<Subscribe>,
    /// Where the first subscription to the owner starts.
    first_from: Option<u64>,
    size: (u16, u16),
    link: Link,
    /// Subscribers were told `unreachable` and wait for `reachable`.
    told_unreachable: bool,
    /// What the owner sent that the ring cannot take yet (a snapshot pins
    /// it and it is full), in order; bounded by the window.
    held: VecDeque<DataMsg>,
    /// Output absorbed since the last ack to the owner.
    unacked: u64,
    ack_scheduled: bool,
    /// Snapshots to ask the owner for once the link is live.
    snapshots_waiting: Vec<SnapshotWanted>,
    /// Since when no subscriber is here.
    empty_since: Option<Instant>,
    /// Out of the node's map after its linger, stopping after a grace.
    leaving: bool,
    mirrors: Mirrors,
}

impl MirrorActor {
    pub fn new(id: &str, owner: String, node: NodeCtx, peer: Addr<PeerActor>) -> Self {
        MirrorActor {
            id: Arc::from(id),
            owner,
            settings: node.mirror.clone(),
            mirrors: node.mirrors.clone(),
            node,
            peer,
            publisher: None,
            pending: Vec::new(),
            first_from: None,
            size: (80, 24),
            link: Link::Down,
            told_unreachable: false,
            held: VecDeque::new(),
            unacked: 0,
            ack_scheduled: false,
            snapshots_waiting: Vec::new(),
            empty_since: None,
            leaving: false,
        }
    }

    fn metrics(&self) -> &Metrics {
        &self.node.metrics
    }

    /// Subscribes to the owner: after the ring's last seq, or where the
    /// first subscriber starts.
    fn ask_owner(&mut self, ctx: &mut Context<Self>) {
        let from_seq = match &self.publisher {
            Some(p) => Some(p.last_seq()),
            None => self.first_from,
        };
        self.link = Link::Asked;
        self.held.clear();
        self.unacked = 0;
        self.peer.do_send(ToOwner::Subscribe {
            session: self.id.clone(),
            from_seq,
            window: MIRROR_WINDOW,
            sink: ctx.address().recipient(),
        });
    }

    fn subscribe(&mut self, msg: Subscribe, ctx: &mut Context<Self>) {
        self.empty_since = None;
        let Some(publisher) = self.publisher.as_mut() else {
            if self.pending.is_empty() && self.link == Link::Down {
                self.first_from = msg.from_seq;
                self.ask_owner(ctx);
            }
            self.pending.push(msg);
            return;
        };
        // Older than this ring and nobody else here: start over from
        // there at the owner (which may still hold it) rather than resync.
        if let Some(n) = msg.from_seq {
            if publisher.is_empty() && n < publisher.last_seq() && !publisher.can_replay(n) {
                self.publisher = None;
                self.first_from = Some(n);
                self.pending.push(msg);
                self.ask_owner(ctx);
                return;
            }
        }
        let (sub, from_seq) = (msg.sub, msg.from_seq);
        let viewer = msg.kind == crate::publisher::Kind::Viewer;
        let done = publisher.subscribe(msg.into(), self.size);
        if done.resumed && viewer && self.link == Link::Live {
            // As at the owner (PROTOCOL.md section 7): in-place programs
            // redraw after a resume.
            self.peer.do_send(ToOwner::Repaint {
                session: self.id.clone(),
            });
        }
        if self.told_unreachable {
            publisher.send_to(sub, Delivery::Event(EventKind::Unreachable));
        }
        if publisher.is_waiting_ahead(sub) {
            if let Some(n) = from_seq {
                self.probe_ahead(sub, n, ctx);
            }
        }
        self.after_publish(ctx);
    }

    fn broadcast(&self, item: Delivery) {
        if let Some(p) = &self.publisher {
            p.broadcast(item);
        }
    }

    /// Applies (or holds) what the owner sent, in order.
    fn on_owner_data(&mut self, msg: DataMsg, ctx: &mut Context<Self>) {
        if let DataMsg::Subscribed { .. } = msg {
            return self.on_subscribed(msg, ctx);
        }
        let stale = match (&msg, self.link) {
            (_, Link::Live) => false,
            // The owner's answer to a subscribe for a session it no
            // longer has comes without `subscribed`.
            (DataMsg::Closed { .. }, Link::Asked) => false,
            // Left over from a link that is gone, or from the subscription
            // this mirror replaced: the owner sends `subscribed` before
            // anything else of the new one.
            _ => true,
        };
        if stale {
            return;
        }
        if let (DataMsg::Closed { removed, .. }, None) = (&msg, &self.publisher) {
            // Gone at the owner before this mirror's first subscription
            // (removed), or the owner is stopping (out of reach for now).
            let item = if *removed {
                Delivery::Closed { removed: true }
            } else {
                self.unavailable()
            };
            for sub in self.pending.drain(..) {
                sub.sink.do_send(crate::session::Deliver {
                    sub: sub.sub,
                    session: self.id.clone(),
                    item: item.clone(),
                });
            }
            ctx.stop();
            return;
        }
        self.held.push_back(msg);
        self.drain_held(ctx);
    }

    fn drain_held(&mut self, ctx: &mut Context<Self>) {
        while let Some(front) = self.held.front() {
            let Some(publisher) = self.publisher.as_ref() else {
                return;
            };
            if let DataMsg::Output { data, .. } = front {
                if publisher.would_pause(data.len()) {
                    return;
                }
            }
            let msg = self.held.pop_front().expect("non-empty");
            self.apply(msg, ctx);
        }
        self.after_publish(ctx);
    }

    fn apply(&mut self, msg: DataMsg, ctx: &mut Context<Self>) {
        let Some(publisher) = self.publisher.as_mut() else {
            return;
        };
        match msg {
            DataMsg::Output { seq, data, .. } => {
                let len = data.len() as u64;
                if publisher.is_finished() {
                    // Output after the end: the owner revived the session.
                    publisher.resume();
                }
                let data = bytes::Bytes::from(data);
                match publisher.push_at(seq, data.clone()) {
                    Ok(_) => {}
                    // Sent twice (a subscription that overlapped the last).
                    Err(expected) if seq < expected => return,
                    Err(expected) => {
                        // Subscribers that needed the missing frames
                        // resync; the frame itself is kept.
                        tracing::warn!(session = %self.id, seq, expected, "mirror: a hole in the owner's output; resyncing");
                        publisher.jump(seq - 1);
                        let _ = publisher.push_at(seq, data);
                    }
                }
                self.unacked += len;
                self.ack_later(ctx);
            }
            DataMsg::Resync { last_seq, .. } => {
                if last_seq < publisher.last_seq() {
                    // Seqs never go back (PROTOCOL.md section 4): an owner
                    // that says so is wrong, and its older seqs are not
                    // taken as new ones.
                    tracing::error!(session = %self.id, last_seq, ours = publisher.last_seq(), "mirror: the owner resynced below this mirror's seqs; ignored");
                    return;
                }
                publisher.jump(last_seq);
                self.unacked += 1;
                self.ack_later(ctx);
            }
            DataMsg::Event { event, .. } => match event {
                EventKind::Exited { .. } | EventKind::Lost => publisher.finish(event),
                EventKind::Resized { cols, rows } => {
                    self.size = (cols, rows);
                    publisher.broadcast(Delivery::Event(event));
                }
                other => publisher.broadcast(Delivery::Event(other)),
            },
            DataMsg::Closed { removed: true, .. } => {
                publisher.broadcast(Delivery::Closed { removed: true });
                ctx.stop();
            }
            // The owner is stopping: for viewers here that is a link loss
            // (PROTOCOL.md section 13), and the mirror subscribes again
            // when the owner is back.
            DataMsg::Closed { removed: false, .. } => self.owner_away(),
            DataMsg::Subscribed { .. } => {}
        }
    }

    fn on_subscribed(&mut self, msg: DataMsg, ctx: &mut Context<Self>) {
        let DataMsg::Subscribed {
            last_seq,
            cols,
            rows,
            ..
        } = msg
        else {
            return;
        };
        self.size = (cols, rows);
        self.link = Link::Live;
        if self.publisher.is_none() {
            let start = self.first_from.unwrap_or(last_seq);
            self.publisher = Some(Publisher::new(
                self.id.clone(),
                crate::ring::Ring::starting_at(
                    start,
                    self.settings.ring_bytes,
                    self.settings.ring_frames,
                ),
                true,
                self.node.metrics.clone(),
            ));
            for sub in std::mem::take(&mut self.pending) {
                self.subscribe(sub, ctx);
            }
        }
        if self.told_unreachable {
            self.told_unreachable = false;
            self.broadcast(Delivery::Event(EventKind::Reachable));
        }
        for w in std::mem::take(&mut self.snapshots_waiting) {
            self.ask_snapshot(w, ctx);
        }
        self.after_publish(ctx);
    }

    fn on_link(&mut self, up: bool, ctx: &mut Context<Self>) {
        if up {
            if self.link == Link::Down && (self.publisher.is_some() || !self.pending.is_empty()) {
                self.ask_owner(ctx);
            }
            return;
        }
        if self.publisher.is_none() {
            // Nothing to keep yet: the subscribers waiting for the first
            // subscription are answered now (PROTOCOL.md section 13).
            let item = self.unavailable();
            for sub in self.pending.drain(..) {
                sub.sink.do_send(crate::session::Deliver {
                    sub: sub.sub,
                    session: self.id.clone(),
                    item: item.clone(),
                });
            }
            ctx.stop();
            return;
        }
        self.owner_away();
    }

    /// The owner is out of reach (link down, or stopping): the ring is
    /// kept, subscribers are told `unreachable` once, and the mirror waits
    /// for the link to come back.
    fn owner_away(&mut self) {
        self.link = Link::Down;
        self.held.clear();
        if self.publisher.is_some() && !self.told_unreachable {
            self.told_unreachable = true;
            self.broadcast(Delivery::Event(EventKind::Unreachable));
        }
    }

    fn unavailable(&self) -> Delivery {
        Delivery::Failed {
            code: termesh_transport::ErrorCode::Unavailable,
            message: unreachable_node(&self.owner).to_string(),
        }
    }

    /// Acks what the ring absorbed: at once past a quarter window, else
    /// shortly (so a trickle of output is acked too).
    fn ack_later(&mut self, ctx: &mut Context<Self>) {
        if self.unacked >= MIRROR_WINDOW / 4 {
            self.ack_now();
        } else if !self.ack_scheduled {
            self.ack_scheduled = true;
            ctx.run_later(Duration::from_millis(5), |act, _| {
                act.ack_scheduled = false;
                act.ack_now();
            });
        }
    }

    fn ack_now(&mut self) {
        if self.unacked == 0 || self.link != Link::Live {
            return;
        }
        if let Some(p) = &self.publisher {
            self.unacked = 0;
            self.peer.do_send(ToOwner::Ack {
                session: self.id.clone(),
                seq: p.last_seq(),
            });
        }
    }

    /// Asks the owner for the snapshots the publisher wants.
    fn after_publish(&mut self, ctx: &mut Context<Self>) {
        let Some(publisher) = self.publisher.as_mut() else {
            return;
        };
        let wanted = publisher.take_wanted();
        Metrics::add(&self.metrics().snapshots, wanted.len() as u64);
        for w in wanted {
            self.ask_snapshot(w, ctx);
        }
    }

    fn gone_empty(&mut self, ctx: &mut Context<Self>) {
        if self.publisher.as_ref().is_some_and(|p| !p.is_empty()) || !self.pending.is_empty() {
            return;
        }
        self.empty_since = Some(Instant::now());
        let linger = self.settings.linger;
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
        if let Some(p) = self.publisher.as_mut() {
            p.clear();
        }
        let item = self.unavailable();
        for sub in self.pending.drain(..) {
            sub.sink.do_send(crate::session::Deliver {
                sub: sub.sub,
                session: self.id.clone(),
                item: item.clone(),
            });
        }
        self.peer.do_send(ToOwner::End {
            session: self.id.clone(),
        });
        self.mirrors.remove(&self.id, &ctx.address());
    }
}

impl Handler<Subscribe> for MirrorActor {
    type Result = ();

    fn handle(&mut self, msg: Subscribe, ctx: &mut Context<Self>) {
        if self.leaving {
            if !self.mirrors.reclaim(&self.id, &ctx.address()) {
                msg.sink.do_send(crate::session::Deliver {
                    sub: msg.sub,
                    session: self.id.clone(),
                    item: self.unavailable(),
                });
                return;
            }
            self.leaving = false;
        }
        self.subscribe(msg, ctx);
    }
}

impl Handler<Unsubscribe> for MirrorActor {
    type Result = ();

    fn handle(&mut self, msg: Unsubscribe, ctx: &mut Context<Self>) {
        self.pending.retain(|s| s.sub != msg.sub);
        if let Some(p) = self.publisher.as_mut() {
            p.unsubscribe(msg.sub);
        }
        self.gone_empty(ctx);
    }
}

impl Handler<Ack> for MirrorActor {
    type Result = ();

    fn handle(&mut self, msg: Ack, ctx: &mut Context<Self>) {
        if let Some(p) = self.publisher.as_mut() {
            p.ack(msg.sub, msg.seq);
        }
        self.after_publish(ctx);
    }
}

impl Handler<FromOwner> for MirrorActor {
    type Result = ();

    fn handle(&mut self, msg: FromOwner, ctx: &mut Context<Self>) {
        match msg {
            FromOwner::Data(data) => self.on_owner_data(data, ctx),
            FromOwner::Link(up) => self.on_link(up, ctx),
        }
    }
}
