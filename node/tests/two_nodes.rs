//! Two nodes in one process share nothing a node stops with: each runs
//! its sessions' PTY I/O on threads of its own, which end with it, and the
//! other node's sessions go on echoing and have their exits seen. (Its own
//! test binary: it counts the process's `pty-io` threads.)

mod common;

use common::*;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, SessionStatus};

/// The process's threads named `name`.
fn threads(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

async fn wait_threads(name: &str, want: usize, what: &str) {
    within(PATIENCE, what, async {
        while threads(name) != want {
            poll_pause().await;
        }
    })
    .await;
}

async fn type_line(node: &TestNode, session: &str, line: &str) {
    let mut c: Client = node.client(OPERATOR).await;
    c.send(&ClientMsg::Input {
        session: session.into(),
        data: format!("{line}\n").into_bytes(),
    })
    .await
    .unwrap();
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_takes_its_pty_threads_and_leaves_the_other_working() {
    assert_eq!(threads("pty-io"), 0, "no node has started a session yet");
    let a = TestNode::start();
    let b = TestNode::start();
    let on_a = a.create(&["cat"]).await;
    wait_threads("pty-io", 2, "node a's two pty-io threads").await;
    let echo = b.create(&["cat"]).await;
    let exits = b.create(&["sh", "-c", "read line; exit $line"]).await;
    wait_threads("pty-io", 4, "node b's two pty-io threads beside a's").await;
    type_line(&a, &on_a.id, "from-a").await;
    wait_output(&a, &on_a.id, "from-a").await;

    tokio::task::spawn_blocking(move || a.node.stop())
        .await
        .unwrap()
        .expect("node a stops");
    wait_threads("pty-io", 2, "node a's pty-io threads to end with it").await;
    assert_eq!(
        threads("pty-reaper"),
        1,
        "one SIGCHLD reaper for the process"
    );

    type_line(&b, &echo.id, "from-b-after-a-stopped").await;
    wait_output(&b, &echo.id, "from-b-after-a-stopped").await;
    type_line(&b, &exits.id, "7").await;
    let ended = b
        .wait_info(&exits.id, "b's program's exit after a stopped", |s| {
            s.status == SessionStatus::Exited
        })
        .await;
    assert_eq!(ended.exit_code, Some(7));

    tokio::task::spawn_blocking(move || b.node.stop())
        .await
        .unwrap()
        .expect("node b stops");
    wait_threads("pty-io", 0, "node b's pty-io threads to end with it").await;
}
