//! A signal that interrupts the thread a PTY's I/O runs on while it waits
//! is not the end of output. The test installs a handler without
//! SA_RESTART and signals that thread (a session's, as a node runs its
//! sessions: a current-thread runtime) while it waits for readiness (in an
//! `epoll_wait`), then types. Its own test binary: the handler is
//! process-wide.
#![allow(unsafe_code)] // sigaction and tgkill, to interrupt one thread.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use termesh_actors::session::pty::{spawn, PtyEvent, SpawnSpec};

extern "C" fn ignore(_: libc::c_int) {}

/// The threads named `name` in this process, once one sits in a wait.
fn threads_waiting(name: &str) -> Vec<i32> {
    let waits = [
        libc::SYS_epoll_wait,
        libc::SYS_epoll_pwait,
        libc::SYS_epoll_pwait2,
        libc::SYS_futex,
    ]
    .map(|n| n.to_string());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut found = Vec::new();
        let mut waiting = false;
        for entry in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let tid = entry.file_name().to_string_lossy().parse::<i32>().unwrap();
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            let syscall = std::fs::read_to_string(entry.path().join("syscall")).unwrap_or_default();
            if comm.trim() == name {
                found.push(tid);
                let call = syscall.split(' ').next().unwrap_or("");
                waiting |= waits.iter().any(|w| w == call);
            }
        }
        if waiting {
            return found;
        }
        assert!(Instant::now() < deadline, "no thread {name} waiting");
        // Another thread's state has no event to wait on: poll, bounded above.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The name of the thread the PTY's tasks run on.
const THREAD: &str = "pty-home";

#[test]
fn an_interrupted_read_is_not_end_of_output() {
    let action = SigAction::new(
        SigHandler::Handler(ignore),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler does nothing, so it is async-signal-safe.
    unsafe { sigaction(Signal::SIGUSR1, &action) }.unwrap();

    let io = termesh_actors::session::pty::PtyIo::default();
    let (thread, _stop) = common::session_thread(THREAD);
    let mut pty = spawn(
        (&io, &thread),
        &SpawnSpec {
            command: vec!["sh".into(), "-c".into(), "echo ready; exec cat".into()],
            cwd: None,
            env: BTreeMap::new(),
            cols: 80,
            rows: 24,
        },
    )
    .unwrap();
    // No store: seqs without a limit.
    pty.take_seqs(termesh_actors::session::pty::Sequencer::new(
        "eintr".into(),
        None,
        0,
        u64::MAX,
    ));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut seen = String::new();
    let mut wait_for = |needle: &str, seen: &mut String| {
        runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(60), async {
                while !seen.contains(needle) {
                    match pty.events.recv().await {
                        Some(PtyEvent::Output { data, .. }) => {
                            seen.push_str(&String::from_utf8_lossy(&data))
                        }
                        Some(PtyEvent::Eof) => panic!("the reader ended: {seen:?}"),
                        other => panic!("{other:?}"),
                    }
                }
            })
            .await
            .expect("output in time")
        })
    };
    wait_for("ready", &mut seen);
    for round in 0..3 {
        for tid in threads_waiting(THREAD) {
            // SAFETY: tgkill with this process's id and one of its threads.
            let sent =
                unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGUSR1) };
            assert_eq!(sent, 0);
        }
        let word = format!("after-signal-{round}");
        pty.input
            .try_send(bytes::Bytes::from(format!("{word}\n")))
            .unwrap();
        wait_for(&word, &mut seen);
    }
}
