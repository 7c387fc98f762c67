//! The screen cache's decisions: passes, overtaking, answers, bounds.
use bytes::Bytes;
use tokio::sync::oneshot;

use super::*;
use crate::output::vocab::ScreenOut;

fn result(seq: u64) -> ScreenResult {
    ScreenResult {
        seq,
        cols: 80,
        rows: 24,
        out: ScreenOut::Snapshot(Bytes::from_static(b"screen")),
    }
}

fn reply() -> (ScreenTo, oneshot::Receiver<Result<ScreenResult, ApiError>>) {
    let (tx, rx) = oneshot::channel();
    (ScreenTo::Reply(tx), rx)
}

const SNAP: ScreenWant = ScreenWant::Snapshot { scrollback: 0 };

/// Two passes may end in either order (a waited one overtakes a
/// background one): the newer model and snapshot stay (by seq, then
/// by the resizes applied).
#[test]
fn the_newer_model_and_snapshot_stay_whichever_pass_ends_last() {
    let mut cache = ScreenCache::default();
    cache.keep_model(Box::new(ScreenModel::new(80, 24, 20, 0)));
    cache.keep_model(Box::new(ScreenModel::new(80, 24, 10, 0)));
    assert_eq!(cache.model.as_ref().map(|m| m.seq()), Some(20));
    cache.keep_model(Box::new(ScreenModel::new(80, 24, 30, 0)));
    assert_eq!(cache.model.as_ref().map(|m| m.seq()), Some(30));
    cache.remember(SNAP, &result(20), 0);
    cache.remember(SNAP, &result(10), 0);
    assert_eq!(cache.last().map(|l| l.result.seq), Some(20));
    cache.remember(SNAP, &result(30), 0);
    assert_eq!(cache.last().map(|l| l.result.seq), Some(30));
    cache.keep_model(Box::new(ScreenModel::new(80, 24, 30, 2)));
    cache.keep_model(Box::new(ScreenModel::new(80, 24, 30, 1)));
    assert_eq!(cache.model.as_ref().map(|m| m.resize_id()), Some(2));
    cache.remember(SNAP, &result(30), 2);
    cache.remember(SNAP, &result(30), 1);
    assert_eq!(cache.last().map(|l| l.resize_id), Some(2));
}

#[test]
fn a_waited_request_overtakes_a_background_pass_after_a_while() {
    let mut cache = ScreenCache::default();
    let t0 = Instant::now();
    assert_eq!(cache.may_start(t0, false, false), Start::Nothing);
    assert_eq!(cache.may_start(t0, false, true), Start::Now, "a catch-up");
    cache.pass_started(true, t0);
    assert_eq!(
        cache.may_start(t0, false, true),
        Start::Nothing,
        "one at a time"
    );
    cache.ask("s", SNAP, reply().0);
    let soon = t0 + Duration::from_millis(10);
    assert_eq!(
        cache.may_start(soon, false, false),
        Start::After(OVERTAKE_AFTER - Duration::from_millis(10))
    );
    assert_eq!(
        cache.may_start(t0 + OVERTAKE_AFTER, false, false),
        Start::Now
    );
    let pass = cache.take_pass();
    assert!(!ScreenCache::in_background(&pass, false, true));
    cache.pass_started(false, t0 + OVERTAKE_AFTER);
    cache.ask("s", SNAP, reply().0);
    let later = t0 + OVERTAKE_AFTER * 2;
    assert_eq!(
        cache.may_start(later, false, false),
        Start::Nothing,
        "one waited"
    );
    cache.pass_ended(false);
    assert_eq!(cache.may_start(later, false, false), Start::Now);
    cache.pass_ended(true);
    assert!(!cache.job_running());
}

#[test]
fn looks_at_a_bulk_session_wait_for_its_background_pass() {
    let mut cache = ScreenCache::default();
    let t0 = Instant::now();
    cache.pass_started(true, t0);
    cache.ask("s", ScreenWant::Look, reply().0);
    let late = t0 + OVERTAKE_AFTER * 10;
    assert_eq!(cache.may_start(late, true, false), Start::Nothing, "bulk");
    assert_eq!(
        cache.may_start(late, false, false),
        Start::Now,
        "interactive"
    );
    let pass = cache.take_pass();
    assert!(ScreenCache::in_background(&pass, false, true));
    assert!(!ScreenCache::in_background(&pass, false, false));
}

#[test]
fn a_pass_computes_each_distinct_request_once() {
    let mut cache = ScreenCache::default();
    for _ in 0..3 {
        cache.ask("s", SNAP, reply().0);
    }
    cache.ask("s", ScreenWant::Text, reply().0);
    let pass = cache.take_pass();
    assert_eq!(pass.wants, [SNAP, ScreenWant::Text]);
    assert_eq!(pass.slots, [0, 0, 0, 1]);
    assert!(!cache.has_waiting());
}

#[test]
fn replies_past_the_bound_are_refused_busy_and_subscribers_keep_one() {
    let mut cache = ScreenCache::default();
    for _ in 0..MAX_WAITING {
        cache.ask("s", SNAP, reply().0);
    }
    let (to, mut rx) = reply();
    cache.ask("s", SNAP, to);
    let busy = rx.try_recv().expect("answered at once").unwrap_err();
    assert_eq!(busy.code, ErrorCode::Unavailable);
    // A subscriber's snapshot is never refused; a newer generation
    // replaces its older one.
    for generation in 1..=3 {
        cache.want_snapshot(SnapshotWanted {
            sub: 7,
            generation,
            scrollback: 0,
        });
    }
    let pass = cache.take_pass();
    let subs: Vec<u64> = pass
        .waiting
        .iter()
        .filter_map(|w| match w.to {
            ScreenTo::Sub { generation, .. } => Some(generation),
            _ => None,
        })
        .collect();
    assert_eq!(subs, [3]);
}

#[test]
fn a_failed_pass_is_retried_once_then_reported() {
    let mut cache = ScreenCache::default();
    let (to, mut rx) = reply();
    cache.ask("s", SNAP, to);
    let pass = cache.take_pass();
    assert!(cache.pass_failed(pass).is_empty(), "retried first");
    let pass = cache.take_pass();
    let failed = cache.pass_failed(pass);
    assert_eq!(failed.len(), 1);
    let ScreenTo::Reply(tx) = failed.into_iter().next().unwrap() else {
        panic!()
    };
    let _ = tx.send(Err(ApiError::new(ErrorCode::Internal, "x")));
    assert!(rx.try_recv().unwrap().is_err());
    assert!(!cache.has_waiting());
}

#[test]
fn an_unfilled_request_waits_for_the_whole_ring_and_answers_remember() {
    let mut cache = ScreenCache::default();
    cache.ask("s", SNAP, reply().0);
    cache.ask("s", ScreenWant::Text, reply().0);
    let pass = cache.take_pass();
    let answers = cache.pass_done(pass, &[None, Some(result(5))], 1);
    assert_eq!(answers.len(), 1);
    assert!(cache.last().is_none(), "text is not a snapshot to keep");
    let pass = cache.take_pass();
    assert!(pass.whole, "asked again of the whole ring");
    let answers = cache.pass_done(pass, &[Some(result(6))], 1);
    assert_eq!(answers.len(), 1);
    assert_eq!(cache.last().unwrap().result.seq, 6);
}

#[test]
fn the_last_snapshot_answers_only_while_current_and_without_a_model() {
    let mut cache = ScreenCache::default();
    cache.remember(SNAP, &result(9), 2);
    cache.ask("s", SNAP, reply().0);
    cache.ask("s", ScreenWant::Text, reply().0);
    // Output since, another size, another resize: not current.
    assert!(cache.answered_by_last(10, (80, 24), 2).is_empty());
    assert!(cache.answered_by_last(9, (100, 24), 2).is_empty());
    assert!(cache.answered_by_last(9, (80, 24), 3).is_empty());
    let answered = cache.answered_by_last(9, (80, 24), 2);
    assert_eq!(answered.len(), 1, "the same snapshot only");
    assert!(cache.has_waiting(), "the text request waits for a pass");
    // A failed pass takes the last snapshot with it.
    let pass = cache.take_pass();
    cache.pass_failed(pass);
    assert!(cache.current(9, (80, 24), 2).is_none());
}

#[derive(Debug, Clone)]
enum Op {
    Ask(bool),
    Want(u64),
    /// A pass: which of its wants it fills (bit mask), or a failure.
    Pass(Option<u8>),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        3 => any::<bool>().prop_map(Op::Ask),
        2 => (0u64..3).prop_map(Op::Want),
        3 => proptest::option::of(any::<u8>()).prop_map(Op::Pass),
    ]
}

/// Delivers what a pass answered or failed: replies through their
/// channel, a subscriber's generation into `subs`.
fn deliver(to: ScreenTo, ok: bool, subs: &mut Vec<(u64, u64)>) {
    match to {
        ScreenTo::Reply(tx) => {
            let answer = if ok {
                Ok(result(1))
            } else {
                Err(ApiError::new(ErrorCode::Internal, "failed"))
            };
            assert!(tx.send(answer).is_ok(), "answered once");
        }
        ScreenTo::Sub { sub, generation } => {
            assert!(!subs.contains(&(sub, generation)), "a snapshot twice");
            subs.push((sub, generation));
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

    /// Whatever passes fill, fail or leave unfilled: every reply is
    /// answered exactly once (busy, a screen or a failure), and each
    /// subscriber's newest snapshot is delivered exactly once.
    #[test]
    fn nothing_asked_is_lost_or_answered_twice(ops in proptest::collection::vec(op(), 0..60)) {
        let mut cache = ScreenCache::default();
        let mut replies = Vec::new();
        let mut newest = std::collections::HashMap::new();
        let mut subs = Vec::new();
        let mut generation = 0;
        for op in ops {
            match op {
                Op::Ask(text) => {
                    let (to, rx) = reply();
                    replies.push(rx);
                    cache.ask("s", if text { ScreenWant::Text } else { SNAP }, to);
                }
                Op::Want(sub) => {
                    generation += 1;
                    newest.insert(sub, generation);
                    cache.want_snapshot(SnapshotWanted { sub, generation, scrollback: 0 });
                }
                Op::Pass(outcome) => {
                    let pass = cache.take_pass();
                    match outcome {
                        Some(mask) => {
                            let results: Vec<Option<ScreenResult>> = (0..pass.wants.len())
                                .map(|i| (mask >> (i % 8) & 1 == 1).then(|| result(1)))
                                .collect();
                            for (to, _) in cache.pass_done(pass, &results, 0) {
                                deliver(to, true, &mut subs);
                            }
                        }
                        None => {
                            for to in cache.pass_failed(pass) {
                                deliver(to, false, &mut subs);
                            }
                        }
                    }
                }
            }
        }
        // Passes that fill everything until nothing waits.
        for _ in 0..4 {
            let pass = cache.take_pass();
            let results = vec![Some(result(1)); pass.wants.len()];
            for (to, _) in cache.pass_done(pass, &results, 0) {
                deliver(to, true, &mut subs);
            }
        }
        proptest::prop_assert!(!cache.has_waiting());
        for mut rx in replies {
            proptest::prop_assert!(rx.try_recv().is_ok(), "a reply was never answered");
        }
        for (sub, generation) in newest {
            proptest::prop_assert!(subs.contains(&(sub, generation)), "sub {} never got its newest snapshot", sub);
        }
    }
}
