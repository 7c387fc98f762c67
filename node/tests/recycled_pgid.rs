//! The SIGKILL that follows a kill's grace time never reaches a process
//! group that merely reuses the id of an exited session's program. The
//! test makes the kernel reuse the id (root writes `ns_last_pid`) and
//! puts a decoy group there. Its own test binary: few other processes
//! start while it steers pid allocation.

mod common;

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use common::*;
use termesh_transport::{ClientMsg, SessionStatus};

const LAST_PID: &str = "/proc/sys/kernel/ns_last_pid";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_late_kill_spares_a_recycled_process_group() {
    let node = TestNode::start_with(|c| c.session.kill_grace = Duration::from_secs(3));
    let first = node.create(&["sh", "-c", "exec sleep 1000"]).await.id;
    let pid = within(PATIENCE, "the program's pid", async {
        loop {
            if let [pid] = session_pids(&first)[..] {
                return pid;
            }
            poll_pause().await;
        }
    })
    .await;

    let mut c = node.client(OPERATOR).await;
    c.request(|id| ClientMsg::Kill {
        id,
        session: first.clone(),
        signal: None,
    })
    .await
    .unwrap();
    node.wait_info(&first, "the first session to exit", |s| {
        s.status == SessionStatus::Exited
    })
    .await;

    // A decoy that leads a process group whose id is the exited program's.
    let mut decoy = within(PATIENCE, "a decoy with the recycled pid", async {
        loop {
            std::fs::write(LAST_PID, (pid - 1).to_string())
                .expect("writing ns_last_pid needs root");
            let mut child = Command::new("sleep")
                .arg("1000")
                .process_group(0)
                .spawn()
                .unwrap();
            if child.id() as i32 == pid {
                return child;
            }
            let _ = child.kill();
            let _ = child.wait();
            // The old pid is free only once the node has reaped it.
            poll_pause().await;
        }
    })
    .await;

    // A second session, killed now, whose program ignores TERM: its own
    // grace SIGKILL comes after the first session's timer has fired.
    let second = node
        .create(&[
            "sh",
            "-c",
            "trap '' TERM; echo armed; while :; do sleep 0.1; done",
        ])
        .await
        .id;
    wait_output(&node, &second, "armed").await;
    c.request(|id| ClientMsg::Kill {
        id,
        session: second.clone(),
        signal: None,
    })
    .await
    .unwrap();
    let info = node
        .wait_info(&second, "the second session's grace kill", |s| {
            s.status == SessionStatus::Exited
        })
        .await;
    assert_eq!(info.exit_code, Some(137));
    let status = decoy.try_wait().unwrap();
    let _ = decoy.kill();
    let _ = decoy.wait();
    assert_eq!(status, None, "the decoy group was killed: {status:?}");
}
