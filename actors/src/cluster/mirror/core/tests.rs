//! The mirror core's states and transitions, one by one, then against a
//! model owner under random link drops, owner stops, floods, resumes and
//! acks: every subscriber sees each seq with the owner's bytes, without a
//! hole that no resync announced.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::session::ScreenOut;

#[derive(Clone, Default)]
struct Rec(Rc<RefCell<Vec<(SubId, Delivery)>>>);

impl Sink for Rec {
    fn deliver(&self, msg: Deliver) {
        self.0.borrow_mut().push((msg.sub, msg.item));
    }
}

impl Rec {
    fn take(&self) -> Vec<(SubId, Delivery)> {
        std::mem::take(&mut self.0.borrow_mut())
    }
}

fn core(ring_frames: usize) -> MirrorCore<Rec> {
    MirrorCore::new(
        Arc::from("s"),
        "a",
        (1 << 20, ring_frames),
        Arc::new(Metrics::default()),
    )
}

fn sub(rec: &Rec, sub: SubId, from_seq: Option<u64>) -> Subscription<Rec> {
    Subscription {
        sub,
        sink: rec.clone(),
        req_id: sub,
        from_seq,
        window: 1 << 20,
        scrollback: 0,
        kind: Kind::Viewer,
    }
}

fn payload(seq: u64) -> Bytes {
    format!("<{seq}>").into_bytes().into()
}

fn output(seq: u64) -> DataMsg {
    DataMsg::Output {
        session: "s".into(),
        seq,
        data: payload(seq),
    }
}

fn subscribed(last_seq: u64) -> DataMsg {
    DataMsg::Subscribed {
        session: "s".into(),
        last_seq,
        oldest_seq: 1,
        cols: 80,
        rows: 24,
    }
}

fn event(event: EventKind) -> DataMsg {
    DataMsg::Event {
        session: "s".into(),
        event,
    }
}

fn closed(removed: bool) -> DataMsg {
    DataMsg::Closed {
        session: "s".into(),
        removed,
    }
}

fn kinds(items: &[(SubId, Delivery)]) -> Vec<String> {
    items
        .iter()
        .map(|(_, d)| match d {
            Delivery::Subscribed { .. } => "subscribed".to_string(),
            Delivery::Output(f) => format!("out{}", f.seq),
            Delivery::Snapshot { seq, .. } => format!("snap{seq}"),
            Delivery::ResyncRequired { .. } => "resync".to_string(),
            Delivery::Event(e) => format!("{e:?}").to_lowercase(),
            Delivery::Closed { removed } => format!("closed{removed}"),
            Delivery::Failed { code, .. } => format!("failed-{}", code.as_str()),
        })
        .collect()
}

/// The snapshots the mirror asks the owner for now (its other asks go).
fn snapshots_asked(c: &mut MirrorCore<Rec>) -> Vec<SnapshotWanted> {
    c.take_asks()
        .into_iter()
        .filter_map(|a| match a {
            Ask::Snapshot(w) => Some(w),
            _ => None,
        })
        .collect()
}

/// A mirror with subscriber 1 resumed from 0 and the owner at seq 2.
fn live_with_two() -> (MirrorCore<Rec>, Rec) {
    let rec = Rec::default();
    let mut c = core(100);
    c.subscribe(sub(&rec, 1, Some(0)));
    assert_eq!(c.take_asks(), [Ask::Subscribe { from_seq: Some(0) }]);
    assert_eq!(c.owner(), Owner::Asked);
    c.from_owner(subscribed(0));
    c.from_owner(output(1));
    c.from_owner(output(2));
    assert_eq!(c.owner(), Owner::Live);
    assert_eq!(kinds(&rec.take()), ["subscribed", "out1", "out2"]);
    c.take_asks();
    (c, rec)
}

#[test]
fn a_dropped_link_is_told_once_and_resumes_from_the_last_seq() {
    let (mut c, rec) = live_with_two();
    c.link(false);
    c.link(false);
    assert_eq!(c.owner(), Owner::Away);
    assert_eq!(kinds(&rec.take()), ["unreachable"]);
    // Output of the old link that was still on its way is dropped.
    c.from_owner(output(3));
    assert!(rec.take().is_empty());
    c.link(true);
    assert_eq!(c.owner(), Owner::Back);
    assert_eq!(c.take_asks(), [Ask::Subscribe { from_seq: Some(2) }]);
    c.from_owner(subscribed(3));
    c.from_owner(output(3));
    assert_eq!(c.owner(), Owner::Live);
    assert_eq!(kinds(&rec.take()), ["reachable", "out3"]);
}

#[test]
fn an_owner_that_stops_is_away_not_gone() {
    let (mut c, rec) = live_with_two();
    c.from_owner(closed(false));
    assert_eq!(c.owner(), Owner::Away);
    assert_eq!(kinds(&rec.take()), ["unreachable"]);
    assert!(!c.take_asks().contains(&Ask::Stop));
    // The link drops as the owner goes, then comes back: lost follows
    // the output, as exited does.
    c.link(false);
    c.link(true);
    c.take_asks();
    c.from_owner(subscribed(2));
    c.from_owner(event(EventKind::Lost));
    assert_eq!(kinds(&rec.take()), ["reachable", "lost"]);
}

#[test]
fn a_removed_session_ends_the_mirror() {
    let (mut c, rec) = live_with_two();
    c.from_owner(closed(true));
    assert_eq!(c.owner(), Owner::Gone);
    assert_eq!(kinds(&rec.take()), ["closedtrue"]);
    assert_eq!(c.take_asks(), [Ask::Stop]);
    // A subscribe that still arrives is answered, not left waiting.
    c.subscribe(sub(&rec, 2, None));
    assert_eq!(kinds(&rec.take()), ["failed-unavailable"]);
}

#[test]
fn subscribers_waiting_for_the_first_subscription_get_unavailable_when_the_link_is_down() {
    let rec = Rec::default();
    let mut c = core(100);
    c.subscribe(sub(&rec, 1, None));
    c.subscribe(sub(&rec, 2, Some(5)));
    c.take_asks();
    c.link(false);
    assert_eq!(
        kinds(&rec.take()),
        ["failed-unavailable", "failed-unavailable"]
    );
    assert_eq!(c.take_asks(), [Ask::Stop]);
}

#[test]
fn subscribers_waiting_for_an_owner_that_does_not_answer_get_unavailable() {
    let mut c = core(100);
    let rec = Rec::default();
    c.subscribe(sub(&rec, 1, None));
    c.take_asks();
    let first = c.asked();
    // A later ask's timer is not this one's.
    c.unanswered(first + 1);
    assert!(rec.take().is_empty());
    c.unanswered(first);
    assert_eq!(kinds(&rec.take()), ["failed-unavailable"]);
    assert_eq!(c.take_asks(), [Ask::Stop]);
    // Once live, a late timer changes nothing.
    let (mut c, rec) = live_with_two();
    let asked = c.asked();
    c.unanswered(asked);
    assert!(rec.take().is_empty());
    assert_eq!(c.owner(), Owner::Live);
}

/// One viewer being resynced (its snapshot pins the ring) must not stall
/// the owner's stream to the others: past `HOLD_LIMIT` held, the pins go,
/// the mirror applies and acks on, and the snapshot is wanted again at a
/// newer seq when the one asked for comes too late.
#[test]
fn a_viewer_being_resynced_delays_only_itself() {
    let rec = Rec::default();
    let mut c = core(4);
    c.subscribe(sub(&rec, 1, Some(0)));
    c.from_owner(subscribed(0));
    c.from_owner(output(1));
    c.from_owner(output(2));
    // A second viewer, fresh: it wants a snapshot, pinning seq 2.
    c.subscribe(sub(&rec, 2, None));
    let wanted = snapshots_asked(&mut c);
    assert_eq!(wanted.len(), 1);
    rec.take();
    let big = |seq: u64| DataMsg::Output {
        session: "s".into(),
        seq,
        data: vec![b'x'; 256 << 10].into(),
    };
    // Far more than the ring and the hold limit, the snapshot still out.
    // The first viewer reads and acks each frame as it comes.
    for seq in 3..=20 {
        c.from_owner(big(seq));
        c.ack(1, seq);
    }
    let got = rec.take();
    let to_first: Vec<String> = kinds(&got)
        .into_iter()
        .zip(&got)
        .filter(|(_, (s, _))| *s == 1)
        .map(|(k, _)| k)
        .collect();
    let expected: Vec<String> = (3..=20).map(|s| format!("out{s}")).collect();
    assert_eq!(to_first, expected, "the first viewer got everything");
    assert!(
        c.take_asks()
            .iter()
            .any(|a| matches!(a, Ask::AckSoon | Ask::Ack { .. })),
        "the mirror acks its owner on"
    );
    // The snapshot at 2 comes too late: its frames left the ring, so a
    // newer one is wanted; the first viewer was not resynced.
    c.snapshot_done(
        wanted[0],
        ScreenResult {
            seq: 2,
            cols: 80,
            rows: 24,
            out: ScreenOut::Snapshot(Bytes::from_static(b"screen")),
        },
    );
    assert!(c.take_asks().iter().any(|a| matches!(a, Ask::Snapshot(_))));
    assert!(!kinds(&rec.take()).contains(&"resync".to_string()));
}

#[test]
fn a_revived_session_runs_on_after_its_exit() {
    let (mut c, rec) = live_with_two();
    c.from_owner(event(EventKind::Exited {
        exit_code: 3,
        signal: None,
    }));
    assert_eq!(
        kinds(&rec.take())[0],
        "exited { exit_code: 3, signal: none }"
    );
    c.from_owner(output(3));
    c.from_owner(output(4));
    assert_eq!(kinds(&rec.take()), ["out3", "out4"], "no second exit");
}

#[test]
fn a_hole_keeps_its_frame_and_seqs_never_go_back() {
    let (mut c, rec) = live_with_two();
    c.from_owner(output(5));
    let got = rec.take();
    assert_eq!(kinds(&got)[0], "resync");
    assert_eq!(c.last_seq(), Some(5));
    c.from_owner(DataMsg::Resync {
        session: "s".into(),
        last_seq: 3,
    });
    assert_eq!(c.last_seq(), Some(5), "a resync below the ring is ignored");
    // The viewer that needed the missing frames gets a snapshot (the
    // owner's, at 5), then the output after it.
    let wanted = snapshots_asked(&mut c);
    assert_eq!(wanted.len(), 1);
    c.snapshot_done(
        wanted[0],
        ScreenResult {
            seq: 5,
            cols: 80,
            rows: 24,
            out: ScreenOut::Snapshot(Bytes::from_static(b"screen")),
        },
    );
    c.from_owner(output(6));
    assert_eq!(kinds(&rec.take()), ["snap5", "out6"]);
}

#[test]
fn a_resume_here_asks_the_owner_to_repaint() {
    let (mut c, rec) = live_with_two();
    c.subscribe(sub(&rec, 2, Some(1)));
    assert!(c.take_asks().contains(&Ask::Repaint));
    c.subscribe(sub(&rec, 3, None));
    assert!(!c.take_asks().contains(&Ask::Repaint));
}

#[test]
fn a_viewer_that_leaves_before_its_resize_comes_back_gives_the_size_back() {
    let (mut c, rec) = live_with_two();
    c.subscribe(sub(&rec, 2, None));
    c.subscribe(sub(&rec, 3, None));
    let claimed = |c: &mut MirrorCore<Rec>| -> Vec<Ask> {
        let asks = c.take_asks();
        asks.into_iter()
            .filter(|a| matches!(a, Ask::ClaimSize { .. }))
            .collect()
    };
    let resized = |c: &mut MirrorCore<Rec>, cols, rows| {
        c.from_owner(event(EventKind::Resized { cols, rows }));
    };
    c.claim_size(3, (70, 20));
    resized(&mut c, 70, 20);
    c.claim_size(2, (90, 30));
    resized(&mut c, 90, 30);
    c.claim_size(1, (50, 25));
    claimed(&mut c);
    // 1 leaves before the owner's resize to its size comes back here.
    c.unsubscribe(1);
    let back = |size| Ask::ClaimSize {
        size: Some(size),
        apply: true,
    };
    assert_eq!(claimed(&mut c), [back((90, 30))]);
    resized(&mut c, 50, 25);
    resized(&mut c, 90, 30);
    // 2 holds the size again: its leaving gives 3 its size back.
    c.unsubscribe(2);
    assert_eq!(claimed(&mut c), [back((70, 20))]);
}

/// What the test does next.
#[derive(Debug, Clone)]
enum Op {
    Emit(u64),
    LinkDown,
    LinkUp,
    OwnerStops,
    Subscribe { sub: SubId, resume: bool },
    Ack(SubId),
    Unsubscribe(SubId),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u64..20).prop_map(Op::Emit),
        1 => Just(Op::LinkDown),
        2 => Just(Op::LinkUp),
        1 => Just(Op::OwnerStops),
        2 => (1u64..4, any::<bool>()).prop_map(|(sub, resume)| Op::Subscribe { sub, resume }),
        3 => (1u64..4).prop_map(Op::Ack),
        1 => (1u64..4).prop_map(Op::Unsubscribe),
    ]
}

/// The owner as the mirror meets it: seqs with known bytes, a ring of the
/// last `OWNER_RING` frames, and a subscription that lives with the link.
struct ModelOwner {
    last: u64,
    link_up: bool,
    /// The mirror's subscription at the owner is live.
    subscribed: bool,
}

const OWNER_RING: u64 = 30;

impl ModelOwner {
    /// Answers the mirror's asks until none is left; `false` once it stopped.
    fn serve(&mut self, c: &mut MirrorCore<Rec>) -> bool {
        loop {
            let asks = c.take_asks();
            if asks.is_empty() {
                return true;
            }
            for ask in asks {
                match ask {
                    Ask::Stop => return false,
                    Ask::Subscribe { from_seq } if self.link_up => {
                        self.subscribed = true;
                        c.from_owner(subscribed(self.last));
                        match from_seq {
                            Some(n) if n + OWNER_RING < self.last || n > self.last => {
                                c.from_owner(DataMsg::Resync {
                                    session: "s".into(),
                                    last_seq: self.last,
                                })
                            }
                            Some(n) => {
                                for seq in n + 1..=self.last {
                                    c.from_owner(output(seq));
                                }
                            }
                            None => {}
                        }
                    }
                    // Lost with the link: the mirror asks again on link up.
                    Ask::Subscribe { .. } => c.link(false),
                    Ask::AckSoon => c.ack_due(),
                    Ask::Snapshot(w) => {
                        if self.subscribed {
                            let result = ScreenResult {
                                seq: self.last,
                                cols: 80,
                                rows: 24,
                                out: ScreenOut::Snapshot(Bytes::from_static(b"screen")),
                            };
                            c.snapshot_done(w, result);
                        } else {
                            c.snapshot_later(w);
                        }
                    }
                    Ask::Probe { sub, from } => c.probe_done(sub, from <= self.last),
                    Ask::Ack { .. } | Ask::Repaint | Ask::ClaimSize { .. } => {}
                }
            }
        }
    }
}

/// One subscriber's view, checked as PROTOCOL.md sections 4 and 7 say.
#[derive(Default)]
struct View {
    last: Option<u64>,
    subscribed: bool,
}

fn check(views: &mut HashMap<SubId, View>, got: Vec<(SubId, Delivery)>) {
    for (sub, item) in got {
        let v = views.entry(sub).or_default();
        match item {
            Delivery::Subscribed { .. } => v.subscribed = true,
            Delivery::Output(f) => {
                assert!(v.subscribed, "sub {sub}: output before subscribed");
                assert_eq!(
                    &f.data[..],
                    &payload(f.seq)[..],
                    "sub {sub}: seq {} bytes",
                    f.seq
                );
                if let Some(last) = v.last {
                    assert_eq!(f.seq, last + 1, "sub {sub}: a hole after {last}");
                }
                v.last = Some(f.seq);
            }
            Delivery::Snapshot { seq, .. } => v.last = Some(seq),
            Delivery::Failed { .. } | Delivery::Closed { .. } => {
                views.remove(&sub);
            }
            Delivery::ResyncRequired { .. } | Delivery::Event(_) => {}
        }
    }
}

proptest! {
    #[test]
    fn every_subscriber_sees_the_owners_bytes_without_holes(
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let rec = Rec::default();
        let mut c = core(20);
        let mut owner = ModelOwner { last: 0, link_up: true, subscribed: false };
        let mut views: HashMap<SubId, View> = HashMap::new();
        for op in ops {
            match op {
                Op::Emit(n) => {
                    for _ in 0..n {
                        owner.last += 1;
                        if owner.subscribed {
                            c.from_owner(output(owner.last));
                        }
                    }
                }
                Op::LinkDown => {
                    owner.link_up = false;
                    owner.subscribed = false;
                    c.link(false);
                }
                Op::LinkUp => {
                    owner.link_up = true;
                    c.link(true);
                }
                Op::OwnerStops => {
                    if owner.subscribed {
                        owner.subscribed = false;
                        c.from_owner(closed(false));
                    }
                }
                Op::Subscribe { sub: s, resume } => {
                    let from = if resume {
                        Some(views.get(&s).and_then(|v| v.last).unwrap_or(0))
                    } else {
                        None
                    };
                    // A re-subscribe replaces the old view (its new
                    // `subscribed` starts the checks over).
                    views.insert(s, View { last: from, subscribed: false });
                    c.subscribe(sub(&rec, s, from));
                }
                Op::Ack(s) => {
                    if let Some(last) = views.get(&s).and_then(|v| v.last) {
                        c.ack(s, last);
                    }
                }
                Op::Unsubscribe(s) => {
                    views.remove(&s);
                    c.unsubscribe(s);
                    rec.0.borrow_mut().retain(|(x, _)| *x != s);
                }
            }
            let running = owner.serve(&mut c);
            check(&mut views, rec.take());
            if !running {
                break;
            }
        }
    }
}
