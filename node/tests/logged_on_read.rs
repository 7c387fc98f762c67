//! Output is in the output log as soon as it is read, not once the session
//! gets to it: frames queued behind a busy session thread are on disk (in
//! the page cache), so a node killed then loses none of them. Held here by
//! the session's fault hook (process-wide: its own test binary).

mod common;

use std::path::Path;
use std::sync::atomic::Ordering;

use common::*;
use termesh_actors::session::HOLD_INTAKE;

/// Every file under `dir`, read whole, searched for `needle`.
fn on_disk(dir: &Path, needle: &[u8]) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let path = e.path();
        if path.is_dir() {
            on_disk(&path, needle)
        } else {
            std::fs::read(&path).is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_the_session_has_not_taken_in_is_already_logged() {
    let node = TestNode::start();
    let script = "i=0; while [ $i -lt 120 ]; do echo line-$i.; i=$((i+1)); sleep 0.02; done; \
                  echo done-all; exec sleep 1000";
    let session = node.create(&["sh", "-c", script]).await.id;
    wait_output(&node, &session, "line-3.").await;

    HOLD_INTAKE.store(true, Ordering::SeqCst);
    let seen = wait_output(&node, &session, "line-").await;
    let last = seen
        .split("line-")
        .filter_map(|l| l.split('.').next()?.parse::<u32>().ok())
        .max()
        .unwrap();
    // Printed after the session stopped taking output in: logged all the
    // same (before the change, only what the session applied was).
    let later = format!("line-{}.", last + 20);
    // (`within` fails the test if it never does.)
    within(PATIENCE, "output read while held to be logged", async {
        while !on_disk(node.data_dir.path(), later.as_bytes()) {
            poll_pause().await;
        }
    })
    .await;
    assert!(
        !wait_output(&node, &session, "line-").await.contains(&later),
        "the session took it in: the hold did not hold"
    );

    // Let go: every line reaches a subscriber from the start once, in
    // order, with no hole in the seqs (`Stream` panics on one).
    HOLD_INTAKE.store(false, Ordering::SeqCst);
    let mut c = node.client(VIEWER).await;
    subscribe(&mut c, &session, Some(0), 1 << 20).await.unwrap();
    let mut s = Stream::new(1 << 20);
    within(
        PATIENCE,
        "every line",
        pump_until(&mut c, &session, &mut s, true, |s| {
            s.data.windows(8).any(|w| w == b"done-all")
        }),
    )
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&s.data);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("line-")).collect();
    let want: Vec<String> = (0..120).map(|i| format!("line-{i}.")).collect();
    assert_eq!(lines, want, "every line once, in order");
    assert_eq!(s.resyncs, 0);
    c.close().await;
}
