//! An agent's state is decided on its owner and seen from every node; a
//! `send` through another node answers it, and one held until the session
//! waits is written there too.

use super::*;
use termesh_transport::{AgentState, SendWhen};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_state_is_seen_and_answered_from_any_node() {
    let cluster = Cluster::start(&["a", "b"]);
    let script = "printf 'Ship it? [y/n] '; read x; echo \"got $x\"; sleep 1; \
                  printf 'Again? [y/n] '; read y; echo \"then $y\"; exec sleep 1000";
    let req = CreateRequest {
        command: Some(vec!["sh".into(), "-c".into(), script.into()]),
        node: Some("a".into()),
        ..Default::default()
    };
    let created = within(PATIENCE, "create on a from b", async {
        loop {
            let made = ask(&cluster, 1, |id| ClientMsg::Create {
                id,
                req: req.clone(),
            })
            .await;
            if let Ok(ServerMsg::Created { session, .. }) = made {
                return session;
            }
            poll_pause().await;
        }
    })
    .await;
    let id = created.id;
    session_on(&cluster, 1, &id, |s| {
        s.state == Some(AgentState::Waiting) && s.waiting_for.as_deref() == Some("Ship it? [y/n]")
    })
    .await;
    // Answered through b; the next question's answer is sent through b
    // before it is asked, held on a until the session waits again.
    ask(&cluster, 1, |rid| ClientMsg::Send {
        id: rid,
        session: id.clone(),
        text: "y".into(),
        submit: None,
        when: None,
    })
    .await
    .unwrap();
    session_on(&cluster, 1, &id, |s| s.state == Some(AgentState::Working)).await;
    ask(&cluster, 1, |rid| ClientMsg::Send {
        id: rid,
        session: id.clone(),
        text: "n".into(),
        submit: None,
        when: Some(SendWhen::Waiting),
    })
    .await
    .unwrap();
    session_on(&cluster, 0, &id, |s| s.state == Some(AgentState::Idle)).await;
    let history = ask(&cluster, 1, |rid| ClientMsg::History {
        id: rid,
        session: id.clone(),
        limit: Some(4096),
        before_seq: None,
        rows: None,
    })
    .await
    .unwrap();
    let ServerMsg::History {
        data: Some(data), ..
    } = history
    else {
        panic!("{history:?}")
    };
    let text = String::from_utf8_lossy(&data);
    assert!(text.contains("got y") && text.contains("then n"), "{text}");
}

/// `wait` or `read` asked through node `i`.
async fn wait_through(cluster: &Cluster, i: usize, id: &str, until: &[&str]) -> (String, u64) {
    let reply = within(
        PATIENCE,
        "a wait through another node",
        ask(cluster, i, |rid| ClientMsg::Wait {
            id: rid,
            session: id.into(),
            until: until.iter().map(|s| s.to_string()).collect(),
            timeout_ms: Some(120_000),
        }),
    )
    .await;
    match reply {
        Ok(ServerMsg::State { state, seq, .. }) => (state, seq),
        other => panic!("{other:?}"),
    }
}

async fn read_through(cluster: &Cluster, i: usize, id: &str, since: u64) -> (u64, String) {
    match ask(cluster, i, |rid| ClientMsg::Read {
        id: rid,
        session: id.into(),
        since_seq: Some(since),
        max_bytes: None,
    })
    .await
    {
        Ok(ServerMsg::Text { seq, text, .. }) => (seq, text),
        other => panic!("{other:?}"),
    }
}

/// Through b, for a session on a: a wait and a `send` held until the
/// session waits both outlive a kill -9 and restart of a, and last longer
/// than a forwarded request may (8 s): they wait on b.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_and_a_held_send_through_another_node_outlive_the_owner_s_restart() {
    let mut cluster = Cluster::start(&["a", "b"]);
    let script = "printf 'First? [y/n] '; read x; echo \"got $x\"; sleep 12; \
                  printf 'Second? [y/n] '; read y; echo \"then $y\"; exec sleep 1000";
    let id = super::common::cluster::create(&cluster, 1, "a", script).await;
    assert_eq!(
        wait_through(&cluster, 1, &id, &["waiting"]).await.0,
        "waiting"
    );
    let (seq, text) = read_through(&cluster, 1, &id, 0).await;
    assert_eq!(text, "First? [y/n]");
    ask(&cluster, 1, |rid| ClientMsg::Send {
        id: rid,
        session: id.clone(),
        text: "y".into(),
        submit: None,
        when: None,
    })
    .await
    .unwrap();
    assert_eq!(
        wait_through(&cluster, 1, &id, &["working"]).await.0,
        "working"
    );

    let waiter = {
        let (target, id) = (cluster.target(1), id.clone());
        tokio::spawn(async move {
            let mut c = Client::connect(&target).await.unwrap();
            c.request(|rid| ClientMsg::Wait {
                id: rid,
                session: id,
                until: vec!["waiting".into()],
                timeout_ms: Some(120_000),
            })
            .await
        })
    };
    let sender = {
        let (target, id) = (cluster.target(1), id.clone());
        tokio::spawn(async move {
            let mut c = Client::connect(&target).await.unwrap();
            c.request(|rid| ClientMsg::Send {
                id: rid,
                session: id,
                text: "n".into(),
                submit: None,
                when: Some(SendWhen::Waiting),
            })
            .await
        })
    };
    // Both are held on b (the bell counts them) before a goes.
    within(PATIENCE, "the wait and the send held on b", async {
        while cluster.metric(1, "termesh_waits_held") < 2.0 {
            poll_pause().await;
        }
    })
    .await;
    cluster.kill_node(0);
    cluster.start_node(0);

    let waited = within(PATIENCE, "the wait's answer", waiter).await.unwrap();
    assert!(
        matches!(&waited, Ok(ServerMsg::State { state, .. }) if state == "waiting"),
        "{waited:?}"
    );
    let sent = within(PATIENCE, "the held send", sender).await.unwrap();
    assert!(matches!(sent, Ok(ServerMsg::Ok { .. })), "{sent:?}");
    let text = within(PATIENCE, "the answer's echo", async {
        loop {
            let (_, text) = read_through(&cluster, 1, &id, seq).await;
            if text.contains("then n") {
                return text;
            }
            poll_pause().await;
        }
    })
    .await;
    assert!(
        text.starts_with("y\ngot y\n"),
        "exactly what came after {seq}: {text:?}"
    );
}
