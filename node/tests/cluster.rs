//! Three real nodes from `termesh cluster init` on 127.0.0.1-3, joined by
//! the QUIC mesh: each lists every session with its owner, a watcher on
//! one sees sessions made on another, an owner killed with SIGKILL shows
//! its sessions `unreachable`, and a restarted owner links up by itself.

mod common;

use common::cluster::Cluster;
use common::*;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg, SessionInfo, SessionStatus};

async fn list(cluster: &Cluster, i: usize) -> Vec<SessionInfo> {
    let Ok(mut c) = Client::connect(&cluster.target(i)).await else {
        return Vec::new();
    };
    let reply = c.request(|id| ClientMsg::List { id }).await;
    c.close().await;
    match reply {
        Ok(ServerMsg::Sessions { sessions, .. }) => sessions,
        _ => Vec::new(),
    }
}

async fn create(cluster: &Cluster, i: usize, name: &str) -> SessionInfo {
    let req = CreateRequest {
        command: Some(vec!["sleep".into(), "100000".into()]),
        name: Some(name.into()),
        ..Default::default()
    };
    within(PATIENCE, "the node to create", async {
        loop {
            if let Ok(mut c) = Client::connect(&cluster.target(i)).await {
                if let Ok(ServerMsg::Created { session, .. }) = c
                    .request(|id| ClientMsg::Create {
                        id,
                        req: req.clone(),
                    })
                    .await
                {
                    return session;
                }
            }
            poll_pause().await;
        }
    })
    .await
}

/// Waits until node `i`'s `list` satisfies `done`.
async fn wait_list(
    cluster: &Cluster,
    i: usize,
    what: &str,
    done: impl Fn(&[SessionInfo]) -> bool,
) -> Vec<SessionInfo> {
    let result = tokio::time::timeout(PATIENCE, async {
        loop {
            let sessions = list(cluster, i).await;
            if done(&sessions) {
                return sessions;
            }
            poll_pause().await;
        }
    })
    .await;
    result.unwrap_or_else(|_| {
        panic!(
            "node {i}: timed out waiting for {what}; its log:\n{}",
            cluster.log(i)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_share_one_directory_and_survive_an_owner_crash() {
    let mut cluster = Cluster::start(&["a", "b", "c"]);
    let made: Vec<SessionInfo> = vec![
        create(&cluster, 0, "on-a").await,
        create(&cluster, 1, "on-b").await,
        create(&cluster, 2, "on-c").await,
    ];
    for (i, s) in made.iter().enumerate() {
        assert_eq!(s.node, cluster.nodes[i].name);
    }
    // Every node lists every session, with its owner.
    for i in 0..3 {
        let sessions = wait_list(&cluster, i, "all three sessions", |l| l.len() == 3).await;
        for want in &made {
            let got = sessions.iter().find(|s| s.id == want.id).unwrap();
            assert_eq!(got.node, want.node, "node {i}");
            assert_eq!(got.status, SessionStatus::Running);
        }
    }

    // A watcher on a hears of a session made on c.
    let mut watcher = Client::connect(&cluster.target(0)).await.unwrap();
    watcher.request(|id| ClientMsg::Watch { id }).await.unwrap();
    let late = create(&cluster, 2, "late-on-c").await;
    within(PATIENCE, "a's watcher to hear of c's session", async {
        loop {
            if let ServerMsg::SessionChanged { session } = watcher.recv().await.unwrap() {
                if session.id == late.id {
                    assert_eq!(session.node, "c");
                    return;
                }
            }
        }
    })
    .await;

    // c dies without a word: a and b keep its sessions, as unreachable.
    cluster.kill_node(2);
    for i in 0..2 {
        let sessions = wait_list(&cluster, i, "c's sessions unreachable", |l| {
            l.iter()
                .filter(|s| s.node == "c")
                .all(|s| s.status == SessionStatus::Unreachable)
        })
        .await;
        assert_eq!(
            sessions.iter().filter(|s| s.node == "c").count(),
            2,
            "node {i} kept them"
        );
    }
    let told = within(PATIENCE, "the watcher to hear c is unreachable", async {
        loop {
            if let ServerMsg::SessionChanged { session } = watcher.recv().await.unwrap() {
                if session.node == "c" && session.status == SessionStatus::Unreachable {
                    return session;
                }
            }
        }
    })
    .await;
    assert!(told.id == late.id || told.id == made[2].id);

    // c comes back (its programs died with it): the links re-form by
    // themselves and its new directory replaces the old.
    cluster.start_node(2);
    let fresh = create(&cluster, 2, "after-restart").await;
    for i in 0..2 {
        wait_list(&cluster, i, "c's new directory", |l| {
            let on_c: Vec<&SessionInfo> = l.iter().filter(|s| s.node == "c").collect();
            on_c.len() == 1 && on_c[0].id == fresh.id && on_c[0].status == SessionStatus::Running
        })
        .await;
    }
    assert!(
        cluster
            .log(0)
            .contains("peer link up peer=c restarted=true"),
        "{}",
        cluster.log(0)
    );
}
