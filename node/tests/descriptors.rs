//! A session holds one descriptor in the node, its PTY master (the exit
//! is learned from SIGCHLD, not a pidfd; reads and writes share the one
//! registration): the descriptor limit, the first thing that stops a node
//! from growing, allows as many sessions as descriptors. Removing the
//! sessions gives their descriptors back.

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
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}
