//! A session holds one descriptor in the node, its PTY master (the exit
//! is learned from SIGCHLD, not a pidfd; writes go straight to it while
//! the terminal takes them): the descriptor limit, the first thing that stops a node
//! from growing, allows as many sessions as descriptors. Removing the
//! sessions gives their descriptors back, and so does a session that
//! ended while a background job of its program still held the terminal.

mod common;

use common::binary::BinaryNode;
use common::*;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg};

const SESSIONS: usize = 50;

fn open_descriptors(node: &BinaryNode) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", node.pid()))
        .unwrap()
        .count()
}

async fn create(c: &mut Client) -> String {
    let req = CreateRequest {
        command: Some(vec!["cat".into()]),
        ..Default::default()
    };
    match c.request(|id| ClientMsg::Create { id, req }).await.unwrap() {
        ServerMsg::Created { session, .. } => session.id,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_holds_one_descriptor_and_gives_it_back() {
    let node = BinaryNode::start("");
    let mut c = Client::connect(&node.target(OPERATOR)).await.unwrap();
    // The first session starts what all share (the PTY I/O runtime, the
    // SIGCHLD listener).
    let first = create(&mut c).await;
    let before = open_descriptors(&node);
    let mut ids = Vec::new();
    for _ in 0..SESSIONS {
        ids.push(create(&mut c).await);
    }
    let after = open_descriptors(&node);
    println!("{SESSIONS} sessions: descriptors {before} -> {after}");
    assert!(
        (SESSIONS..=SESSIONS + 3).contains(&(after - before)),
        "{SESSIONS} sessions opened {} descriptors",
        after - before
    );
    for session in ids.into_iter().chain([first]) {
        c.request(|id| ClientMsg::Remove {
            id,
            session,
            purge: Some(true),
        })
        .await
        .unwrap();
    }
    within(PATIENCE, "the descriptors to be given back", async {
        while open_descriptors(&node) >= before {
            poll_pause().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ended_beside_a_background_job_gives_its_descriptor_back() {
    let node = BinaryNode::start("");
    let mut c = Client::connect(&node.target(OPERATOR)).await.unwrap();
    let warm = create(&mut c).await;
    let before = open_descriptors(&node);
    // The program exits at once; its background job ignores the hangup
    // and keeps the terminal open past this test's patience, so the PTY
    // never reports the end of its output. The test ends the job.
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("job.pid");
    let script = format!(
        "trap '' HUP; sleep 300 & echo $! > {}; exit 3",
        pid_file.display()
    );
    let _job = KillOnDrop(pid_file);
    let req = CreateRequest {
        command: Some(vec!["sh".into(), "-c".into(), script]),
        ..Default::default()
    };
    let session = match c.request(|id| ClientMsg::Create { id, req }).await.unwrap() {
        ServerMsg::Created { session, .. } => session.id,
        other => panic!("{other:?}"),
    };
    within(
        PATIENCE,
        "the session to end and its descriptor to go",
        async {
            loop {
                let ended = match c.request(ClientMsg::list).await.unwrap() {
                    ServerMsg::Sessions { sessions, .. } => sessions
                        .iter()
                        .any(|s| s.id == session && s.exit_code == Some(3)),
                    other => panic!("{other:?}"),
                };
                if ended && open_descriptors(&node) <= before {
                    return;
                }
                poll_pause().await;
            }
        },
    )
    .await;
    drop(warm);
}

/// Kills the process whose pid the file names (the test's background job).
struct KillOnDrop(std::path::PathBuf);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
        {
            let pid = nix::unistd::Pid::from_raw(pid);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
}
