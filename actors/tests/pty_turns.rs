//! Two sessions' PTYs on one session thread (a current-thread runtime, as
//! a node runs its sessions): one runs `yes`, whose output is taken as
//! fast as it comes, and the other `cat`. Each key typed into `cat` is
//! echoed while the flood goes on: the flood's reads take turns with the
//! other session's tasks rather than keep the thread until the flood
//! pauses, for it never does.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use termesh_actors::session::pty::{spawn, PtyEvent, PtyIo, Sequencer, SpawnSpec};
use tokio::sync::mpsc::Receiver;

/// How long anything here may take on a loaded host.
const BOUND: Duration = Duration::from_secs(60);

fn program(script: &str) -> SpawnSpec {
    SpawnSpec {
        command: vec!["sh".into(), "-c".into(), script.into()],
        cwd: None,
        env: BTreeMap::new(),
        cols: 80,
        rows: 24,
    }
}

/// Waits, bounded, until the typed session has printed `needle`.
async fn wait_for(events: &mut Receiver<PtyEvent>, seen: &mut String, needle: &str) {
    tokio::time::timeout(BOUND, async {
        while !seen.contains(needle) {
            match events.recv().await {
                Some(PtyEvent::Output { data, .. }) => {
                    seen.push_str(&String::from_utf8_lossy(&data))
                }
                other => panic!("the typed session ended: {other:?} after {seen:?}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {needle:?} while the flood ran; saw {seen:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_echoed_between_a_floods_reads_on_one_session_thread() {
    let io = PtyIo::default();
    let (thread, _stop) = common::session_thread("pty-home");
    let unlimited = |name: &str| Sequencer::new(name.into(), None, 0, u64::MAX);

    let mut flood = spawn((&io, &thread), &program("exec yes flood")).unwrap();
    flood.take_seqs(unlimited("flood"));
    // Bytes of the flood taken so far.
    let (counted, mut flooded) = tokio::sync::watch::channel(0usize);
    let drain = tokio::spawn(async move {
        while let Some(event) = flood.events.recv().await {
            match event {
                PtyEvent::Output { data, .. } => counted.send_modify(|n| *n += data.len()),
                other => panic!("the flood stopped: {other:?}"),
            }
        }
    });
    // The flood is under way before anything is typed.
    tokio::time::timeout(BOUND, flooded.wait_for(|n| *n >= 1 << 20))
        .await
        .expect("the flood's first MiB in time")
        .expect("the flood's drain ended");

    let mut typed = spawn(
        (&io, &thread),
        &program("stty raw -echo; echo ready; exec cat"),
    )
    .unwrap();
    typed.take_seqs(unlimited("typed"));
    let mut seen = String::new();
    wait_for(&mut typed.events, &mut seen, "ready").await;
    let before = *flooded.borrow();
    for key in 0..20 {
        let word = format!("<key{key}>");
        typed
            .input
            .try_send(bytes::Bytes::from(word.clone()))
            .unwrap();
        wait_for(&mut typed.events, &mut seen, &word).await;
    }
    // The flood went on all the while: the echoes came between its reads,
    // not after it.
    let during = *flooded.borrow() - before;
    assert!(during > 0, "the flood paused while keys were echoed");
    assert!(!drain.is_finished(), "the flood ended");
    drain.abort();
}
