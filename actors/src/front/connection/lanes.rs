//! The two lanes of a connection's outgoing session traffic, and how much
//! of it may be on its way to the client at once.
//!
//! Interactive first: a session this connection typed into within
//! `INTERACTIVE_FOR` is interactive here, until it has printed
//! `INTERACTIVE_BURST` since that input (a build started by a keystroke
//! is bulk after its first screens); its frames go to the socket at once,
//! ahead of whatever bulk output (every other session's) is held.
//! Bulk frames go out only while the bytes on their way (given to the
//! socket, not yet read by the client) are under the connection's flight
//! limit; past it they wait here, per session in order, taken in turn
//! across sessions (fair between bulk sessions), so the queue in front
//! of a keystroke's echo is one termesh can reorder, not the kernel's or
//! the client's.
//!
//! "Read by the client" is learned from WebSocket pings this connection
//! sends as marks behind the bytes it gave (a client answers each with a
//! pong once it has read up to it; browsers do this themselves). Each
//! mark's round trip is the delay of the queue in front of it: the limit
//! grows while that delay stays near the smallest seen and shrinks when
//! it rises, so a client that drains at R bytes/s gets about R times a few
//! milliseconds in flight, enough for its full speed and no more. The
//! subscription windows (PROTOCOL.md section 8) still bound it all: what
//! is held here was sent within them (a re-subscribe drops what was held
//! of the subscription it replaces). A client that has answered no mark
//! `NO_PONGS_AFTER` after the first leaves the limit off (its windows
//! alone bound it). While frames are held a mark is always on its way, so
//! an answer always comes to let them go.
//!
//! Everything of one session keeps its order: a control message or an
//! interactive frame of a session with frames held waits behind them.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::session::bulk::{INTERACTIVE_BURST, INTERACTIVE_FOR};

/// The flight limit's bounds and start.
const MIN_FLIGHT: u64 = 64 << 10;
const MAX_FLIGHT: u64 = 8 << 20;
const START_FLIGHT: u64 = 512 << 10;
/// A mark's delay within this of the smallest seen: no queue worth the
/// name, the limit may grow; past twice this it shrinks.
const QUEUE_TARGET: Duration = Duration::from_millis(1);
/// Marks waiting for their pong, at most (a client that stops reading
/// holds them; past this no more are sent until one is answered).
const MAX_MARKS: usize = 64;
/// A connection whose first mark is unanswered this long (two keepalive
/// intervals) answers none (a client that ignores pings): the limit is
/// left off. One that has answered a mark keeps it.
const NO_PONGS_AFTER: Duration = Duration::from_secs(30);
/// Input sessions remembered before the stale ones are forgotten.
const TYPED_KEPT: usize = 64;
/// A mark's ping payload starts with this (the node's keepalive pings are
/// empty).
const MARK_TAG: &[u8; 2] = b"tm";

#[derive(Default)]
pub struct Lanes {
    /// Sessions this connection sent input to: when last, and the output
    /// offered since.
    typed: HashMap<Arc<str>, Typed>,
    /// Held frames, per session in order.
    held: HashMap<Arc<str>, VecDeque<Bytes>>,
    /// Sessions with frames held, in turn.
    turn: VecDeque<Arc<str>>,
    /// Bytes of the frames held.
    held_bytes: usize,
    /// The registry's watch notifications wait in its coalescing queue
    /// until the flight has room (a client that reads nothing costs one
    /// entry per session there, not a socket full of them).
    watch_waiting: bool,
    flight: Flight,
}

struct Typed {
    at: Instant,
    since: u64,
}

/// What to do with a frame offered.
pub enum Offer {
    /// Send it now.
    Now(Bytes),
    /// Held here until the flight has room (or the session is typed into).
    Held,
}

impl Lanes {
    /// This connection sent input to `session` (now). At most
    /// `TYPED_KEPT` sessions are remembered: past it the oldest is
    /// forgotten (a client typing into many names costs no more).
    pub fn typed(&mut self, session: &str, now: Instant) {
        if let Some(t) = self.typed.get_mut(session) {
            *t = Typed { at: now, since: 0 };
            return;
        }
        if self.typed.len() >= TYPED_KEPT {
            let oldest = self
                .typed
                .iter()
                .min_by_key(|(_, t)| t.at)
                .map(|(s, _)| s.clone());
            if let Some(oldest) = oldest {
                self.typed.remove(&oldest);
            }
        }
        self.typed
            .insert(session.into(), Typed { at: now, since: 0 });
    }

    fn interactive(&self, session: &str, now: Instant) -> bool {
        self.typed
            .get(session)
            .is_some_and(|t| now - t.at < INTERACTIVE_FOR && t.since < INTERACTIVE_BURST)
    }

    /// A frame of `session`: `output` frames of a session that is not
    /// interactive are bulk.
    pub fn offer(&mut self, session: &Arc<str>, frame: Bytes, output: bool, now: Instant) -> Offer {
        let bulk = output && !self.interactive(session, now);
        if output {
            if let Some(t) = self.typed.get_mut(session) {
                t.since += frame.len() as u64;
            }
        }
        if let Some(queue) = self.held.get_mut(session) {
            self.held_bytes += frame.len();
            queue.push_back(frame);
            return Offer::Held;
        }
        if bulk && !self.flight.room() {
            self.held_bytes += frame.len();
            self.held.insert(session.clone(), VecDeque::from([frame]));
            self.turn.push_back(session.clone());
            return Offer::Held;
        }
        self.flight.sent(frame.len());
        Offer::Now(frame)
    }

    /// The next held frame the flight limit lets go, interactive sessions'
    /// first, then the bulk sessions in turn.
    pub fn next(&mut self, now: Instant) -> Option<Bytes> {
        let at = self
            .turn
            .iter()
            .position(|s| self.interactive(s, now))
            .or_else(|| self.flight.room().then_some(0))?;
        let session = self.turn.remove(at)?;
        let queue = self.held.get_mut(&session)?;
        let frame = queue.pop_front()?;
        self.held_bytes -= frame.len();
        if queue.is_empty() {
            self.held.remove(&session);
        } else {
            self.turn.push_back(session);
        }
        self.flight.sent(frame.len());
        Some(frame)
    }

    /// The payload of a mark to ping now, if one is due: after each
    /// quarter of the flight, and whenever frames are held with no mark on
    /// its way (its answer lets them go).
    pub fn mark(&mut self, now: Instant) -> Option<[u8; 10]> {
        let stuck = self.holding() && self.flight.marks.is_empty();
        self.flight.mark(now, stuck)
    }

    /// A pong's payload: `true` when it answered a mark (and the flight
    /// may have room again).
    pub fn pong(&mut self, payload: &[u8], now: Instant) -> bool {
        self.flight.pong(payload, now)
    }

    /// The client unsubscribed: what is held of `session` is not wanted.
    pub fn forget(&mut self, session: &str) {
        if let Some(queue) = self.held.remove(session) {
            self.held_bytes -= queue.iter().map(Bytes::len).sum::<usize>();
            self.turn.retain(|s| &**s != session);
        }
    }

    /// Frames or watch notifications held (for the timer that checks on
    /// a silent client).
    pub fn holding(&self) -> bool {
        !self.turn.is_empty() || self.watch_waiting
    }

    /// Whether the watch notifications may be sent now (else they wait,
    /// and `watch_due` says when).
    pub fn watch_now(&mut self) -> bool {
        self.watch_waiting = !self.flight.room();
        !self.watch_waiting
    }

    /// Watch notifications waited and the flight has room now.
    pub fn watch_due(&mut self) -> bool {
        let due = self.watch_waiting && self.flight.room();
        if due {
            self.watch_waiting = false;
        }
        due
    }

    /// Other bytes sent on the connection (watch notifications).
    pub fn sent(&mut self, n: usize) {
        self.flight.sent(n);
    }

    /// Bytes of the frames held.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Checks on marks nobody answers: `true` when the limit was just
    /// left off.
    pub fn check(&mut self, now: Instant) -> bool {
        self.flight.check(now)
    }
}

struct Mark {
    id: u64,
    /// Bytes sent when it was sent.
    upto: u64,
    at: Instant,
}

struct Flight {
    /// Off once a client showed it does not answer pings.
    on: bool,
    /// Bytes given to the socket, and read by the client (as of the last
    /// mark answered).
    sent: u64,
    read: u64,
    limit: u64,
    marks: VecDeque<Mark>,
    next_id: u64,
    /// `sent` at the last mark.
    marked: u64,
    /// Smallest mark delay seen lately, and when it was reset.
    base: Option<Duration>,
    base_since: Option<Instant>,
    answered: bool,
}

impl Default for Flight {
    fn default() -> Self {
        Flight {
            on: true,
            sent: 0,
            read: 0,
            limit: START_FLIGHT,
            marks: VecDeque::new(),
            next_id: 0,
            marked: 0,
            base: None,
            base_since: None,
            answered: false,
        }
    }
}

impl Flight {
    fn room(&self) -> bool {
        !self.on || self.sent - self.read < self.limit
    }

    fn sent(&mut self, n: usize) {
        self.sent += n as u64;
    }

    fn mark(&mut self, now: Instant, stuck: bool) -> Option<[u8; 10]> {
        let every = (self.limit / 4).max(16 << 10);
        let due = self.sent - self.marked >= every && self.marks.len() < MAX_MARKS;
        if !self.on || !(due || stuck && self.sent > self.read) {
            return None;
        }
        self.marked = self.sent;
        let id = self.next_id;
        self.next_id += 1;
        self.marks.push_back(Mark {
            id,
            upto: self.sent,
            at: now,
        });
        let mut payload = [0u8; 10];
        payload[..2].copy_from_slice(MARK_TAG);
        payload[2..].copy_from_slice(&id.to_le_bytes());
        Some(payload)
    }

    fn pong(&mut self, payload: &[u8], now: Instant) -> bool {
        let Some(id) = payload
            .strip_prefix(MARK_TAG)
            .and_then(|id| <[u8; 8]>::try_from(id).ok())
            .map(u64::from_le_bytes)
        else {
            return false;
        };
        // Answers come in order: marks before this one were read too. An
        // id not on its way (a stray pong) changes nothing.
        if !self.marks.iter().any(|m| m.id == id) {
            return false;
        }
        while let Some(mark) = self.marks.pop_front() {
            if mark.id == id {
                self.answered = true;
                self.read = self.read.max(mark.upto);
                self.adapt(now - mark.at, now);
                break;
            }
        }
        true
    }

    /// One mark's delay: the queue in front of it.
    fn adapt(&mut self, delay: Duration, now: Instant) {
        // The smallest delay ages out, so a path that became slower (a
        // phone moving to a slower network) sets a new base.
        let stale = self
            .base_since
            .is_none_or(|since| now - since > Duration::from_secs(10));
        let base = match self.base {
            Some(base) if !stale => base.min(delay),
            _ => {
                self.base_since = Some(now);
                delay
            }
        };
        self.base = Some(base);
        if delay <= base + QUEUE_TARGET {
            self.limit = (self.limit + self.limit / 8).min(MAX_FLIGHT);
        } else if delay > base + 2 * QUEUE_TARGET {
            self.limit = (self.limit - self.limit / 4).max(MIN_FLIGHT);
        }
    }

    fn check(&mut self, now: Instant) -> bool {
        let silent = self
            .marks
            .front()
            .is_some_and(|m| now - m.at > NO_PONGS_AFTER);
        if self.on && !self.answered && silent {
            self.on = false;
            self.marks.clear();
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(n: usize) -> Bytes {
        Bytes::from(vec![0u8; n])
    }

    fn now_bytes(offer: Offer) -> usize {
        match offer {
            Offer::Now(b) => b.len(),
            Offer::Held => panic!("held"),
        }
    }

    #[test]
    fn bulk_past_the_limit_waits_and_interactive_goes_first() {
        let t = Instant::now();
        let mut lanes = Lanes::default();
        let (flood, typed): (Arc<str>, Arc<str>) = ("flood".into(), "typed".into());
        lanes.typed(&typed, t);
        // The flood fills the flight, then waits.
        let mut sent = 0;
        while let Offer::Now(b) = lanes.offer(&flood, frame(64 << 10), true, t) {
            sent += b.len() as u64;
        }
        assert_eq!(sent, START_FLIGHT);
        // The typed session's echo goes at once.
        assert_eq!(now_bytes(lanes.offer(&typed, frame(3), true, t)), 3);
        // A second bulk session waits behind the limit too.
        let other: Arc<str> = "other".into();
        assert!(matches!(
            lanes.offer(&other, frame(10), true, t),
            Offer::Held
        ));
        assert!(lanes.next(t).is_none(), "no room until a mark is answered");
        // Control messages of a session with nothing held go at once.
        let quiet: Arc<str> = "quiet".into();
        assert_eq!(now_bytes(lanes.offer(&quiet, frame(5), false, t)), 5);
        // ... and wait behind it when something is.
        assert!(matches!(
            lanes.offer(&other, frame(5), false, t),
            Offer::Held
        ));
    }

    #[test]
    fn a_sessions_frames_keep_their_order_across_lanes() {
        let t = Instant::now();
        let mut lanes = Lanes::default();
        let s: Arc<str> = "s".into();
        let fill: Arc<str> = "fill".into();
        while let Offer::Now(_) = lanes.offer(&fill, frame(64 << 10), true, t) {}
        assert!(matches!(lanes.offer(&s, frame(1), true, t), Offer::Held));
        // Now typed into: its next frame must not overtake the held one.
        lanes.typed(&s, t);
        assert!(matches!(lanes.offer(&s, frame(2), true, t), Offer::Held));
        assert!(matches!(lanes.offer(&s, frame(3), false, t), Offer::Held));
        // Interactive: taken without room, in order, ahead of `fill`'s.
        let got: Vec<usize> = std::iter::from_fn(|| lanes.next(t))
            .map(|b| b.len())
            .collect();
        assert_eq!(got[..3], [1, 2, 3]);
    }

    #[test]
    fn answered_marks_make_room_and_bulk_sessions_take_turns() {
        let t = Instant::now();
        let mut lanes = Lanes::default();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let mut marks = Vec::new();
        while let Offer::Now(_) = lanes.offer(&a, frame(32 << 10), true, t) {
            marks.extend(lanes.mark(t));
        }
        assert!(!marks.is_empty());
        for i in 0..4 {
            lanes.offer(&a, frame(100 + i), true, t);
            lanes.offer(&b, frame(200 + i), true, t);
        }
        let later = t + Duration::from_micros(300);
        for m in &marks {
            assert!(lanes.pong(m, later));
        }
        let order: Vec<usize> = std::iter::from_fn(|| lanes.next(later))
            .map(|f| f.len())
            .take(6)
            .collect();
        // `a` had one held before `b`'s first: then in turn.
        assert_eq!(order, [32 << 10, 200, 100, 201, 101, 202]);
        assert!(!lanes.pong(b"", later), "a keepalive pong is no mark");
    }

    #[test]
    fn a_stray_pong_drains_no_mark() {
        let t = Instant::now();
        let mut lanes = Lanes::default();
        lanes.flight.sent(START_FLIGHT as usize / 4);
        let m = lanes.mark(t).unwrap();
        assert!(!lanes.pong(b"tm\xff\xff\xff\xff\xff\xff\xff\x7f", t));
        assert!(!lanes.pong(b"tm", t), "too short");
        assert!(lanes.pong(&m, t), "the mark is still on its way");
    }

    #[test]
    fn held_frames_always_have_a_mark_on_its_way() {
        let t = Instant::now();
        let mut lanes = Lanes::default();
        let flood: Arc<str> = "flood".into();
        // Over the limit, no mark on its way, too few unmarked bytes for a
        // quarter's mark (however it came to be).
        lanes.flight.sent(START_FLIGHT as usize);
        lanes.flight.marked = lanes.flight.sent;
        assert!(matches!(
            lanes.offer(&flood, frame(10), true, t),
            Offer::Held
        ));
        let m = lanes.mark(t).expect("a mark for the held frames");
        assert!(lanes.pong(&m, t));
        assert_eq!(lanes.next(t).map(|f| f.len()), Some(10));
    }

    #[test]
    fn a_typed_session_that_floods_is_bulk_after_its_burst() {
        let t = Instant::now();
        let mut lanes = Lanes::default();
        let (make, fill): (Arc<str>, Arc<str>) = ("make".into(), "fill".into());
        while let Offer::Now(_) = lanes.offer(&fill, frame(64 << 10), true, t) {}
        lanes.typed(&make, t);
        let mut now = 0;
        while let Offer::Now(b) = lanes.offer(&make, frame(32 << 10), true, t) {
            now += b.len() as u64;
        }
        assert_eq!(
            now, INTERACTIVE_BURST,
            "its first screens go first, then it waits"
        );
        lanes.typed(&make, t);
        assert!(
            lanes.interactive(&make, t),
            "the next input makes it interactive again"
        );
    }

    #[test]
    fn typing_into_many_sessions_keeps_the_newest() {
        let t = Instant::now();
        let mut lanes = Lanes::default();
        for i in 0..1000u64 {
            lanes.typed(&format!("s{i}"), t + Duration::from_millis(i));
        }
        assert_eq!(lanes.typed.len(), TYPED_KEPT);
        assert!(lanes.typed.contains_key("s999"));
        assert!(!lanes.typed.contains_key("s0"));
    }

    #[test]
    fn the_limit_follows_the_delay_of_the_queue() {
        let t = Instant::now();
        let mut f = Flight::default();
        let mut at = t;
        let mut round = |f: &mut Flight, delay: Duration| {
            f.sent(f.limit as usize);
            let m = f.mark(at, false).unwrap();
            at += delay;
            assert!(f.pong(&m, at));
        };
        for _ in 0..40 {
            round(&mut f, Duration::from_micros(200));
        }
        assert_eq!(f.limit, MAX_FLIGHT, "no queue: grows to the bound");
        for _ in 0..40 {
            round(&mut f, Duration::from_millis(20));
        }
        assert_eq!(f.limit, MIN_FLIGHT, "a queue: shrinks to the floor");
    }

    #[test]
    fn a_client_that_never_pongs_leaves_the_limit_off() {
        let t = Instant::now();
        let mut lanes = Lanes::default();
        let s: Arc<str> = "s".into();
        while let Offer::Now(_) = lanes.offer(&s, frame(32 << 10), true, t) {
            lanes.mark(t);
        }
        assert!(!lanes.check(t + NO_PONGS_AFTER - Duration::from_secs(1)));
        assert!(lanes.check(t + NO_PONGS_AFTER + Duration::from_secs(1)));
        assert!(
            lanes.next(t).is_some(),
            "held frames go once the limit is off"
        );
        assert!(!lanes.flight.on);
    }
}
