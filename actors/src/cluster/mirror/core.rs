//! The mirror's logic without I/O (STYLE.md 2 and 17): the owner's life as
//! this node sees it, as named states, the publisher that serves the
//! subscribers here, what the owner sent that the ring cannot take yet,
//! and what to ask of the owner. `MirrorActor` feeds it subscribes, acks,
//! the owner's data and the link's ups and downs, and carries out the
//! `Ask`s it returns; nothing here sends on a network or runs a timer.

use std::collections::VecDeque;
use std::sync::Arc;

use termesh_transport::peer::DataMsg;
use termesh_transport::{ErrorCode, EventKind};

use crate::metrics::Metrics;
use crate::output::publisher::{Kind, Mode, Publisher, Sink, SnapshotWanted, Subscription};
use crate::output::ring::Ring;
use crate::session::sizes::SizeClaims;
use crate::session::{Deliver, Delivery, ScreenResult, SubId};

/// Output the owner may send a mirror ahead of its acks.
pub const MIRROR_WINDOW: u64 = 2 << 20;
/// The most of the owner's output a mirror holds back for a pinned
/// snapshot (a viewer here that is being resynced). Past it the pins go:
/// holding more would stop this mirror's acks, stall the owner's stream to
/// every viewer here and end in a resync of them all; the snapshot is
/// taken again at a newer seq instead, and only its viewer waits.
pub const HOLD_LIMIT: usize = MIRROR_WINDOW as usize / 2;

/// The owner's life, as the mirror sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Not asked yet: no subscription at the owner, nothing kept.
    Idle,
    /// Asked for the first subscription; waiting for `subscribed`.
    Asked,
    /// Subscribed: the owner's output flows in.
    Live,
    /// Out of reach (the link dropped, or the owner is stopping): the ring
    /// is kept and the subscribers were told `unreachable`.
    Away,
    /// Asked again after being away (the link is back); `reachable` goes
    /// out with the owner's `subscribed`, which also says whether the
    /// owner restarted (it answers with a resync past a crash's skip).
    Back,
    /// The session is gone at the owner, or nobody is left to serve: the
    /// mirror ends.
    Gone,
}

/// What the mirror asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// Subscribe at the owner, after `from_seq` (`None`: from now on).
    Subscribe { from_seq: Option<u64> },
    /// Tell the owner the ring absorbed its output through `seq`.
    Ack { seq: u64 },
    /// Call `ack_due` shortly: a trickle is acked too.
    AckSoon,
    /// Get this snapshot rendered by the owner, then hand it to
    /// `snapshot_done` / `snapshot_failed` / `snapshot_later`.
    Snapshot(SnapshotWanted),
    /// Whether the owner's output has reached `from`: `probe_done`.
    Probe { sub: SubId, from: u64 },
    /// A client resumed here: the owner's program repaints.
    Repaint,
    /// Tell the owner the size this mirror's viewers stand for (`None`:
    /// none; `apply`: the session takes it now).
    ClaimSize {
        size: Option<(u16, u16)>,
        apply: bool,
    },
    /// Nothing more to do: stop.
    Stop,
}

pub struct MirrorCore<S: Sink> {
    id: Arc<str>,
    ring_bytes: usize,
    ring_frames: usize,
    metrics: Arc<Metrics>,
    owner: Owner,
    /// `None` until the owner's first `subscribed` says where to start.
    publisher: Option<Publisher<S>>,
    /// Subscribes that came before the publisher.
    pending: Vec<Subscription<S>>,
    /// Where the first subscription at the owner starts.
    first_from: Option<u64>,
    size: (u16, u16),
    /// Which of this node's viewers sized the session: the mirror stands
    /// for them at the owner (`ClaimSize`).
    claims: SizeClaims,
    /// What the owner sent that the ring cannot take yet (a snapshot pins
    /// it and it is full), in order; bounded by the window.
    held: VecDeque<DataMsg>,
    /// Output absorbed since the last ack to the owner.
    unacked: u64,
    /// Snapshots to ask for once the owner is live.
    snapshots_waiting: Vec<SnapshotWanted>,
    /// What a subscriber is told when the owner cannot be reached.
    unreachable: String,
    /// Subscribes asked of the owner so far (names the latest ask).
    asked: u64,
    asks: Vec<Ask>,
}

impl<S: Sink> MirrorCore<S> {
    pub fn new(
        id: Arc<str>,
        owner_node: &str,
        ring: (usize, usize),
        metrics: Arc<Metrics>,
    ) -> Self {
        MirrorCore {
            id,
            ring_bytes: ring.0,
            ring_frames: ring.1,
            metrics,
            owner: Owner::Idle,
            publisher: None,
            pending: Vec::new(),
            first_from: None,
            size: (80, 24),
            claims: SizeClaims::default(),
            held: VecDeque::new(),
            unacked: 0,
            snapshots_waiting: Vec::new(),
            unreachable: format!("node `{owner_node}` cannot be reached now"),
            asked: 0,
            asks: Vec::new(),
        }
    }

    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// What to do now, in order.
    pub fn take_asks(&mut self) -> Vec<Ask> {
        std::mem::take(&mut self.asks)
    }

    /// No subscriber here, waiting or served.
    pub fn is_unwatched(&self) -> bool {
        self.pending.is_empty() && self.publisher.as_ref().is_none_or(|p| p.is_empty())
    }

    pub fn last_seq(&self) -> Option<u64> {
        self.publisher.as_ref().map(Publisher::last_seq)
    }

    /// A subscriber (a client here) subscribes or re-arms.
    pub fn subscribe(&mut self, req: Subscription<S>) {
        if self.owner == Owner::Gone {
            self.refuse(&req);
            return;
        }
        let Some(publisher) = self.publisher.as_mut() else {
            if self.pending.is_empty() && self.owner == Owner::Idle {
                self.first_from = req.from_seq;
                self.ask_owner();
            }
            self.pending.push(req);
            return;
        };
        // Older than this ring and nobody else here: start over from there
        // at the owner (which may still hold it) rather than resync.
        if let Some(n) = req.from_seq {
            let live = matches!(self.owner, Owner::Live);
            if live && publisher.is_empty() && n < publisher.last_seq() && !publisher.can_replay(n)
            {
                self.publisher = None;
                self.first_from = Some(n);
                self.pending.push(req);
                self.ask_owner();
                return;
            }
        }
        let (sub, from_seq, viewer) = (req.sub, req.from_seq, req.kind == Kind::Viewer);
        let done = publisher.subscribe(req, self.size);
        if matches!(self.owner, Owner::Away | Owner::Back) {
            publisher.send_to(sub, Delivery::Event(EventKind::Unreachable));
        }
        if done.resumed && viewer && self.owner == Owner::Live {
            // As at the owner (PROTOCOL.md section 7): in-place programs
            // redraw after a resume.
            self.asks.push(Ask::Repaint);
        }
        if publisher.is_waiting_ahead(sub) {
            if let Some(from) = from_seq {
                self.asks.push(Ask::Probe { sub, from });
            }
        }
        self.after_publish();
    }

    pub fn unsubscribe(&mut self, sub: SubId) {
        self.pending.retain(|s| s.sub != sub);
        if let Some(p) = self.publisher.as_mut() {
            p.unsubscribe(sub);
        }
        self.sizer_left(sub);
    }

    pub fn ack(&mut self, sub: SubId, seq: u64) {
        if let Some(p) = self.publisher.as_mut() {
            p.ack(sub, seq);
        }
        self.drain_held();
    }

    /// The latest subscribe asked of the owner (for `unanswered`).
    pub fn asked(&self) -> u64 {
        self.asked
    }

    /// The owner did not answer the subscribe `ask` in time (the link may
    /// be cut without the breaker knowing yet): subscribers waiting for the
    /// first subscription get `unavailable` now rather than wait for the
    /// breaker, and the mirror ends. One with a ring answered its
    /// subscribers already and keeps waiting.
    pub fn unanswered(&mut self, ask: u64) {
        if ask == self.asked && self.owner == Owner::Asked && self.publisher.is_none() {
            self.give_up();
        }
    }

    /// The link to the owner came up or went down.
    pub fn link(&mut self, up: bool) {
        if up {
            if self.owner == Owner::Away {
                self.owner = Owner::Back;
                self.resubscribe();
            }
            return;
        }
        match self.owner {
            Owner::Gone | Owner::Away => {}
            _ if self.publisher.is_none() => self.give_up(),
            _ => self.away(),
        }
    }

    /// Something of the mirror's subscription, in the owner's order.
    pub fn from_owner(&mut self, msg: DataMsg) {
        if let DataMsg::Subscribed {
            last_seq,
            cols,
            rows,
            ..
        } = msg
        {
            return self.subscribed(last_seq, (cols, rows));
        }
        let current = match (&msg, self.owner) {
            (_, Owner::Live) => true,
            // The owner's answer to a subscribe for a session it no longer
            // has (or is stopping) comes without `subscribed`.
            (DataMsg::Closed { .. }, Owner::Asked | Owner::Back) => true,
            // Left over from a link that is gone, or from the subscription
            // this mirror replaced: `subscribed` comes before anything else
            // of a new one.
            _ => false,
        };
        if !current {
            return;
        }
        match msg {
            DataMsg::Closed { removed: true, .. } => {
                if let Some(p) = &self.publisher {
                    p.broadcast(Delivery::Closed { removed: true });
                }
                for sub in self.pending.drain(..) {
                    deliver(&self.id, &sub, Delivery::Closed { removed: true });
                }
                self.end();
            }
            // The owner is stopping: for the viewers here that is a link
            // loss (PROTOCOL.md section 13); the mirror subscribes again
            // when the link is back.
            DataMsg::Closed { removed: false, .. } if self.publisher.is_none() => self.give_up(),
            DataMsg::Closed { removed: false, .. } => self.away(),
            other => {
                self.held.push_back(other);
                self.drain_held();
            }
        }
    }

    /// The ack timer fired.
    pub fn ack_due(&mut self) {
        if self.unacked == 0 || self.owner != Owner::Live {
            return;
        }
        if let Some(p) = &self.publisher {
            self.unacked = 0;
            self.asks.push(Ask::Ack { seq: p.last_seq() });
        }
    }

    pub fn snapshot_done(&mut self, w: SnapshotWanted, result: ScreenResult) {
        if let Some(p) = self.publisher.as_mut() {
            p.snapshot_done(w.sub, w.generation, result);
        }
        self.drain_held();
    }

    pub fn snapshot_failed(&mut self, w: SnapshotWanted, message: String) {
        if let Some(p) = self.publisher.as_mut() {
            p.snapshot_failed(w.sub, w.generation, message);
        }
        self.drain_held();
    }

    /// The snapshot could not be had for want of the owner: asked again
    /// by `retry_snapshots` (or when the owner is live again).
    pub fn snapshot_later(&mut self, w: SnapshotWanted) {
        self.snapshots_waiting.push(w);
    }

    pub fn retry_snapshots(&mut self) {
        if self.owner == Owner::Live {
            for w in std::mem::take(&mut self.snapshots_waiting) {
                self.asks.push(Ask::Snapshot(w));
            }
        }
    }

    /// Whether the owner's output reached the seq a subscriber resumed
    /// from: if not, it resyncs as it would at the owner.
    pub fn probe_done(&mut self, sub: SubId, reached: bool) {
        if reached {
            return;
        }
        if let Some(p) = self.publisher.as_mut() {
            p.resync_waiting(sub);
        }
        self.after_publish();
    }

    /// Everything is over: subscribers and waiters are answered.
    pub fn shut(&mut self) {
        if let Some(p) = self.publisher.as_mut() {
            p.clear();
        }
        let failed = self.unavailable();
        for sub in self.pending.drain(..) {
            deliver(&self.id, &sub, failed.clone());
        }
    }

    fn ask_owner(&mut self) {
        self.owner = Owner::Asked;
        let from_seq = self.first_from;
        self.subscribe_at_owner(from_seq);
    }

    fn resubscribe(&mut self) {
        let from_seq = self.publisher.as_ref().map(Publisher::last_seq);
        self.subscribe_at_owner(from_seq);
    }

    fn subscribe_at_owner(&mut self, from_seq: Option<u64>) {
        self.asked += 1;
        self.held.clear();
        self.unacked = 0;
        self.asks.push(Ask::Subscribe { from_seq });
    }

    fn subscribed(&mut self, last_seq: u64, size: (u16, u16)) {
        if !matches!(self.owner, Owner::Asked | Owner::Back) {
            return;
        }
        let back = self.owner == Owner::Back;
        self.size = size;
        self.owner = Owner::Live;
        if self.publisher.is_none() {
            let start = self.first_from.unwrap_or(last_seq);
            self.publisher = Some(Publisher::new(
                self.id.clone(),
                Ring::starting_at(start, self.ring_bytes, self.ring_frames),
                Mode::Mirror,
                self.metrics.clone(),
            ));
            for sub in std::mem::take(&mut self.pending) {
                self.subscribe(sub);
            }
        }
        if back {
            if let Some(p) = &self.publisher {
                p.broadcast(Delivery::Event(EventKind::Reachable));
            }
            self.claim_again();
        }
        self.retry_snapshots();
        self.after_publish();
    }

    /// The owner is out of reach: the ring stays, subscribers are told
    /// once, and the mirror waits for the link.
    fn away(&mut self) {
        let told = matches!(self.owner, Owner::Away | Owner::Back);
        self.owner = Owner::Away;
        self.held.clear();
        if !told {
            if let Some(p) = &self.publisher {
                p.broadcast(Delivery::Event(EventKind::Unreachable));
            }
        }
    }

    /// Nothing kept yet and the owner out of reach: the subscribers
    /// waiting for the first subscription get `unavailable` now
    /// (PROTOCOL.md section 13), and the mirror ends.
    fn give_up(&mut self) {
        let failed = self.unavailable();
        for sub in self.pending.drain(..) {
            deliver(&self.id, &sub, failed.clone());
        }
        self.end();
    }

    fn end(&mut self) {
        self.owner = Owner::Gone;
        self.asks.push(Ask::Stop);
    }

    fn unavailable(&self) -> Delivery {
        Delivery::Failed {
            code: ErrorCode::Unavailable,
            message: self.unreachable.clone(),
        }
    }

    fn refuse(&self, req: &Subscription<S>) {
        deliver(&self.id, req, self.unavailable());
    }

    /// A subscribe this mirror will not serve (it is leaving and another
    /// took its place): `unavailable`, so the client subscribes again.
    pub fn shut_out(&self, req: Subscription<S>) {
        self.refuse(&req);
    }

    fn drain_held(&mut self) {
        while let Some(front) = self.held.front() {
            let Some(publisher) = self.publisher.as_ref() else {
                return;
            };
            if let DataMsg::Output { data, .. } = front {
                if publisher.would_pause(data.len()) {
                    if held_bytes(&self.held) < HOLD_LIMIT {
                        break;
                    }
                    if let Some(p) = self.publisher.as_mut() {
                        p.release_pins();
                    }
                }
            }
            let msg = self.held.pop_front().expect("non-empty");
            self.apply(msg);
        }
        self.after_publish();
    }

    fn apply(&mut self, msg: DataMsg) {
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
                self.absorbed(len);
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
                self.absorbed(1);
            }
            DataMsg::Event { event, .. } => match event {
                EventKind::Exited { .. } | EventKind::Lost => publisher.finish(event),
                EventKind::Resized { cols, rows } => {
                    // The owner told it in order with its output: here it
                    // follows the same frame.
                    self.size = (cols, rows);
                    self.claims.resized((cols, rows));
                    publisher.resized(cols, rows);
                }
                other => publisher.broadcast(Delivery::Event(other)),
            },
            // Sorted out before they are held.
            DataMsg::Subscribed { .. } | DataMsg::Closed { .. } => {}
        }
    }

    /// Acks what the ring absorbed: at once past a quarter window, else
    /// shortly (so a trickle of output is acked too).
    fn absorbed(&mut self, len: u64) {
        let before = self.unacked;
        self.unacked += len;
        if self.unacked >= MIRROR_WINDOW / 4 {
            self.ack_due();
        } else if before == 0 {
            self.asks.push(Ask::AckSoon);
        }
    }

    /// Asks the owner for the snapshots the publisher wants.
    fn after_publish(&mut self) {
        let Some(publisher) = self.publisher.as_mut() else {
            return;
        };
        let wanted = publisher.take_wanted();
        Metrics::add(&self.metrics.snapshots, wanted.len() as u64);
        for w in wanted {
            if self.owner == Owner::Live {
                self.asks.push(Ask::Snapshot(w));
            } else {
                self.snapshots_waiting.push(w);
            }
        }
    }
}

fn deliver<S: Sink>(id: &Arc<str>, sub: &Subscription<S>, item: Delivery) {
    sub.sink.deliver(Deliver {
        sub: sub.sub,
        session: id.clone(),
        item,
    });
}

mod claims;
#[cfg(test)]
mod tests;

/// The output bytes `held` waits with.
fn held_bytes(held: &VecDeque<DataMsg>) -> usize {
    held.iter()
        .map(|m| match m {
            DataMsg::Output { data, .. } => data.len(),
            _ => 0,
        })
        .sum()
}
