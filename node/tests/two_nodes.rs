//! Two nodes in one process share nothing a node stops with: each runs
//! its sessions and their PTY I/O on threads of its own (`sessions`, one
//! per core), which end with it, and the other node's sessions go on
//! echoing and have their exits seen. (Its own test binary: it counts the
//! process's threads by name.)

mod common;

use common::*;
use termesh_actors::directory::homes::THREAD_NAME;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, SessionStatus};

/// A node's session threads: one per core.
fn per_node() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

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
async fn a_stopped_node_takes_its_session_threads_and_leaves_the_other_working() {
    let n = per_node();
    assert_eq!(threads(THREAD_NAME), 0, "no node has started yet");
    let a = TestNode::start();
    wait_threads(THREAD_NAME, n, "node a's session threads").await;
    let b = TestNode::start();
    wait_threads(THREAD_NAME, 2 * n, "node b's session threads beside a's").await;
    let on_a = a.create(&["cat"]).await;
    let echo = b.create(&["cat"]).await;
    let exits = b.create(&["sh", "-c", "read line; exit $line"]).await;
    type_line(&a, &on_a.id, "from-a").await;
    wait_output(&a, &on_a.id, "from-a").await;
    // Their PTYs' tasks run on those threads: none of their own.
    assert_eq!(
        threads("pty-io"),
        0,
        "no PTY thread beside the session threads"
    );
    let a_program = session_pids(&on_a.id);
    assert_eq!(a_program.len(), 1, "node a's `cat`");

    tokio::task::spawn_blocking(move || a.node.stop())
        .await
        .unwrap()
        .expect("node a stops");
    wait_threads(THREAD_NAME, n, "node a's session threads to end with it").await;
    // Its program was killed with it and reaped, by its waiter or, when
    // its thread stopped first, by the process's reaper: no zombie left.
    within(PATIENCE, "node a's program reaped", async {
        while std::path::Path::new(&format!("/proc/{}", a_program[0])).exists() {
            poll_pause().await;
        }
    })
    .await;
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
    wait_threads(THREAD_NAME, 0, "node b's session threads to end with it").await;
}
