//! The publisher: the output side of one session, local or mirrored. It
//! owns the replay ring, every subscriber and its credit, gap refill,
//! resync, which snapshots are wanted and the ring pins they imply. It
//! computes no screen and runs no timer: its owner (the `SessionActor`,
//! fed by the PTY, or a `MirrorActor`, fed by the owner node) takes the
//! wanted snapshots, computes or fetches them, and hands them back.
//!
//! A size change (`resized`) reaches each subscriber in order with its
//! output: after the frames printed before it and before those after it,
//! however far behind the subscriber is, and again on a resume across it
//! (`sizes`).
//!
//! Subscribers are clients (`Kind::Viewer`: snapshots on a fresh attach
//! and on resync) or mirrors of other nodes (`Kind::Mirror`: never a
//! snapshot; a gap is `ResyncRequired{last_seq}` and delivery continues
//! after `last_seq`, so the mirror jumps there and resyncs its own clients).

mod snapshots;
#[cfg(test)]
mod tests;

mod sizes;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use actix::Recipient;
use bytes::Bytes;
use termesh_transport::EventKind;

use crate::metrics::Metrics;
use crate::output::credit::Credit;
use crate::output::ring::{Frame, Ring};
use crate::output::vocab::{Deliver, Delivery, ScreenResult, SubId};

/// Where a subscriber's deliveries go.
pub trait Sink: Clone {
    fn deliver(&self, msg: Deliver);
}

impl Sink for Recipient<Deliver> {
    fn deliver(&self, msg: Deliver) {
        self.do_send(msg);
    }
}

pub use crate::output::vocab::Kind;

/// Whose publisher this is, which decides what a resume from a seq the
/// ring has not reached means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The session's own node: it has given every seq there is, so a
    /// `from_seq` past the last is a client's mistake and resyncs.
    Owner,
    /// Another node's copy, behind its owner: a `from_seq` past the last
    /// waits for that seq to arrive.
    Mirror,
}

/// A subscribe, already validated.
pub struct Subscription<S> {
    pub sub: SubId,
    pub sink: S,
    pub req_id: u64,
    pub from_seq: Option<u64>,
    pub window: u64,
    pub scrollback: usize,
    pub kind: Kind,
}

impl From<crate::output::vocab::Subscribe> for Subscription<Recipient<Deliver>> {
    fn from(msg: crate::output::vocab::Subscribe) -> Self {
        Subscription {
            sub: msg.sub,
            sink: msg.sink,
            req_id: msg.req_id,
            from_seq: msg.from_seq,
            window: msg.window,
            scrollback: msg.scrollback,
            kind: msg.kind,
        }
    }
}

/// A snapshot the publisher wants for a subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotWanted {
    pub sub: SubId,
    pub generation: u64,
    pub scrollback: usize,
}

/// What `subscribe` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subscribed {
    /// A subscriber that was not there before.
    pub added: bool,
    /// A resume (`from_seq` given), served from the ring or resynced.
    pub resumed: bool,
}

struct Subscriber<S> {
    sink: S,
    kind: Kind,
    credit: Credit,
    /// Bumped when a re-subscribe replaces the subscription, so a snapshot
    /// computed for the old one is not delivered to the new one.
    generation: u64,
    /// Waiting for a snapshot before output resumes.
    awaiting_snapshot: bool,
    /// Credit still outstanding from before a resync: the client may still
    /// ack those frames; cleared by an ack at or past the restart.
    prior: Option<(u64, Credit)>,
    /// A resume from a seq the ring has not reached yet (a mirror behind
    /// the owner): delivery starts after it once it arrives.
    start_after: Option<u64>,
    /// The `exited` event was sent to this subscriber.
    told_exit: bool,
    /// The last size change it was told of (`SizeMark::id`), or knew
    /// from its snapshot or its resume.
    told_size: u64,
}

pub struct Publisher<S: Sink = Recipient<Deliver>> {
    id: Arc<str>,
    ring: Ring,
    subs: HashMap<SubId, Subscriber<S>>,
    scratch: Vec<SubId>,
    /// How the session ended, once it has: each subscriber is told after
    /// the last frame it is sent.
    ended: Option<EventKind>,
    wanted: Vec<SnapshotWanted>,
    /// The ring seq each wanted snapshot pins, by (sub, generation).
    pins: HashMap<(SubId, u64), u64>,
    /// Snapshots taken at a seq the ring has not reached yet (a mirror's,
    /// from the owner): delivered when it does.
    parked: Vec<(SubId, u64, ScreenResult)>,
    /// The latest size changes, oldest first.
    sizes: VecDeque<sizes::SizeMark>,
    next_size: u64,
    mode: Mode,
    metrics: Arc<Metrics>,
}

impl<S: Sink> Publisher<S> {
    pub fn new(id: Arc<str>, ring: Ring, mode: Mode, metrics: Arc<Metrics>) -> Self {
        Publisher {
            id,
            ring,
            subs: HashMap::new(),
            scratch: Vec::new(),
            ended: None,
            wanted: Vec::new(),
            pins: HashMap::new(),
            parked: Vec::new(),
            sizes: VecDeque::new(),
            next_size: 1,
            mode,
            metrics,
        }
    }

    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    pub fn last_seq(&self) -> u64 {
        self.ring.last_seq()
    }

    /// Subscribers.
    pub fn len(&self) -> usize {
        self.subs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.subs.is_empty()
    }

    pub fn is_subscribed(&self, sub: SubId) -> bool {
        self.subs.contains_key(&sub)
    }

    /// The subscriber waits for a resume seq the ring has not reached.
    pub fn is_waiting_ahead(&self, sub: SubId) -> bool {
        self.subs.get(&sub).is_some_and(|s| s.start_after.is_some())
    }

    /// Whether pushing `len` bytes now would evict frames a wanted
    /// snapshot needs: the feeder then holds its input until a snapshot
    /// is done.
    pub fn would_pause(&self, len: usize) -> bool {
        self.ring.would_evict_pinned(len)
    }

    /// The session ended: `event` (`exited`) goes to each subscriber after
    /// its last frame.
    pub fn finish(&mut self, event: EventKind) {
        self.ended = Some(event);
        for id in self.sub_ids() {
            self.tell_exit(id);
        }
    }

    /// The session runs again (revived): a later end is told anew.
    pub fn resume(&mut self) {
        self.ended = None;
        for sub in self.subs.values_mut() {
            sub.told_exit = false;
        }
    }

    pub fn is_finished(&self) -> bool {
        self.ended.is_some()
    }

    /// Appends output with the next seq.
    pub fn push(&mut self, data: Bytes) -> Frame {
        let frame = self.ring.push(data);
        self.after_push();
        frame
    }

    /// Appends output with the seq it was given (a mirror's, from the
    /// owner); `Err(expected)` when it does not follow the last one.
    pub fn push_at(&mut self, seq: u64, data: Bytes) -> Result<Frame, u64> {
        let frame = self.ring.push_at(seq, data)?;
        self.after_push();
        Ok(frame)
    }

    /// Continues after `seq`, keeping what the ring holds for the screen
    /// (a restarted node skipping seqs it may have sent unstored):
    /// subscribers that need a skipped seq resync.
    pub fn skip_to(&mut self, seq: u64) {
        self.ring.skip_to(seq);
        self.after_push();
    }

    /// The feed skipped to `seq` (the owner resynced a mirror): what the
    /// ring held is gone, and subscribers that needed it resync.
    pub fn jump(&mut self, seq: u64) {
        self.ring.jump_to(seq);
        self.after_push();
    }

    fn after_push(&mut self) {
        let last = self.ring.last_seq();
        if self.parked.iter().any(|(_, _, r)| r.seq <= last) {
            let parked = std::mem::take(&mut self.parked);
            for (sub, generation, result) in parked {
                self.snapshot_done(sub, generation, result);
            }
        }
        self.pump_all();
    }

    pub fn pump_all(&mut self) {
        // A reused list: the output path allocates nothing per frame here.
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        ids.extend(self.subs.keys().copied());
        for id in &ids {
            self.pump(*id);
        }
        self.scratch = ids;
    }

    fn sub_ids(&self) -> Vec<SubId> {
        self.subs.keys().copied().collect()
    }

    fn send(&self, sub: SubId, sink: &S, item: Delivery) {
        sink.deliver(Deliver {
            sub,
            session: self.id.clone(),
            item,
        });
    }

    /// Sends one subscriber `item` (an event).
    pub fn send_to(&self, id: SubId, item: Delivery) {
        if let Some(sub) = self.subs.get(&id) {
            self.send(id, &sub.sink, item);
        }
    }

    /// Whether the ring holds every frame after `seq`.
    pub fn can_replay(&self, seq: u64) -> bool {
        self.ring.replay_from(seq).is_ok()
    }

    /// Sends every subscriber `item` (an event, or `Closed`).
    pub fn broadcast(&self, item: Delivery) {
        for (id, sub) in &self.subs {
            self.send(*id, &sub.sink, item.clone());
        }
    }

    /// Attaches (or re-arms) a subscription; see PROTOCOL.md section 7.
    /// `size` is the session's terminal size for the `subscribed` reply.
    pub fn subscribe(&mut self, req: Subscription<S>, size: (u16, u16)) -> Subscribed {
        let existing = self.subs.get(&req.sub).map(|s| s.generation);
        let subscribed = Delivery::Subscribed {
            id: req.req_id,
            last_seq: self.ring.last_seq(),
            oldest_seq: self.ring.first_resumable(),
            cols: size.0,
            rows: size.1,
        };
        if existing.is_some() && req.from_seq.is_none() {
            // Not a recovery request: just answer.
            self.send(req.sub, &req.sink, subscribed);
            return Subscribed {
                added: false,
                resumed: false,
            };
        }
        if existing.is_none() {
            Metrics::gauge(&self.metrics.subscribers, 1);
        } else {
            // The old generation's snapshot is wanted no more: a storm of
            // resubscribes costs one snapshot, the last one's.
            self.wanted.retain(|w| w.sub != req.sub);
            self.pins.retain(|(sub, _), _| *sub != req.sub);
            self.repin();
        }
        let generation = existing.map_or(0, |g| g + 1);
        let (last, end) = (self.ring.last_seq(), self.ring.end_offset());
        let mut sub = Subscriber {
            sink: req.sink.clone(),
            kind: req.kind,
            credit: Credit::new(req.window, last, end),
            generation,
            awaiting_snapshot: false,
            prior: None,
            start_after: None,
            told_exit: false,
            // What it gets first (the snapshot, or the `subscribed` size)
            // may not have one marked right after the last frame.
            told_size: self.size_known_before(last),
        };
        // Registered before replaying, so nothing published meanwhile is
        // missed (the owner is single-threaded: nothing is).
        self.send(req.sub, &req.sink, subscribed);
        match req.from_seq {
            None if req.kind == Kind::Viewer => {
                sub.awaiting_snapshot = true;
                self.want_snapshot(req.sub, generation, req.scrollback);
            }
            // A mirror starts with what comes next.
            None => {}
            Some(n) => match self.ring.offset_after(n) {
                Some(offset) if self.ring.replay_from(n).is_ok() => {
                    sub.credit = Credit::new(req.window, n, offset);
                    sub.told_size = self.size_known_before(n);
                }
                _ if n > last && self.mode == Mode::Mirror => sub.start_after = Some(n),
                _ => {
                    self.send(
                        req.sub,
                        &req.sink,
                        Delivery::ResyncRequired { last_seq: last },
                    );
                    Metrics::add(&self.metrics.resyncs, 1);
                    if req.kind == Kind::Viewer {
                        sub.awaiting_snapshot = true;
                        self.want_snapshot(req.sub, generation, req.scrollback);
                    }
                }
            },
        }
        self.subs.insert(req.sub, sub);
        self.pump(req.sub);
        Subscribed {
            added: existing.is_none(),
            resumed: req.from_seq.is_some(),
        }
    }

    /// A subscriber waiting ahead (`start_after`) whose seq the owner
    /// never reached: resync it now.
    pub fn resync_waiting(&mut self, id: SubId) {
        let Some(sub) = self.subs.get_mut(&id) else {
            return;
        };
        if sub.start_after.take().is_none() {
            return;
        }
        let (last, end) = (self.ring.last_seq(), self.ring.end_offset());
        sub.credit.reset_to(last, end);
        let (sink, kind, generation) = (sub.sink.clone(), sub.kind, sub.generation);
        self.send(id, &sink, Delivery::ResyncRequired { last_seq: last });
        Metrics::add(&self.metrics.resyncs, 1);
        if kind == Kind::Viewer {
            if let Some(sub) = self.subs.get_mut(&id) {
                sub.awaiting_snapshot = true;
            }
            self.want_snapshot(id, generation, 0);
        }
    }

    /// Removes a subscriber; whether it was there.
    pub fn unsubscribe(&mut self, sub: SubId) -> bool {
        let gone = self.subs.remove(&sub).is_some();
        if gone {
            Metrics::gauge(&self.metrics.subscribers, -1);
        }
        gone
    }

    /// Removes every subscriber (the owner stops); how many there were.
    pub fn clear(&mut self) -> usize {
        let n = self.subs.len();
        Metrics::gauge(&self.metrics.subscribers, -(n as i64));
        self.subs.clear();
        n
    }

    /// A cumulative ack.
    pub fn ack(&mut self, id: SubId, seq: u64) {
        let Some(sub) = self.subs.get_mut(&id) else {
            return;
        };
        match &mut sub.prior {
            Some((restart, prior)) if seq < *restart => {
                prior.on_ack(seq, &self.ring);
                if prior.in_flight() == 0 {
                    sub.prior = None;
                }
            }
            _ => {
                sub.prior = None;
                if sub.start_after.is_none() {
                    sub.credit.on_ack(seq, &self.ring);
                }
            }
        }
        self.pump(id);
    }

    /// Sends a subscriber what its credit allows; starts a resync when the
    /// next frame it needs has left the ring and its window has room.
    fn pump(&mut self, id: SubId) {
        let Some(sub) = self.subs.get_mut(&id) else {
            return;
        };
        if sub.awaiting_snapshot {
            return;
        }
        if let Some(after) = sub.start_after {
            if self.ring.last_seq() < after {
                return;
            }
            sub.start_after = None;
            match self.ring.offset_after(after) {
                Some(offset) => sub.credit = Credit::new(sub.credit.window(), after, offset),
                // Gone already (the ring jumped past it).
                None => {
                    self.resync(id);
                    return;
                }
            }
        }
        let prior = sub.prior.as_ref().map_or(0, |(_, c)| c.in_flight());
        let mut sent_bytes = 0u64;
        let mut sent_frames = 0u64;
        let mut gap = false;
        loop {
            sizes::tell(&self.sizes, &self.id, id, sub, sub.credit.sent_seq());
            let next = sub.credit.sent_seq() + 1;
            if next > self.ring.last_seq() {
                break;
            }
            if sub.credit.in_flight() + prior >= sub.credit.window() {
                break;
            }
            let Some(frame) = self.ring.get(next) else {
                // The gap left the replay window.
                gap = true;
                break;
            };
            sub.credit.on_sent(frame);
            sent_bytes += frame.data.len() as u64;
            sent_frames += 1;
            sub.sink.deliver(Deliver {
                sub: id,
                session: self.id.clone(),
                item: Delivery::Output(frame.clone()),
            });
        }
        Metrics::add(&self.metrics.bytes_out, sent_bytes);
        Metrics::add(&self.metrics.frames_out, sent_frames);
        if gap {
            self.resync(id);
        }
        self.tell_exit(id);
    }

    /// The next frame a subscriber needs is gone: `resync_required`, then a
    /// snapshot (a viewer) or what follows the last seq (a mirror).
    fn resync(&mut self, id: SubId) {
        let (last, end) = (self.ring.last_seq(), self.ring.end_offset());
        let Some(sub) = self.subs.get_mut(&id) else {
            return;
        };
        let (sink, kind, generation) = (sub.sink.clone(), sub.kind, sub.generation);
        Metrics::add(&self.metrics.resyncs, 1);
        match kind {
            Kind::Viewer => {
                sub.awaiting_snapshot = true;
                self.send(id, &sink, Delivery::ResyncRequired { last_seq: last });
                self.want_snapshot(id, generation, 0);
            }
            Kind::Mirror => {
                restart_credit(sub, last, end);
                self.send(id, &sink, Delivery::ResyncRequired { last_seq: last });
                self.pump(id);
            }
        }
    }

    /// Sends `exited` to a subscriber of a finished session once it has
    /// been sent every frame (and its snapshot): the event is the last
    /// thing of the subscription, after the output, whatever its credit.
    fn tell_exit(&mut self, id: SubId) {
        let Some(event) = self.ended.clone() else {
            return;
        };
        let last = self.ring.last_seq();
        let Some(sub) = self.subs.get_mut(&id) else {
            return;
        };
        if sub.told_exit
            || sub.awaiting_snapshot
            || sub.start_after.is_some()
            || sub.credit.sent_seq() < last
        {
            return;
        }
        sub.told_exit = true;
        let sink = sub.sink.clone();
        self.send(id, &sink, Delivery::Event(event));
    }
}

/// Continues a subscriber after `seq` (whose end is `offset`), keeping what
/// was in flight before as `prior` so its acks still count.
fn restart_credit<S>(sub: &mut Subscriber<S>, seq: u64, offset: u64) {
    let fresh = Credit::new(sub.credit.window(), seq, offset);
    let old = std::mem::replace(&mut sub.credit, fresh);
    if old.in_flight() > 0 {
        sub.prior = Some((seq, old));
    }
}
