//! Property tests of the session core over random event sequences: the
//! program's life (exit, EOF, keeper loss, kills, leave, close, revive,
//! timers of earlier runs) and the intake (reservations, snapshot pauses,
//! merging).

use bytes::Bytes;
use nix::sys::signal::Signal;
use proptest::prelude::*;
use termesh_transport::SessionStatus;

use super::*;
use crate::session::pty::{PtyEvent, READ_CHUNK};

#[derive(Debug, Clone)]
enum Op {
    Eof,
    Exited(u32),
    KeeperLost,
    Kill(bool),
    /// A timer of this run (`true`) or of the one before.
    EofGrace(bool),
    KillGrace(bool),
    Close,
    Leave,
    EventsEnded,
    Relaunch(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Eof),
        3 => (0u32..3).prop_map(Op::Exited),
        1 => Just(Op::KeeperLost),
        2 => any::<bool>().prop_map(Op::Kill),
        2 => any::<bool>().prop_map(Op::EofGrace),
        2 => any::<bool>().prop_map(Op::KillGrace),
        1 => Just(Op::Close),
        1 => Just(Op::Leave),
        1 => Just(Op::EventsEnded),
        2 => any::<bool>().prop_map(Op::Relaunch),
    ]
}

fn exit(code: u32) -> ExitInfo {
    ExitInfo { code, signal: None }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whatever happens, in any order: a run finishes at most once and
    /// only with the exit it saw; nothing is signalled once the program
    /// was let go; a closed session answers nothing more; timers of an
    /// earlier run do nothing; the status follows the program's state.
    #[test]
    fn the_programs_life_holds_its_invariants(
        kept in any::<bool>(),
        ops in proptest::collection::vec(op(), 0..40),
    ) {
        let mut core = SessionCore::running(kept, Duration::from_secs(5), u64::MAX);
        let mut exit_seen: Option<ExitInfo> = None;
        let mut finished_this_run = false;
        let mut let_go = false;
        for op in ops {
            let before = core.program();
            let run = core.run();
            let steps = match op {
                Op::Eof => core.eof(),
                Op::Exited(code) => {
                    // The first exit of a run counts (a run exits once).
                    if let Program::Running { .. } = core.program() {
                        exit_seen = Some(exit(code));
                    }
                    core.exited(exit(code))
                }
                Op::KeeperLost => core.keeper_lost(),
                Op::Kill(kill) => core.kill(if kill { Signal::SIGKILL } else { Signal::SIGTERM }),
                Op::EofGrace(now) => {
                    core.fired(Timer::EofGrace { run: if now { run } else { run.wrapping_sub(1) } })
                }
                Op::KillGrace(now) => {
                    core.fired(Timer::KillGrace { run: if now { run } else { run.wrapping_sub(1) } })
                }
                Op::Close => core.close(false),
                Op::Leave => core.leave(),
                Op::EventsEnded => core.events_ended(),
                Op::Relaunch(k) => {
                    if core.relaunched(k) {
                        prop_assert_eq!(core.run(), run + 1);
                        exit_seen = None;
                        finished_this_run = false;
                        let_go = false;
                    }
                    Vec::new()
                }
            };
            if let Program::Closed { status, exit } = before {
                prop_assert!(steps.is_empty(), "{:?} after close: {:?}", op, steps);
                prop_assert_eq!(core.status(), status);
                prop_assert_eq!(core.exit_code(), exit.map(|e| e.code));
            }
            if let (Program::Exited { exit }, Op::Close | Op::Leave) = (before, &op) {
                prop_assert_eq!(core.exit_code(), exit.map(|e| e.code), "closing keeps the exit");
            }
            if matches!(op, Op::EofGrace(false) | Op::KillGrace(false)) {
                prop_assert!(steps.is_empty(), "a timer of another run: {:?}", steps);
            }
            for step in &steps {
                match step {
                    Step::Signal(_) => prop_assert!(!let_go, "a signal after let go"),
                    Step::Finish(e) => {
                        prop_assert!(!finished_this_run, "finished twice");
                        prop_assert_eq!(Some(*e), exit_seen);
                        finished_this_run = true;
                        let_go = true;
                    }
                    Step::Lose | Step::LetGo | Step::Detach => let_go = true,
                    Step::Arm(..) | Step::Close { .. } => {}
                }
            }
            let status = core.status();
            match core.program() {
                Program::Running { .. } | Program::Draining { .. } | Program::Leaving => {
                    prop_assert_eq!(status, SessionStatus::Running);
                    prop_assert!(core.takes_input());
                }
                Program::Exited { exit } => {
                    prop_assert_eq!(status, SessionStatus::Exited);
                    prop_assert_eq!(exit, exit_seen);
                    prop_assert!(!core.takes_input() && !core.signallable());
                }
                Program::Lost => prop_assert_eq!(status, SessionStatus::Lost),
                Program::Closed { .. } => prop_assert!(!core.takes_input()),
            }
            if core.signallable() {
                prop_assert!(!let_go);
            }
        }
    }
}

#[test]
fn an_exit_after_eof_finishes_at_once_and_before_it_after_the_grace() {
    let mut core = SessionCore::running(false, Duration::from_secs(5), u64::MAX);
    assert!(core.eof().is_empty());
    assert_eq!(core.exited(exit(3)), [Step::Finish(exit(3))]);
    assert_eq!(
        (core.status(), core.exit_code()),
        (SessionStatus::Exited, Some(3))
    );

    let mut core = SessionCore::running(false, Duration::from_secs(5), u64::MAX);
    assert_eq!(
        core.exited(exit(0)),
        [Step::Arm(Timer::EofGrace { run: 0 }, EOF_GRACE)]
    );
    assert_eq!(core.status(), SessionStatus::Running);
    assert_eq!(
        core.fired(Timer::EofGrace { run: 0 }),
        [Step::Finish(exit(0))]
    );
}

#[test]
fn a_kill_grace_of_an_earlier_run_spares_the_revived_program() {
    let mut core = SessionCore::running(false, Duration::from_secs(5), u64::MAX);
    let steps = core.kill(Signal::SIGTERM);
    assert_eq!(steps[0], Step::Signal(Signal::SIGTERM));
    let Step::Arm(grace, _) = steps[1] else {
        panic!("{steps:?}")
    };
    core.eof();
    core.exited(exit(143));
    assert!(core.relaunched(false));
    assert!(core.fired(grace).is_empty(), "the new run is not killed");
    // A kill of the new run is followed through.
    let Step::Arm(grace, _) = core.kill(Signal::SIGINT)[1] else {
        panic!()
    };
    assert_eq!(core.fired(grace), [Step::Signal(Signal::SIGKILL)]);
}

#[test]
fn a_kept_program_is_left_running_when_the_node_stops() {
    let mut core = SessionCore::running(true, Duration::from_secs(5), u64::MAX);
    assert_eq!(core.leave(), [Step::Detach]);
    assert!(core.kill(Signal::SIGKILL).is_empty(), "not ours to signal");
    assert_eq!(core.events_ended(), [Step::Close { removed: false }]);
    assert_eq!(
        core.status(),
        SessionStatus::Running,
        "the store keeps it running"
    );

    let mut own = SessionCore::running(false, Duration::from_secs(5), u64::MAX);
    assert_eq!(
        own.leave(),
        [
            Step::Signal(Signal::SIGKILL),
            Step::LetGo,
            Step::Close { removed: false }
        ]
    );
}

#[test]
fn a_restored_session_is_ended_and_revives() {
    let mut core = SessionCore::restored(SessionStatus::Exited, Some(2), Duration::from_secs(5));
    assert_eq!(core.exit_code(), Some(2));
    assert!(core.ended() && !core.takes_input());
    let mut lost = SessionCore::restored(SessionStatus::Running, None, Duration::from_secs(5));
    assert_eq!(lost.status(), SessionStatus::Lost);
    assert!(lost.relaunched(true) && core.relaunched(false));
    assert_eq!(lost.status(), SessionStatus::Running);
    assert!(
        !lost.relaunched(true),
        "a running session is not relaunched"
    );
}

#[derive(Debug, Clone)]
enum In {
    Read(Vec<usize>),
    /// The next output would evict pinned frames.
    Pin,
    Unpin,
    /// The pending reservation succeeds (or fails).
    Reserved(bool),
}

fn input() -> impl Strategy<Value = In> {
    prop_oneof![
        4 => proptest::collection::vec(0usize..(READ_CHUNK / 2), 1..6).prop_map(In::Read),
        1 => Just(In::Pin),
        1 => Just(In::Unpin),
        2 => any::<bool>().prop_map(In::Reserved),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Every byte read is applied once, in order, with the other events in
    /// their places; no output is applied past the reserved seqs or while
    /// a snapshot pins the ring.
    #[test]
    fn intake_applies_everything_in_order_within_its_limits(
        inputs in proptest::collection::vec(input(), 1..40),
    ) {
        let mut intake = Intake::new(0);
        let mut last_seq = 0u64;
        let mut reserving: Option<u64> = None;
        let mut pinned = false;
        let mut read_bytes = Vec::new();
        let mut applied = Vec::new();
        let mut next_byte = 0u8;
        let mut next_seq = 0u64;
        for i in inputs {
            match i {
                In::Read(sizes) => {
                    let mut batch = Vec::new();
                    for (k, size) in sizes.into_iter().enumerate() {
                        if k % 3 == 2 {
                            batch.push(PtyEvent::Eof);
                            read_bytes.push(None);
                            continue;
                        }
                        let data: Vec<u8> = (0..size.max(1))
                            .map(|_| { next_byte = next_byte.wrapping_add(1); next_byte })
                            .collect();
                        read_bytes.extend(data.iter().map(|b| Some(*b)));
                        next_seq += 1;
                        batch.push(PtyEvent::Output { seq: next_seq, data: Bytes::from(data) });
                    }
                    intake.read(batch);
                }
                In::Pin => pinned = true,
                In::Unpin => {
                    pinned = false;
                    intake.unpause();
                }
                In::Reserved(ok) => {
                    if let Some(upto) = reserving.take() {
                        intake.reserved(upto, ok);
                    }
                }
            }
            loop {
                match intake.next(last_seq, |_| pinned) {
                    Next::Apply(PtyEvent::Output { seq, data }) => {
                        prop_assert_eq!(seq, last_seq + 1, "applied in seq order");
                        prop_assert!(last_seq < intake.seq_limit(), "past the reserved seqs");
                        prop_assert!(!pinned, "applied while pinned");
                        prop_assert!(data.len() <= READ_CHUNK);
                        last_seq += 1;
                        applied.extend(data.iter().map(|b| Some(*b)));
                        if let Some(upto) = intake.sent(last_seq) {
                            prop_assert!(reserving.is_none(), "two reservations at once");
                            reserving = Some(upto);
                        }
                    }
                    Next::Apply(_) => applied.push(None),
                    Next::Reserve(upto) => {
                        prop_assert!(reserving.is_none(), "two reservations at once");
                        prop_assert!(upto > last_seq);
                        reserving = Some(upto);
                        break;
                    }
                    Next::Wait | Next::Read => break,
                    Next::Yield => {}
                }
            }
        }
        prop_assert!(read_bytes.starts_with(&applied), "applied in order, once");
        // Unpinned and reserved to the end, everything is applied.
        pinned = false;
        intake.unpause();
        for _ in 0..2 * read_bytes.len() + 4 {
            if let Some(upto) = reserving.take() {
                intake.reserved(upto, true);
            }
            match intake.next(last_seq, |_| pinned) {
                Next::Apply(PtyEvent::Output { seq, data }) => {
                    prop_assert_eq!(seq, last_seq + 1);
                    last_seq += 1;
                    applied.extend(data.iter().map(|b| Some(*b)));
                    if let Some(upto) = intake.sent(last_seq) {
                        reserving = Some(upto);
                    }
                }
                Next::Apply(_) => applied.push(None),
                Next::Reserve(upto) => reserving = Some(upto),
                Next::Wait | Next::Yield => {}
                Next::Read => break,
            }
        }
        prop_assert_eq!(applied, read_bytes);
    }
}

#[test]
fn a_flood_lets_the_thread_go_after_each_turn_of_output() {
    let mut intake = Intake::new(u64::MAX);
    let frame = |seq: u64| PtyEvent::Output {
        seq,
        data: Bytes::from(vec![b'y'; 40 << 10]),
    };
    intake.read((1..=4).map(frame));
    let mut steps = Vec::new();
    loop {
        match intake.next(0, |_| false) {
            Next::Apply(PtyEvent::Output { seq, .. }) => steps.push(format!("out{seq}")),
            Next::Yield => steps.push("yield".into()),
            Next::Read => break,
            other => panic!("{other:?}"),
        }
    }
    // 80 KiB is past a turn: the thread's other sessions run; nothing is
    // held back or lost, and a turn that ends with everything applied
    // reads on.
    assert_eq!(steps, ["out1", "out2", "yield", "out3", "out4"]);
    intake.read([frame(5)]);
    assert!(matches!(intake.next(0, |_| false), Next::Yield));
    assert!(matches!(intake.next(0, |_| false), Next::Apply(_)));
}
