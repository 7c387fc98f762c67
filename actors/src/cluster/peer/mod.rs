//! `PeerActor`: one per configured peer node. It owns the link's state as
//! the rest of the node sees it (up or down, RTT, counters), tells the peer
//! this node's own sessions (a full directory on every link up, then
//! deltas, never another node's sessions), and merges what the peer tells
//! of its own into the `ClusterView`, telling local watchers. The link's
//! I/O runs on the mesh thread (`link`).

pub mod breaker;
mod lane;
mod mirrors;
mod requests;
pub mod routes;
pub mod view;

pub use requests::{Forward, TimedOut};

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use termesh_transport::peer::{DataMsg, PeerMsg};
use tokio::sync::mpsc;

use super::Answer;
use crate::directory::registry::{Broadcast, Directory, Registry, Watch};
use crate::directory::watch::{WatchEvent, WatchQueue, WatchReady};

use crate::liveness::stall::StallClock;
use termesh_transport::peer::link::LinkEvent;
use termesh_transport::ServerMsg;
use view::ClusterView;

/// How often a link is pinged for its RTT.
const PING_EVERY: Duration = Duration::from_secs(2);
/// A ping unanswered this long counts as an unanswered request.
const PING_TIMEOUT: Duration = crate::cluster::REQUEST_TIMEOUT;
/// A ping tick this late means this node itself was just stalled.
const TICK_LATE: Duration = Duration::from_secs(1);

pub use termesh_transport::peer::stats::*;

pub struct PeerActor {
    name: String,
    /// This node's name: only its own sessions are told to the peer.
    me: String,
    out: Option<mpsc::UnboundedSender<PeerMsg>>,
    /// This side's data stream, while the link is up, and its fast data
    /// stream (a peer of protocol revision 3 or later: `lane`).
    data: Option<mpsc::UnboundedSender<DataMsg>>,
    fast: Option<mpsc::UnboundedSender<DataMsg>>,
    /// The peer protocol's revision on the link now (`claim_size` from 4).
    revision: u32,
    /// Large replies, each on a stream of its own, while the link is up.
    replies: Option<mpsc::UnboundedSender<PeerMsg>>,
    /// This node's sessions the peer mirrors: the subscription of each.
    upstream: HashMap<String, lane::Upstream>,
    /// This node's mirrors of the peer's sessions, shared with the link's
    /// reader, which routes the peer's output to them.
    mirrors: routes::MirrorRoutes,
    down_since: Option<Instant>,
    boot: Option<String>,
    dir: Directory,
    registry: Addr<Registry>,
    view: ClusterView,
    watch: WatchQueue,
    /// Pings awaiting their pong: when sent, and the stall total then.
    pings: HashMap<u64, (Instant, Duration)>,
    next_nonce: u64,
    pub stats: Arc<LinkStats>,
    /// Answers forwarded requests as this node would answer a client, and
    /// the stall clock the breaker discounts: given once the node is wired.
    node: Option<(Arc<dyn Answer>, StallClock)>,
    /// Requests sent to the peer, awaiting its reply.
    waiting: HashMap<u64, tokio::sync::oneshot::Sender<ServerMsg>>,
    /// Barriers awaiting their pong, by ping nonce.
    barriers: HashMap<u64, tokio::sync::oneshot::Sender<()>>,
    next_req: u64,
    breaker: breaker::Breaker,
    /// When the ping tick last ran (its lateness tells of this node's own stall).
    last_tick: Instant,
}

/// How the node answers forwarded requests, and its stall clock, given
/// once the node is wired.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetNode {
    pub answer: Arc<dyn Answer>,
    pub stall: StallClock,
}

impl PeerActor {
    pub fn new(
        name: String,
        me: String,
        dir: Directory,
        registry: Addr<Registry>,
        view: ClusterView,
        stats: Arc<LinkStats>,
    ) -> PeerActor {
        PeerActor {
            name,
            me,
            out: None,
            data: None,
            fast: None,
            revision: 0,
            replies: None,
            upstream: HashMap::new(),
            mirrors: routes::MirrorRoutes::default(),
            down_since: Some(Instant::now()),
            boot: None,
            dir,
            registry,
            view,
            watch: WatchQueue::default(),
            pings: HashMap::new(),
            next_nonce: 1,
            stats,
            node: None,
            waiting: HashMap::new(),
            barriers: HashMap::new(),
            next_req: 1,
            breaker: breaker::Breaker::default(),
            last_tick: ago(PING_EVERY),
        }
    }

    /// Whether the link is up and its task still takes messages.
    fn link_open(&self) -> bool {
        self.out.as_ref().is_some_and(|out| !out.is_closed())
    }

    /// Sends on the control stream. A link that has just ended drops the
    /// message; its `Down` follows and does the clean-up (clearing `out`
    /// here instead would make that `Down` look like a failed attempt and
    /// skip it, leaving the peer's mirror subscriptions running into the
    /// next link).
    fn send(&mut self, msg: PeerMsg) {
        if let Some(out) = &self.out {
            let _ = out.send(msg);
        }
    }

    /// Tells local watchers that these remote sessions changed.
    fn tell_local(&self, events: Vec<WatchEvent>) {
        if !events.is_empty() {
            self.registry.do_send(Broadcast(events));
        }
    }

    fn on_up(
        &mut self,
        out: mpsc::UnboundedSender<PeerMsg>,
        (data, fast): (
            mpsc::UnboundedSender<DataMsg>,
            Option<mpsc::UnboundedSender<DataMsg>>,
        ),
        replies: mpsc::UnboundedSender<PeerMsg>,
        boot: String,
    ) {
        let restarted = self.boot.as_ref().is_some_and(|b| *b != boot);
        tracing::info!(
            peer = %self.name,
            restarted,
            down_ms = self.down_since.map(|t| t.elapsed().as_millis() as u64),
            "peer link up"
        );
        self.out = Some(out);
        self.data = Some(data);
        self.fast = fast;
        self.replies = Some(replies);
        self.boot = Some(boot);
        self.down_since = None;
        self.stats.state.store(UP, Ordering::Relaxed);
        self.stats.breaker.store(CLOSED, Ordering::Relaxed);
        self.breaker.answered();
        self.stats.ups.fetch_add(1, Ordering::Relaxed);
        // Pending deltas are covered by the full directory.
        if let Ok(mut q) = self.watch.lock() {
            q.drain();
        }
        let sessions = self.dir.list();
        self.send(PeerMsg::Directory { sessions });
        let shown = self.view.set_up(&self.name, true);
        self.tell_local(shown.into_iter().map(WatchEvent::Changed).collect());
        // After the directory: a mirror's subscribe finds its session known.
        self.mirrors_link(true);
    }

    fn on_down(&mut self, reason: String) {
        self.data = None;
        self.fast = None;
        self.replies = None;
        if self.out.take().is_some() {
            tracing::warn!(peer = %self.name, %reason, "peer link down");
            self.mirrors_link(false);
            self.down_since = Some(Instant::now());
            self.stats.state.store(DOWN, Ordering::Relaxed);
            self.stats.downs.fetch_add(1, Ordering::Relaxed);
            self.pings.clear();
            // Requests in flight get no answer now: their callers get
            // `unavailable` (the senders drop).
            self.waiting.clear();
            self.barriers.clear();
            let shown = self.view.set_up(&self.name, false);
            self.tell_local(shown.into_iter().map(WatchEvent::Changed).collect());
        } else {
            self.stats.state.store(DOWN, Ordering::Relaxed);
            // Nothing of the peer's mirrors may run into the next link.
            self.end_upstream();
            tracing::debug!(peer = %self.name, %reason, "peer link attempt failed");
        }
    }

    fn on_msg(&mut self, msg: PeerMsg, ctx: &mut Context<Self>) {
        match msg {
            PeerMsg::Request { req, msg, .. } => {
                termesh_transport::hops::pass_input("in_peer", &msg);
                self.on_request(req, msg, ctx)
            }
            PeerMsg::Reply { req, msg } => {
                self.on_answer();
                if let Some(waiter) = self.waiting.remove(&req) {
                    let _ = waiter.send(msg);
                }
            }
            PeerMsg::Directory { sessions } => {
                let sessions: Vec<_> = sessions
                    .into_iter()
                    .filter(|s| self.may_announce(s))
                    .collect();
                let gone = self.view.replace(&self.name, sessions.clone());
                let mut events: Vec<WatchEvent> =
                    gone.into_iter().map(WatchEvent::Removed).collect();
                events.extend(sessions.into_iter().map(WatchEvent::Changed));
                self.tell_local(events);
            }
            PeerMsg::SessionChanged { session } if self.may_announce(&session) => {
                let id = session.id.clone();
                self.view.upsert(&self.name, *session);
                if let Some(shown) = self.view.shown(&self.name, &id) {
                    self.tell_local(vec![WatchEvent::Changed(shown)]);
                }
            }
            PeerMsg::SessionRemoved { session } => {
                if self.view.remove(&self.name, &session) {
                    self.tell_local(vec![WatchEvent::Removed(session)]);
                }
            }
            PeerMsg::Subscribe {
                session,
                from_seq,
                window,
            } => self.mirror_subscribe(session, from_seq, window, ctx),
            PeerMsg::Ack { session, seq } => self.mirror_ack(&session, seq),
            PeerMsg::Unsubscribe { session } => self.mirror_unsubscribe(&session),
            PeerMsg::Repaint { session } => self.mirror_repaint(&session),
            PeerMsg::ClaimSize {
                session,
                size,
                apply,
            } => self.mirror_claim(&session, size, apply),
            PeerMsg::Ping { nonce, .. } => {
                let stall_ms = self
                    .node
                    .as_ref()
                    .map(|(_, stall)| stall.total().as_millis() as u64);
                self.send(PeerMsg::Pong { nonce, stall_ms });
            }
            PeerMsg::Pong { nonce, stall_ms } => {
                if let Some(ms) = stall_ms {
                    self.stats.peer_stall_ms.store(ms, Ordering::Relaxed);
                }
                self.on_answer();
                if let Some(barrier) = self.barriers.remove(&nonce) {
                    let _ = barrier.send(());
                }
                if let Some((sent, _)) = self.pings.remove(&nonce) {
                    let rtt = sent.elapsed().as_micros().max(1) as u64;
                    self.stats.rtt_us.store(rtt, Ordering::Relaxed);
                }
            }
            other => {
                tracing::debug!(peer = %self.name, kind = other.kind(), "peer message not handled yet");
            }
        }
    }

    /// A peer tells only of sessions it owns: never one of this node's,
    /// nor one another node already owns (ids are cluster-unique; the
    /// first owner keeps it).
    fn may_announce(&self, session: &termesh_transport::SessionInfo) -> bool {
        let ok = session.node == self.name
            && self.dir.get(&session.id).is_none()
            && !self.view.claimed_by_other(&self.name, &session.id);
        if !ok {
            tracing::warn!(peer = %self.name, session = %session.id, node = %session.node, "a peer announced a session it does not own; ignored");
        }
        ok
    }

    fn stall_total(&self) -> Duration {
        self.node
            .as_ref()
            .map_or(Duration::ZERO, |(_, stall)| stall.total())
    }

    fn ping(&mut self, _: &mut Context<Self>) {
        if !self.link_open() {
            return;
        }
        let since = self.last_tick.elapsed();
        if since < PING_EVERY / 2 {
            // A tick of a burst after a stall (or the one at link up).
            return;
        }
        self.last_tick = Instant::now();
        let nonce = self.next_nonce;
        self.next_nonce += 1;
        // Right after this node was stalled, answers may still wait unread
        // and the stall may not be credited yet: unanswered pings are
        // judged at the next tick, not blamed on the peer now.
        let judge = since < PING_EVERY + TICK_LATE;
        // A ping unanswered in time counts for the breaker, once.
        let late: Vec<Duration> = if !judge {
            Vec::new()
        } else {
            let late = self
                .pings
                .values()
                .filter(|(sent, _)| sent.elapsed() >= PING_TIMEOUT)
                .map(|(_, stall)| *stall)
                .collect();
            self.pings
                .retain(|_, (sent, _)| sent.elapsed() < PING_TIMEOUT);
            late
        };
        for sent_at in late {
            self.timed_out(sent_at);
        }
        if !self.link_open() {
            return;
        }
        // Requests whose callers gave up are forgotten.
        self.waiting.retain(|_, waiter| !waiter.is_closed());
        self.pings
            .insert(nonce, (Instant::now(), self.stall_total()));
        self.send(PeerMsg::Ping {
            nonce,
            stall_ms: None,
        });
    }
}

impl Actor for PeerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.registry.do_send(Watch {
            conn: peer_watch_id(&self.name),
            queue: self.watch.clone(),
            sink: ctx.address().recipient(),
            local_only: true,
            known_remote: Vec::new(),
        });
        ctx.run_interval(PING_EVERY, Self::ping);
    }
}

/// The peer left the cluster (a reload removed it): its link is gone, its
/// sessions leave the directory (local watchers are told), and the actor
/// stops.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Forget;

impl Handler<Forget> for PeerActor {
    type Result = ();

    fn handle(&mut self, _: Forget, ctx: &mut Context<Self>) {
        self.on_down("removed from the cluster".into());
        self.end_upstream();
        let gone = self.view.forget(&self.name);
        tracing::info!(peer = %self.name, sessions = gone.len(), "peer removed from the cluster: its sessions leave the directory");
        self.tell_local(gone.into_iter().map(WatchEvent::Removed).collect());
        self.registry.do_send(crate::directory::registry::Unwatch {
            conn: peer_watch_id(&self.name),
        });
        ctx.stop();
    }
}

/// A link's event, handed to its peer's actor (the mesh's `LinkSink`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct FromLink(pub LinkEvent);

impl Handler<FromLink> for PeerActor {
    type Result = ();

    fn handle(&mut self, FromLink(event): FromLink, ctx: &mut Context<Self>) {
        match event {
            LinkEvent::Up {
                out,
                data,
                fast,
                replies,
                boot,
                revision,
            } => {
                self.revision = revision;
                self.on_up(out, (data, fast), replies, boot);
                // An RTT at once, not one ping interval later.
                self.last_tick = ago(PING_EVERY);
                self.ping(ctx);
            }
            // What a link sends after this side dropped it (a breaker
            // trip) is stale: a mirror subscribe taken now would outlive it.
            LinkEvent::Msg(msg) if self.link_open() => self.on_msg(*msg, ctx),
            LinkEvent::Msg(_) => {}
            // The link's sink routes these past this actor
            // (`MirrorRoutes::sink`); one handed here goes the same way.
            LinkEvent::Data(msg) => self.mirrors.route(msg),
            LinkEvent::Down { reason } => self.on_down(reason),
        }
    }
}

impl Handler<SetNode> for PeerActor {
    type Result = ();

    fn handle(&mut self, msg: SetNode, _: &mut Context<Self>) {
        self.node = Some((msg.answer, msg.stall));
    }
}

impl Handler<WatchReady> for PeerActor {
    type Result = ();

    /// This node's sessions changed: tell the peer (when the link is up).
    fn handle(&mut self, _: WatchReady, _: &mut Context<Self>) {
        self.tell_changes();
    }
}

/// Answered once the peer has applied every change of this node's
/// directory told so far: a ping sent after them, whose pong the peer
/// sends after handling them (the control stream is in order). Dropped
/// unanswered when the link is or goes down.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Barrier(pub tokio::sync::oneshot::Sender<()>);

impl Handler<Barrier> for PeerActor {
    type Result = ();

    fn handle(&mut self, msg: Barrier, _: &mut Context<Self>) {
        if !self.link_open() {
            return;
        }
        self.tell_changes();
        let nonce = self.next_nonce;
        self.next_nonce += 1;
        self.barriers.insert(nonce, msg.0);
        self.send(PeerMsg::Ping {
            nonce,
            stall_ms: None,
        });
    }
}

impl PeerActor {
    /// Sends the peer this node's directory changes queued so far.
    fn tell_changes(&mut self) {
        let events = self.watch.lock().map(|mut q| q.drain()).unwrap_or_default();
        if !self.link_open() {
            return;
        }
        for event in events {
            let msg = match event {
                WatchEvent::Changed(session) if session.node == self.me => {
                    PeerMsg::SessionChanged {
                        session: Box::new(session),
                    }
                }
                WatchEvent::Changed(_) => continue,
                WatchEvent::Removed(session) => PeerMsg::SessionRemoved { session },
            };
            self.send(msg);
        }
    }
}

/// `d` before now (now itself on a clock younger than `d`).
fn ago(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_sub(d).unwrap_or(now)
}

/// Watcher ids of peers, apart from connection ids (which count up from 1).
fn peer_watch_id(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    h.finish() | (1 << 63)
}
