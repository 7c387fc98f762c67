//! Three real nodes from `termesh cluster init` on 127.0.0.1-3, joined by
//! the QUIC mesh: each lists every session with its owner, a watcher on
//! one sees sessions made on another, an owner killed with SIGKILL shows
//! its sessions `unreachable`, and a restarted owner links up by itself
//! with its earlier sessions `lost` everywhere, their history and screen
//! (from its store) readable through every node; a burst of keys sent
//! through another node by a client that leaves at once all reach the
//! owner, in order.

#[path = "../common/mod.rs"]
mod common;

mod agents;
mod grep;
mod lanes;
mod requests;
mod sizes;

use common::cluster::Cluster;
use common::*;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg, SessionInfo, SessionStatus};

/// Node `i`'s whole list, walked in pages of two (so every wait below
/// also walks pages mixing the node's own sessions and other nodes').
async fn list(cluster: &Cluster, i: usize) -> Vec<SessionInfo> {
    let Ok(mut c) = Client::connect(&cluster.target(i)).await else {
        return Vec::new();
    };
    let (mut all, mut after) = (Vec::new(), None);
    loop {
        let reply = c
            .request(|id| ClientMsg::List {
                id,
                after: after.take(),
                limit: Some(2),
            })
            .await;
        match reply {
            Ok(ServerMsg::Sessions { sessions, next, .. }) => {
                all.extend(sessions);
                match next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            _ => {
                all.clear();
                break;
            }
        }
    }
    c.close().await;
    all
}

async fn create(cluster: &Cluster, i: usize, name: &str) -> SessionInfo {
    let req = CreateRequest {
        command: Some(vec![
            "sh".into(),
            "-c".into(),
            format!("echo said-{name}; exec sleep 100000"),
        ]),
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
    let last = std::sync::Mutex::new(Vec::new());
    let result = tokio::time::timeout(PATIENCE, async {
        loop {
            let sessions = list(cluster, i).await;
            if done(&sessions) {
                return sessions;
            }
            *last.lock().unwrap() = sessions;
            poll_pause().await;
        }
    })
    .await;
    result.unwrap_or_else(|_| {
        panic!(
            "node {i}: timed out waiting for {what}; it listed {:#?}\nits log:\n{}",
            last.lock().unwrap(),
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

    // c comes back (its programs ran on under its PTY keeper, its store
    // kept their output): the links re-form by themselves and its new
    // directory replaces the old, with the earlier sessions running again
    // on every node.
    cluster.start_node(2);
    let fresh = create(&cluster, 2, "after-restart").await;
    for i in 0..3 {
        wait_list(&cluster, i, "c's new directory", |l| {
            let status = |id: &str| l.iter().find(|s| s.id == id).map(|s| s.status);
            l.iter().filter(|s| s.node == "c").count() == 3
                && status(&fresh.id) == Some(SessionStatus::Running)
                && status(&late.id) == Some(SessionStatus::Running)
                && status(&made[2].id) == Some(SessionStatus::Running)
        })
        .await;
    }
    // Their history and screen, from the store, read through every node.
    for i in 0..3 {
        let reply = ask(&cluster, i, |id| ClientMsg::History {
            id,
            session: made[2].id.clone(),
            limit: None,
            before_seq: None,
            rows: None,
        })
        .await;
        let Ok(ServerMsg::History { lines, .. }) = reply else {
            panic!("node {i}: {reply:?}");
        };
        let lines = lines.unwrap_or_default();
        assert!(
            lines.iter().any(|l| l == "said-on-c"),
            "node {i}: {lines:?}"
        );
        let reply = ask(&cluster, i, |id| ClientMsg::Screen {
            id,
            session: made[2].id.clone(),
            scrollback: None,
        })
        .await;
        let Ok(ServerMsg::Snapshot { data, .. }) = reply else {
            panic!("node {i}: {reply:?}");
        };
        assert!(String::from_utf8_lossy(&data).contains("said-on-c"));
    }
    assert!(
        cluster
            .log(0)
            .contains("peer link up peer=c restarted=true"),
        "{}",
        cluster.log(0)
    );
}

/// Waits until node `i` lists session `id` as `pred` wants it.
async fn session_on(cluster: &Cluster, i: usize, id: &str, pred: impl Fn(&SessionInfo) -> bool) {
    wait_list(cluster, i, "the session's change", |l| {
        l.iter().any(|s| s.id == id && pred(s))
    })
    .await;
}

/// One request from a client of node `i`; the reply or the error.
async fn ask(
    cluster: &Cluster,
    i: usize,
    make: impl FnOnce(u64) -> ClientMsg,
) -> Result<ServerMsg, String> {
    let mut c = Client::connect(&cluster.target(i))
        .await
        .map_err(|e| format!("{e:#}"))?;
    let reply = c.request(make).await.map_err(|e| format!("{e:#}"));
    c.close().await;
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_keys_from_a_client_that_leaves_at_once_all_reach_the_owner() {
    use common::cluster::{connect, create};
    let cluster = Cluster::start(&["a", "b"]);
    let script = "stty -echo; while read line; do echo \"got $line\"; done";
    let session = create(&cluster, 1, "a", script).await;
    let mut viewer = connect(&cluster, 0).await;
    let mut s = Stream::new(1 << 20);
    subscribe(&mut viewer, &session, Some(0), 1 << 20)
        .await
        .unwrap();
    // Keys through b, as fast as they come, then the client is gone: b
    // forwards each to a in order even while its link actor is busy.
    const KEYS: usize = 300;
    let mut typist = connect(&cluster, 1).await;
    for i in 0..KEYS {
        typist
            .send(&ClientMsg::Input {
                session: session.clone(),
                data: format!("k{i}\n").into_bytes(),
            })
            .await
            .unwrap();
    }
    typist.close().await;
    let last = format!("got k{}\r\n", KEYS - 1);
    within(
        PATIENCE,
        "every key echoed on a",
        pump_until(&mut viewer, &session, &mut s, true, |s| {
            String::from_utf8_lossy(&s.data).contains(&last)
        }),
    )
    .await
    .unwrap();
    let got: Vec<String> = String::from_utf8_lossy(&s.data)
        .lines()
        .filter_map(|l| l.strip_prefix("got ").map(str::to_string))
        .collect();
    let sent: Vec<String> = (0..KEYS).map(|i| format!("k{i}")).collect();
    assert_eq!(got, sent, "every key once, in order");
}
