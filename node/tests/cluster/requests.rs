//! Every request, from every node, for sessions on every node.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_works_from_any_node() {
    let mut cluster = Cluster::start(&["a", "b", "c"]);
    // From b: a session on c.
    let req = CreateRequest {
        command: Some(vec!["cat".into()]),
        node: Some("c".into()),
        ..Default::default()
    };
    let created = within(PATIENCE, "create on c from b", async {
        loop {
            if let Ok(ServerMsg::Created { session, .. }) =
                ask(&cluster, 1, |id| ClientMsg::Create {
                    id,
                    req: req.clone(),
                })
                .await
            {
                return session;
            }
            poll_pause().await;
        }
    })
    .await;
    assert_eq!(created.node, "c");
    let id = created.id.clone();

    // Input and resize from b, in order, then the screen and history.
    let mut b = Client::connect(&cluster.target(1)).await.unwrap();
    for word in ["one", "two", "three"] {
        b.send(&ClientMsg::Input {
            session: id.clone(),
            data: format!("forwarded-{word}\n").into_bytes(),
        })
        .await
        .unwrap();
    }
    b.send(&ClientMsg::Resize {
        session: id.clone(),
        cols: 100,
        rows: 40,
    })
    .await
    .unwrap();
    session_on(&cluster, 2, &id, |s| (s.cols, s.rows) == (100, 40)).await;
    // The last answer seen, said if the wait runs out.
    let mut last = String::new();
    let waited = tokio::time::timeout(PATIENCE, async {
        loop {
            match ask(&cluster, 1, |rid| ClientMsg::Screen {
                id: rid,
                session: id.clone(),
                scrollback: None,
            })
            .await
            {
                Ok(ServerMsg::Snapshot { data, cols, .. }) => {
                    let text = String::from_utf8_lossy(&data).into_owned();
                    if text.matches("forwarded-three").count() >= 2 {
                        assert_eq!(cols, 100);
                        return text;
                    }
                    last = text;
                }
                other => last = format!("{other:?}"),
            }
            poll_pause().await;
        }
    })
    .await;
    let screen = waited.unwrap_or_else(|_| {
        panic!("timed out after {PATIENCE:?} waiting for the input on the screen; last: {last:?}")
    });
    let (one, two, three) = (
        screen.find("forwarded-one").unwrap(),
        screen.find("forwarded-two").unwrap(),
        screen.find("forwarded-three").unwrap(),
    );
    assert!(one < two && two < three, "input kept its order: {screen}");
    let history = ask(&cluster, 1, |rid| ClientMsg::History {
        id: rid,
        session: id.clone(),
        limit: None,
        before_seq: None,
        rows: None,
    })
    .await
    .unwrap();
    let ServerMsg::History {
        lines: Some(lines), ..
    } = history
    else {
        panic!("{history:?}")
    };
    assert!(
        lines.iter().any(|l| l.contains("forwarded-two")),
        "{lines:?}"
    );
    let raw = ask(&cluster, 1, |rid| ClientMsg::History {
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
    } = raw
    else {
        panic!("{raw:?}")
    };
    assert!(String::from_utf8_lossy(&data).contains("forwarded-one"));
    // A page of the stored history, through b: rendered by the owner
    // from its output log.
    let page = ask(&cluster, 1, |rid| ClientMsg::History {
        id: rid,
        session: id.clone(),
        limit: None,
        before_seq: None,
        rows: Some(50),
    })
    .await
    .unwrap();
    let ServerMsg::History {
        lines: Some(lines),
        first_seq: Some(first),
        more: Some(_),
        seq,
        ..
    } = page
    else {
        panic!("{page:?}")
    };
    assert!(first >= 1 && first <= seq);
    assert!(
        lines.iter().any(|l| l.contains("forwarded-three")),
        "{lines:?}"
    );

    // Rename and tag from b show on c.
    ask(&cluster, 1, |rid| ClientMsg::Rename {
        id: rid,
        session: id.clone(),
        name: "renamed-from-b".into(),
    })
    .await
    .unwrap();
    ask(&cluster, 1, |rid| ClientMsg::Tag {
        id: rid,
        session: id.clone(),
        tags: vec!["x".into()],
    })
    .await
    .unwrap();
    session_on(&cluster, 2, &id, |s| {
        s.name.as_deref() == Some("renamed-from-b") && s.tags == ["x"]
    })
    .await;

    // Errors are the owner's, code for code.
    for i in [1, 2] {
        let err = ask(&cluster, i, |rid| ClientMsg::Rename {
            id: rid,
            session: id.clone(),
            name: "bad\u{7}".into(),
        })
        .await
        .unwrap_err();
        assert!(err.starts_with("bad_request"), "node {i}: {err}");
    }
    let err = ask(&cluster, 1, |rid| ClientMsg::Create {
        id: rid,
        req: CreateRequest {
            node: Some("zzz".into()),
            ..Default::default()
        },
    })
    .await
    .unwrap_err();
    assert!(err.starts_with("not_found") && err.contains("zzz"), "{err}");

    // Kill from b: the session ends; input to it then gets `exited`, from
    // b as from c.
    ask(&cluster, 1, |rid| ClientMsg::Kill {
        id: rid,
        session: id.clone(),
        signal: Some("KILL".into()),
    })
    .await
    .unwrap();
    wait_list(&cluster, 1, "the exit seen on b", |l| {
        l.iter()
            .any(|s| s.id == id && s.status == SessionStatus::Exited)
    })
    .await;
    for i in [1, 2] {
        let mut c = Client::connect(&cluster.target(i)).await.unwrap();
        c.send(&ClientMsg::Input {
            session: id.clone(),
            data: b"late\n".to_vec(),
        })
        .await
        .unwrap();
        let msg = within(PATIENCE, "the exited error", c.recv())
            .await
            .unwrap();
        assert!(
            matches!(&msg, ServerMsg::Error { code: termesh_transport::ErrorCode::Exited, session: Some(s), .. } if *s == id),
            "node {i}: {msg:?}"
        );
    }
    // The owner's store, read through b: events, stored output, the
    // export; then a revive from b runs it again on c.
    let mut on_b = Client::connect(&cluster.target(1)).await.unwrap();
    let events = events_of(&mut on_b, &id).await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    for kind in ["created", "resized", "renamed", "tagged", "exited"] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    let url = format!("{}/api/v1/sessions/{id}/export", cluster.target(1).url);
    let cast = http_get(&url, &cluster.token).await;
    assert!(
        cast.starts_with("{\"") && cast.contains("forwarded-three"),
        "{cast}"
    );
    // b's event stream of c's session (b polls c): the last stored event,
    // then the live `revived`.
    let last = events.last().unwrap()["id"].as_u64().unwrap();
    let stream = format!(
        "{}/api/v1/sessions/{id}/events/stream",
        cluster.target(1).url
    );
    let mut sse = common::sse::sse(stream, &cluster.token, Some(last - 1), usize::MAX);
    let first = common::sse::take(&mut sse, "the last stored event", |_| true).await;
    assert_eq!(first[0].0, last);
    ask(&cluster, 1, |rid| ClientMsg::Revive {
        id: rid,
        session: id.clone(),
    })
    .await
    .unwrap();
    let live = common::sse::take(&mut sse, "the live revived", |_| true).await;
    assert_eq!(
        (live[0].0, live[0].1["kind"].as_str()),
        (last + 1, Some("revived"))
    );
    wait_list(&cluster, 1, "the revived session running", |l| {
        l.iter()
            .any(|s| s.id == id && s.status == SessionStatus::Running)
    })
    .await;

    // Any tail of c's retained output, through b: bounded pages across
    // the mesh, given out oldest first, over REST and the CLI.
    let flood = ask(&cluster, 1, |rid| ClientMsg::Create {
        id: rid,
        req: CreateRequest {
            command: Some(vec!["sh".into(), "-c".into(), "seq 1 1500000".into()]),
            node: Some("c".into()),
            ..Default::default()
        },
    })
    .await
    .unwrap();
    let ServerMsg::Created { session: flood, .. } = flood else {
        panic!("{flood:?}")
    };
    session_on(&cluster, 1, &flood.id, |s| {
        s.status == SessionStatus::Exited
    })
    .await;
    let all: Vec<u8> = (1..=1_500_000)
        .flat_map(|i| format!("{i}\r\n").into_bytes())
        .collect();
    let url = format!(
        "{}/api/v1/sessions/{}/logs?tail=10000000",
        cluster.target(1).url,
        flood.id
    );
    let body = http_get(&url, &cluster.token).await;
    assert!(
        body.as_bytes() == &all[all.len() - 10_000_000..],
        "REST logs through b"
    );
    let out = cluster.termesh(&[
        "logs",
        &flood.id,
        "--tail",
        "9000000",
        "--url",
        &cluster.target(1).url,
        "--token",
        &cluster.token,
    ]);
    assert!(
        out.as_bytes() == &all[all.len() - 9_000_000..],
        "termesh logs through b"
    );

    // Remove from b: gone everywhere.
    ask(&cluster, 1, |rid| ClientMsg::Remove {
        id: rid,
        session: id.clone(),
        purge: None,
    })
    .await
    .unwrap();
    for i in 0..3 {
        wait_list(&cluster, i, "the removal", |l| l.iter().all(|s| s.id != id)).await;
    }

    // The owner down: requests for its sessions get `unavailable`.
    let other = create(&cluster, 2, "left-on-c").await;
    wait_list(&cluster, 1, "c's session on b", |l| {
        l.iter().any(|s| s.id == other.id)
    })
    .await;
    cluster.kill_node(2);
    wait_list(&cluster, 1, "c unreachable", |l| {
        l.iter()
            .any(|s| s.id == other.id && s.status == SessionStatus::Unreachable)
    })
    .await;
    let err = ask(&cluster, 1, |rid| ClientMsg::Kill {
        id: rid,
        session: other.id.clone(),
        signal: None,
    })
    .await
    .unwrap_err();
    assert!(err.starts_with("unavailable"), "{err}");
    let err = ask(&cluster, 1, |rid| ClientMsg::Create {
        id: rid,
        req: CreateRequest {
            node: Some("c".into()),
            ..Default::default()
        },
    })
    .await
    .unwrap_err();
    assert!(err.starts_with("unavailable"), "{err}");
}
