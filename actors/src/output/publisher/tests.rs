//! Unit and property tests of the publisher with a recording sink.

use std::cell::RefCell;
use std::rc::Rc;

use proptest::prelude::*;

use super::*;
use crate::output::vocab::ScreenOut;

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

    fn take_for(&self, sub: SubId) -> Vec<Delivery> {
        let mut all = self.0.borrow_mut();
        let (mine, rest): (Vec<_>, Vec<_>) = all.drain(..).partition(|(s, _)| *s == sub);
        *all = rest;
        mine.into_iter().map(|(_, d)| d).collect()
    }
}

fn publisher(ring_bytes: usize, mode: Mode) -> Publisher<Rec> {
    Publisher::new(
        Arc::from("s"),
        Ring::new(ring_bytes, 10_000),
        mode,
        Arc::new(Metrics::default()),
    )
}

/// A mirror's publisher: its ring starts at `start`, ahead waits.
fn mirror_publisher(start: u64, ring_bytes: usize) -> Publisher<Rec> {
    mirror_publisher_frames(start, ring_bytes, 100)
}

fn mirror_publisher_frames(start: u64, ring_bytes: usize, frames: usize) -> Publisher<Rec> {
    Publisher::new(
        Arc::from("s"),
        Ring::starting_at(start, ring_bytes, frames),
        Mode::Mirror,
        Arc::new(Metrics::default()),
    )
}

fn sub(rec: &Rec, sub: SubId, from_seq: Option<u64>, window: u64, kind: Kind) -> Subscription<Rec> {
    Subscription {
        sub,
        sink: rec.clone(),
        req_id: sub * 100,
        from_seq,
        window,
        scrollback: 0,
        kind,
    }
}

fn snap(seq: u64) -> ScreenResult {
    ScreenResult {
        seq,
        cols: 80,
        rows: 24,
        out: ScreenOut::Snapshot(Bytes::from_static(b"SNAP")),
    }
}

fn seqs(items: &[Delivery]) -> Vec<u64> {
    items
        .iter()
        .filter_map(|d| match d {
            Delivery::Output(f) => Some(f.seq),
            _ => None,
        })
        .collect()
}

fn push_n(p: &mut Publisher<Rec>, n: usize, len: usize) {
    for _ in 0..n {
        p.push(Bytes::from(vec![b'x'; len]));
    }
}

#[test]
fn fresh_viewer_gets_subscribed_snapshot_then_output() {
    let rec = Rec::default();
    let mut p = publisher(1000, Mode::Owner);
    push_n(&mut p, 3, 10);
    let done = p.subscribe(sub(&rec, 1, None, 100, Kind::Viewer), (80, 24));
    assert!(done.added && !done.resumed);
    let wanted = p.take_wanted();
    assert_eq!(wanted.len(), 1);
    push_n(&mut p, 1, 10);
    assert!(matches!(
        rec.take()[..],
        [(1, Delivery::Subscribed { last_seq: 3, .. })]
    ));
    p.snapshot_done(1, wanted[0].generation, snap(3));
    let got = rec.take_for(1);
    assert!(matches!(got[0], Delivery::Snapshot { seq: 3, .. }));
    assert_eq!(seqs(&got), vec![4]);
}

#[test]
fn resume_replays_within_credit_and_continues_on_ack() {
    let rec = Rec::default();
    let mut p = publisher(10_000, Mode::Owner);
    push_n(&mut p, 10, 10);
    p.subscribe(sub(&rec, 1, Some(2), 30, Kind::Viewer), (80, 24));
    assert!(p.take_wanted().is_empty());
    // The window is full once 30 bytes are out: frames 3, 4, 5.
    assert_eq!(seqs(&rec.take_for(1)), vec![3, 4, 5]);
    p.ack(1, 4);
    assert_eq!(seqs(&rec.take_for(1)), vec![6, 7]);
    p.ack(1, 99);
    assert_eq!(seqs(&rec.take_for(1)), vec![8, 9, 10]);
}

#[test]
fn a_resume_older_than_the_ring_resyncs_a_viewer_with_a_snapshot() {
    let rec = Rec::default();
    let mut p = publisher(50, Mode::Owner);
    push_n(&mut p, 10, 10);
    p.subscribe(sub(&rec, 1, Some(1), 1000, Kind::Viewer), (80, 24));
    let got = rec.take_for(1);
    assert!(matches!(got[1], Delivery::ResyncRequired { last_seq: 10 }));
    assert_eq!(p.take_wanted().len(), 1);
}

#[test]
fn a_slow_viewer_resyncs_alone_when_acks_resume() {
    let rec = Rec::default();
    let mut p = publisher(100, Mode::Owner);
    p.subscribe(sub(&rec, 1, Some(0), 20, Kind::Viewer), (80, 24));
    p.subscribe(sub(&rec, 2, Some(0), 1000, Kind::Viewer), (80, 24));
    rec.take();
    push_n(&mut p, 30, 10);
    let all = rec.take();
    let fast: Vec<u64> = all
        .iter()
        .filter(|(s, _)| *s == 2)
        .filter_map(|(_, d)| match d {
            Delivery::Output(f) => Some(f.seq),
            _ => None,
        })
        .collect();
    assert_eq!(
        fast,
        (1..=30).collect::<Vec<_>>(),
        "the fast one is not held back"
    );
    p.ack(1, 2);
    let slow = rec.take_for(1);
    assert!(matches!(
        slow[..],
        [Delivery::ResyncRequired { last_seq: 30 }]
    ));
    let wanted = p.take_wanted();
    p.snapshot_done(1, wanted[0].generation, snap(30));
    push_n(&mut p, 1, 10);
    let slow = rec.take_for(1);
    assert!(matches!(slow[0], Delivery::Snapshot { seq: 30, .. }));
    // The two frames still in flight before the resync keep the window
    // half full until acked.
    assert_eq!(seqs(&slow), vec![31]);
}

#[test]
fn a_mirror_subscriber_skips_a_gap_without_a_snapshot() {
    let rec = Rec::default();
    let mut p = publisher(50, Mode::Owner);
    p.subscribe(sub(&rec, 1, None, 20, Kind::Mirror), (80, 24));
    assert!(
        p.take_wanted().is_empty(),
        "a mirror never wants a snapshot"
    );
    push_n(&mut p, 10, 10);
    assert_eq!(seqs(&rec.take_for(1)), vec![1, 2]);
    p.ack(1, 2);
    let got = rec.take_for(1);
    assert!(matches!(got[0], Delivery::ResyncRequired { last_seq: 10 }));
    push_n(&mut p, 1, 10);
    assert_eq!(seqs(&rec.take_for(1)), vec![11]);
    assert!(p.take_wanted().is_empty());
}

#[test]
fn a_mirror_takes_the_owners_seqs_and_jumps() {
    let rec = Rec::default();
    let mut p = mirror_publisher_frames(100, 1000, 10);
    p.subscribe(sub(&rec, 1, Some(100), 1000, Kind::Viewer), (80, 24));
    assert_eq!(p.push_at(102, Bytes::from_static(b"x")).err(), Some(101));
    p.push_at(101, Bytes::from_static(b"a")).unwrap();
    assert_eq!(seqs(&rec.take_for(1)), vec![101]);
    // The owner resynced this mirror: its subscriber resyncs too.
    p.jump(500);
    let got = rec.take_for(1);
    assert!(matches!(
        got[..],
        [Delivery::ResyncRequired { last_seq: 500 }]
    ));
    assert_eq!(p.take_wanted().len(), 1, "a viewer resyncs with a snapshot");
}

#[test]
fn a_resume_ahead_of_a_mirror_waits_for_the_frames() {
    let rec = Rec::default();
    let mut p = mirror_publisher(10, 1000);
    p.subscribe(sub(&rec, 1, Some(12), 1000, Kind::Viewer), (80, 24));
    assert!(p.is_waiting_ahead(1));
    for seq in 11..=14 {
        p.push_at(seq, Bytes::from_static(b"x")).unwrap();
    }
    assert_eq!(seqs(&rec.take_for(1)), vec![13, 14]);
    // A seq the owner never reaches: resynced on request.
    p.subscribe(sub(&rec, 2, Some(90), 1000, Kind::Viewer), (80, 24));
    p.resync_waiting(2);
    let got = rec.take_for(2);
    assert!(matches!(got[1], Delivery::ResyncRequired { last_seq: 14 }));
    assert_eq!(p.take_wanted().len(), 1);
}

#[test]
fn a_snapshot_ahead_of_the_ring_is_parked_until_the_ring_reaches_it() {
    let rec = Rec::default();
    let mut p = mirror_publisher(0, 30);
    p.push_at(1, Bytes::from(vec![b'x'; 10])).unwrap();
    p.subscribe(sub(&rec, 1, None, 1000, Kind::Viewer), (80, 24));
    let w = p.take_wanted()[0];
    p.snapshot_done(1, w.generation, snap(3));
    assert!(seqs(&rec.take_for(1)).is_empty());
    p.push_at(2, Bytes::from(vec![b'x'; 10])).unwrap();
    // Parked at 3: frames through 3 may go, none after it yet.
    assert!(!p.would_pause(25));
    p.push_at(3, Bytes::from(vec![b'x'; 10])).unwrap();
    let got = rec.take_for(1);
    assert!(matches!(got[0], Delivery::Snapshot { seq: 3, .. }));
    assert!(!p.would_pause(25), "delivered: unpinned");
}

#[test]
fn a_parked_snapshot_moves_the_pin_so_a_full_ring_reaches_it() {
    let rec = Rec::default();
    let mut p = mirror_publisher(0, 30);
    p.subscribe(sub(&rec, 1, None, 1000, Kind::Viewer), (80, 24));
    let w = p.take_wanted()[0];
    for seq in 1..=3 {
        p.push_at(seq, Bytes::from(vec![b'x'; 10])).unwrap();
    }
    assert!(p.would_pause(10), "pinned at 0 and full");
    // The owner rendered at 5: frames up to 5 may go now.
    p.snapshot_done(1, w.generation, snap(5));
    assert!(!p.would_pause(10));
    p.push_at(4, Bytes::from(vec![b'x'; 10])).unwrap();
    p.push_at(5, Bytes::from(vec![b'x'; 10])).unwrap();
    let got = rec.take_for(1);
    assert!(matches!(
        got.last(),
        Some(Delivery::Snapshot { seq: 5, .. })
    ));
}

#[test]
fn exited_comes_after_the_last_frame() {
    let rec = Rec::default();
    let mut p = publisher(1000, Mode::Owner);
    p.subscribe(sub(&rec, 1, Some(0), 10, Kind::Viewer), (80, 24));
    push_n(&mut p, 3, 10);
    p.finish(EventKind::Exited {
        exit_code: 3,
        signal: None,
    });
    assert_eq!(seqs(&rec.take_for(1)), vec![1]);
    p.ack(1, 1);
    assert_eq!(seqs(&rec.take_for(1)), vec![2]);
    p.ack(1, 2);
    let got = rec.take_for(1);
    assert_eq!(seqs(&got), vec![3]);
    assert!(matches!(
        got.last(),
        Some(Delivery::Event(EventKind::Exited { exit_code: 3, .. }))
    ));
}

#[derive(Debug, Clone)]
enum Op {
    Push(usize),
    Ack(usize),
    Resume(usize),
    Snapshots,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1usize..40).prop_map(Op::Push),
        3 => (0usize..3).prop_map(Op::Ack),
        1 => (0usize..3).prop_map(Op::Resume),
        2 => Just(Op::Snapshots),
    ]
}

/// What one viewer assembled: the seq it has through, bytes since its last
/// ack, whether it waits for a snapshot.
#[derive(Debug, Default, Clone)]
struct Viewer {
    through: u64,
    unacked: u64,
    awaiting: bool,
}

fn check(
    v: &mut Viewer,
    items: Vec<Delivery>,
    window: u64,
    max_frame: u64,
) -> Result<(), TestCaseError> {
    for item in items {
        match item {
            Delivery::Subscribed { .. } | Delivery::Event(_) => {}
            Delivery::ResyncRequired { .. } => v.awaiting = true,
            Delivery::Snapshot { seq, .. } => {
                prop_assert!(v.awaiting, "a snapshot only after resync or fresh");
                v.awaiting = false;
                v.through = seq;
            }
            Delivery::Output(f) => {
                prop_assert!(!v.awaiting, "no output while awaiting a snapshot");
                prop_assert_eq!(f.seq, v.through + 1, "output in order, no hole");
                v.through = f.seq;
                v.unacked += f.data.len() as u64;
                prop_assert!(v.unacked <= window + max_frame, "credit respected");
            }
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn viewers_get_every_frame_in_order_within_credit(
        ops in proptest::collection::vec(op(), 1..300),
        ring_bytes in 20usize..400,
        windows in proptest::collection::vec(10u64..200, 3),
    ) {
        let rec = Rec::default();
        let mut p = publisher(ring_bytes, Mode::Owner);
        let mut viewers = vec![Viewer::default(); 3];
        for (i, w) in windows.iter().enumerate() {
            p.subscribe(sub(&rec, i as u64, Some(0), *w, Kind::Viewer), (80, 24));
        }
        let snapshots = |p: &mut Publisher<Rec>| {
            for w in p.take_wanted() {
                let seq = p.last_seq();
                p.snapshot_done(w.sub, w.generation, snap(seq));
            }
        };
        for op in ops {
            match op {
                Op::Push(n) => { p.push(Bytes::from(vec![b'x'; n])); }
                Op::Ack(i) => {
                    let v = &mut viewers[i];
                    v.unacked = 0;
                    p.ack(i as u64, v.through);
                }
                Op::Resume(i) => {
                    // Everything of the old subscription is dropped, as a
                    // connection does until the new `subscribed`.
                    rec.take_for(i as u64);
                    let v = &mut viewers[i];
                    *v = Viewer { through: v.through, ..Viewer::default() };
                    p.subscribe(sub(&rec, i as u64, Some(v.through), windows[i], Kind::Viewer), (80, 24));
                }
                Op::Snapshots => snapshots(&mut p),
            }
            for (i, v) in viewers.iter_mut().enumerate() {
                check(v, rec.take_for(i as u64), windows[i], 40)?;
            }
        }
        // Acks and snapshots until quiet: everyone reaches the end.
        for _ in 0..1000 {
            snapshots(&mut p);
            for (i, v) in viewers.iter_mut().enumerate() {
                v.unacked = 0;
                p.ack(i as u64, v.through);
                check(v, rec.take_for(i as u64), windows[i], 40)?;
            }
            if viewers.iter().all(|v| v.through == p.last_seq() && !v.awaiting) {
                break;
            }
        }
        for v in &viewers {
            prop_assert_eq!(v.through, p.last_seq());
        }
    }
}

/// What a subscriber got, frames as their seqs and sizes as `cols * 1000`
/// (negative, to tell them apart).
fn frames_and_sizes(items: &[Delivery]) -> Vec<i64> {
    items
        .iter()
        .filter_map(|d| match d {
            Delivery::Output(f) => Some(f.seq as i64),
            Delivery::Event(EventKind::Resized { cols, .. }) => Some(-(*cols as i64) * 1000),
            _ => None,
        })
        .collect()
}

#[test]
fn a_size_change_reaches_a_subscriber_behind_between_the_frames_around_it() {
    let rec = Rec::default();
    let mut p = publisher(10_000, Mode::Owner);
    push_n(&mut p, 2, 10);
    // Behind: a window of two frames, resumed from 0.
    p.subscribe(sub(&rec, 1, Some(0), 20, Kind::Viewer), (80, 24));
    p.subscribe(sub(&rec, 2, Some(0), 10_000, Kind::Viewer), (80, 24));
    push_n(&mut p, 2, 10);
    p.resized(100, 30);
    push_n(&mut p, 1, 10);
    assert_eq!(
        frames_and_sizes(&rec.take_for(2)),
        vec![1, 2, 3, 4, -100_000, 5]
    );
    assert_eq!(frames_and_sizes(&rec.take_for(1)), vec![1, 2]);
    p.ack(1, 2);
    assert_eq!(frames_and_sizes(&rec.take_for(1)), vec![3, 4, -100_000]);
    p.ack(1, 4);
    assert_eq!(frames_and_sizes(&rec.take_for(1)), vec![5]);
    // A resume from before the change is told it again, in its place.
    p.subscribe(sub(&rec, 3, Some(3), 10_000, Kind::Viewer), (100, 30));
    assert_eq!(frames_and_sizes(&rec.take_for(3)), vec![4, -100_000, 5]);
    // A fresh viewer's snapshot has the size: not told again.
    p.subscribe(sub(&rec, 4, None, 10_000, Kind::Viewer), (100, 30));
    let wanted = p.take_wanted();
    p.snapshot_done(4, wanted[0].generation, snap(5));
    push_n(&mut p, 1, 10);
    assert_eq!(frames_and_sizes(&rec.take_for(4)), vec![6]);
}

#[test]
fn a_size_marked_right_after_a_snapshots_last_frame_is_told_after_it() {
    let rec = Rec::default();
    let mut p = publisher(10_000, Mode::Owner);
    push_n(&mut p, 3, 10);
    // A fresh viewer's screen is taken at frame 3; the session is
    // resized before the snapshot is handed back, with no frame between.
    p.subscribe(sub(&rec, 1, None, 10_000, Kind::Viewer), (80, 24));
    let wanted = p.take_wanted();
    p.resized(120, 40);
    p.snapshot_done(1, wanted[0].generation, snap(3));
    push_n(&mut p, 1, 10);
    assert_eq!(frames_and_sizes(&rec.take_for(1)), vec![-120_000, 4]);
    // A resume right after frame 3 is told it too (before frame 4).
    p.subscribe(sub(&rec, 2, Some(3), 10_000, Kind::Viewer), (120, 40));
    assert_eq!(frames_and_sizes(&rec.take_for(2)), vec![-120_000, 4]);
    // One from after frame 4 has seen it.
    p.subscribe(sub(&rec, 3, Some(4), 10_000, Kind::Viewer), (120, 40));
    assert_eq!(frames_and_sizes(&rec.take_for(3)), Vec::<i64>::new());
}
