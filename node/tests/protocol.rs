//! The WebSocket contract: welcome, authentication and roles, error codes
//! for bad input, close codes, and that bad input hurts nobody else.

mod common;

use std::time::Duration;

use common::*;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, ErrorCode, ServerMsg};
use tokio_tungstenite::tungstenite::Message;

fn error_code(msg: &ServerMsg) -> Option<ErrorCode> {
    match msg {
        ServerMsg::Error { code, .. } => Some(*code),
        _ => None,
    }
}

async fn expect_error(c: &mut Client, code: ErrorCode) -> ServerMsg {
    let msg = next(c).await;
    assert_eq!(error_code(&msg), Some(code), "got {msg:?}");
    msg
}

fn encode(v: &rmpv::Value) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, v).unwrap();
    out
}

fn map(pairs: &[(&str, rmpv::Value)]) -> Vec<u8> {
    encode(&rmpv::Value::Map(
        pairs
            .iter()
            .map(|(k, v)| (rmpv::Value::from(*k), v.clone()))
            .collect(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn welcome_then_auth_by_message() {
    let node = TestNode::start();
    let mut c = Client::connect_raw(&node.target(None)).await.unwrap();
    match &c.welcome {
        ServerMsg::Welcome {
            proto,
            node: name,
            ping_interval_ms,
            auth_required,
            ..
        } => {
            assert_eq!(
                (*proto, name.as_str(), *ping_interval_ms, *auth_required),
                (1, "t1", 15_000, true)
            );
        }
        other => panic!("{other:?}"),
    }
    c.send(&ClientMsg::list(1)).await.unwrap();
    let msg = expect_error(&mut c, ErrorCode::Unauthorized).await;
    assert!(matches!(msg, ServerMsg::Error { id: Some(1), .. }));
    c.send(&ClientMsg::Auth {
        id: 2,
        token: "wrong".into(),
    })
    .await
    .unwrap();
    expect_error(&mut c, ErrorCode::Unauthorized).await;
    c.send(&ClientMsg::Ping { nonce: None }).await.unwrap();
    expect_error(&mut c, ErrorCode::Unauthorized).await;
    c.send(&ClientMsg::Auth {
        id: 3,
        token: VIEWER.into(),
    })
    .await
    .unwrap();
    assert_eq!(next(&mut c).await, ServerMsg::Ok { id: 3 });
    assert!(matches!(
        c.request(ClientMsg::list).await.unwrap(),
        ServerMsg::Sessions { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_token_on_upgrade_is_401_and_url_token_works() {
    let node = TestNode::start();
    let err = Client::connect(&node.target(Some("nope")))
        .await
        .err()
        .expect("refused");
    assert!(format!("{err:#}").contains("refused the token"), "{err:#}");
    let ws_url = format!("ws://{}/ws?token={VIEWER}", node.node.addr());
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url)
        .await
        .expect("token in the URL");
    use futures_util::{SinkExt, StreamExt};
    let _welcome = ws.next().await.unwrap().unwrap();
    ws.send(Message::Binary(
        rmp_serde::to_vec_named(&ClientMsg::list(1)).unwrap(),
    ))
    .await
    .unwrap();
    let reply = ws.next().await.unwrap().unwrap().into_data();
    let reply: ServerMsg = rmp_serde::from_slice(&reply).unwrap();
    assert!(
        matches!(reply, ServerMsg::Sessions { id: 1, .. }),
        "{reply:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_are_enforced() {
    let node = TestNode::start();
    let mut viewer = node.client(VIEWER).await;
    let err = viewer
        .request(|id| ClientMsg::Create {
            id,
            req: Default::default(),
        })
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("forbidden"), "{err}");
    let session = node.create(&["sleep", "1000"]).await.id;
    viewer
        .send(&ClientMsg::Input {
            session: session.clone(),
            data: b"x".to_vec(),
        })
        .await
        .unwrap();
    let msg = expect_error(&mut viewer, ErrorCode::Forbidden).await;
    assert!(matches!(msg, ServerMsg::Error { session: Some(s), .. } if s == session));
    // A viewer may watch.
    subscribe(&mut viewer, &session, None, 1 << 20)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_documented_errors_and_hurts_nobody() {
    let node = TestNode::start();
    let session = node
        .create(&["sh", "-c", "while true; do echo alive; sleep 0.05; done"])
        .await
        .id;
    // A bystander watching the session throughout.
    let mut bystander = node.client(VIEWER).await;
    subscribe(&mut bystander, &session, None, 1 << 20)
        .await
        .unwrap();

    let mut c = node.client(OPERATOR).await;
    c.send_raw(Message::Binary(vec![0xc1, 0x00, 0xff]))
        .await
        .unwrap();
    expect_error(&mut c, ErrorCode::BadFrame).await;
    c.send_raw(Message::Text("{\"t\":\"list\"}".into()))
        .await
        .unwrap();
    expect_error(&mut c, ErrorCode::BadFrame).await;
    c.send_raw(Message::Binary(encode(&rmpv::Value::from(vec![
        rmpv::Value::from(1),
    ]))))
    .await
    .unwrap();
    expect_error(&mut c, ErrorCode::BadFrame).await;
    c.send_raw(Message::Binary(map(&[("id", 1.into())])))
        .await
        .unwrap();
    expect_error(&mut c, ErrorCode::BadFrame).await;
    c.send_raw(Message::Binary(map(&[
        ("t", "teleport".into()),
        ("id", 5.into()),
    ])))
    .await
    .unwrap();
    let msg = expect_error(&mut c, ErrorCode::UnknownType).await;
    assert!(matches!(msg, ServerMsg::Error { id: Some(5), .. }));
    c.send_raw(Message::Binary(map(&[
        ("t", "subscribe".into()),
        ("id", 6.into()),
    ])))
    .await
    .unwrap();
    let msg = expect_error(&mut c, ErrorCode::BadRequest).await;
    assert!(matches!(msg, ServerMsg::Error { id: Some(6), .. }));
    c.send_raw(Message::Binary(map(&[
        ("t", "resize".into()),
        ("session", session.as_str().into()),
        ("cols", "wide".into()),
        ("rows", 5.into()),
    ])))
    .await
    .unwrap();
    expect_error(&mut c, ErrorCode::BadRequest).await;
    c.send(&ClientMsg::Resize {
        session: session.clone(),
        cols: 0,
        rows: 10,
    })
    .await
    .unwrap();
    expect_error(&mut c, ErrorCode::BadRequest).await;
    c.send(&ClientMsg::Resize {
        session: session.clone(),
        cols: 80,
        rows: 501,
    })
    .await
    .unwrap();
    expect_error(&mut c, ErrorCode::BadRequest).await;
    c.send(&ClientMsg::Subscribe {
        id: 7,
        session: "no-such-session".into(),
        from_seq: None,
        window: None,
        scrollback: None,
    })
    .await
    .unwrap();
    let msg = expect_error(&mut c, ErrorCode::NotFound).await;
    assert!(matches!(msg, ServerMsg::Error { id: Some(7), .. }));
    c.send(&ClientMsg::Input {
        session: session.clone(),
        data: vec![b'x'; 64 * 1024 + 1],
    })
    .await
    .unwrap();
    expect_error(&mut c, ErrorCode::TooLarge).await;
    c.send(&ClientMsg::Kill {
        id: 8,
        session: session.clone(),
        signal: Some("STOP".into()),
    })
    .await
    .unwrap();
    expect_error(&mut c, ErrorCode::BadRequest).await;
    let err = c
        .request(|id| ClientMsg::Create {
            id,
            req: termesh_transport::CreateRequest {
                cwd: Some("/no/such/dir".into()),
                ..Default::default()
            },
        })
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with("bad_request") && err.to_string().contains("/no/such/dir"),
        "{err}"
    );
    let err = c
        .request(|id| ClientMsg::Create {
            id,
            req: termesh_transport::CreateRequest {
                node: Some("elsewhere".into()),
                ..Default::default()
            },
        })
        .await
        .unwrap_err();
    // A node not in the cluster (section 13).
    assert!(err.to_string().starts_with("not_found"), "{err}");
    c.send(&ClientMsg::Ping {
        nonce: Some(rmpv::Value::from("n-1")),
    })
    .await
    .unwrap();
    assert_eq!(
        next(&mut c).await,
        ServerMsg::Pong {
            nonce: Some(rmpv::Value::from("n-1"))
        }
    );

    // Over 1 MiB closes this connection with 1009, and only this one.
    c.send_raw(Message::Binary(vec![0x90; (1 << 20) + 1]))
        .await
        .unwrap();
    let err = within(PATIENCE, "the 1009 close", c.recv())
        .await
        .unwrap_err();
    assert!(format!("{err:#}").contains("Size"), "{err:#}");

    let mut s = Stream::new(1 << 20);
    let before = bystander_lines(&mut bystander, &session, &mut s, 0).await;
    bystander_lines(&mut bystander, &session, &mut s, before + 3).await;
    let mut fresh = node.client(VIEWER).await;
    assert!(matches!(
        fresh.request(ClientMsg::list).await.unwrap(),
        ServerMsg::Sessions { .. }
    ));
}

async fn bystander_lines(c: &mut Client, session: &str, s: &mut Stream, at_least: usize) -> usize {
    within(
        PATIENCE,
        "the bystander's output",
        pump_until(c, session, s, true, |s| {
            s.data.windows(5).filter(|w| w == b"alive").count() >= at_least.max(1)
        }),
    )
    .await
    .unwrap();
    s.data.windows(5).filter(|w| w == b"alive").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_connection_is_closed_with_4401() {
    let node = TestNode::start_with(|c| c.ws.auth_timeout = Duration::from_millis(300));
    let mut c = Client::connect_raw(&node.target(None)).await.unwrap();
    let err = within(PATIENCE, "the 4401 close", c.recv())
        .await
        .unwrap_err();
    assert!(format!("{err:#}").contains("4401"), "{err:#}");
    // An authenticated one stays.
    let mut ok = node.client(VIEWER).await;
    assert!(matches!(
        ok.request(ClientMsg::list).await.unwrap(),
        ServerMsg::Sessions { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_and_resize_to_an_exited_session_get_exited() {
    let node = TestNode::start();
    let session = node.create(&["sh", "-c", "exit 0"]).await.id;
    node.wait_info(&session, "exit", |i| i.exit_code.is_some())
        .await;
    let mut c = node.client(OPERATOR).await;
    c.send(&ClientMsg::Input {
        session: session.clone(),
        data: b"x".to_vec(),
    })
    .await
    .unwrap();
    expect_error(&mut c, ErrorCode::Exited).await;
    c.send(&ClientMsg::Resize {
        session: session.clone(),
        cols: 80,
        rows: 24,
    })
    .await
    .unwrap();
    expect_error(&mut c, ErrorCode::Exited).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_shutdown_closes_connections_with_1001_and_stops_sessions() {
    let node = TestNode::start();
    let session = node.create(&["sleep", "1000"]).await.id;
    node.wait_info(&session, "the session running", |_| {
        !session_pids(&session).is_empty()
    })
    .await;
    let mut c = node.client(VIEWER).await;
    let TestNode {
        node: running,
        data_dir,
    } = node;
    let stopper = std::thread::spawn(move || running.stop());
    let err = within(PATIENCE, "the 1001 close", c.recv())
        .await
        .unwrap_err();
    // Close code 1001 with the node's reason: a node stopped, not a
    // broken link.
    assert!(termesh_node::client::NodeStopped::is(&err), "{err:#}");
    assert!(format!("{err:#}").contains("node shutting down"), "{err:#}");
    stopper.join().unwrap().unwrap();
    within(PATIENCE, "the session's processes to end", async {
        while !session_pids(&session).is_empty() {
            poll_pause().await;
        }
    })
    .await;
    drop(data_dir);
}

/// `list` with `limit` pages the directory by id: every session once, in
/// order, `next` on every page but the last; `GET /sessions?limit=` the
/// same with `X-Termesh-Next`; bad bounds are `bad_request`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_cover_every_session_once() {
    let node = TestNode::start();
    let mut made = Vec::new();
    for _ in 0..5 {
        made.push(node.create(&["sleep", "1000"]).await.id);
    }
    made.sort();
    let mut c = node.client(VIEWER).await;
    let (mut seen, mut after, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let reply = c
            .request(|id| ClientMsg::List {
                id,
                after: after.clone(),
                limit: Some(2),
            })
            .await
            .unwrap();
        let ServerMsg::Sessions { sessions, next, .. } = reply else {
            panic!("{reply:?}")
        };
        assert!(sessions.len() <= 2);
        seen.extend(sessions.into_iter().map(|s| s.id));
        pages += 1;
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
        assert!(pages < 10, "pages do not end");
    }
    assert_eq!((seen, pages), (made.clone(), 3));

    let (url, auth) = (
        format!("{}/api/v1/sessions?limit=3", node.url()),
        format!("Bearer {VIEWER}"),
    );
    let (first, next) = tokio::task::spawn_blocking(move || {
        let resp = ureq::get(&url).set("authorization", &auth).call().unwrap();
        let next = resp.header("X-Termesh-Next").map(str::to_string);
        let body: Vec<termesh_transport::SessionInfo> = resp.into_json().unwrap();
        (body, next)
    })
    .await
    .unwrap();
    let ids: Vec<String> = first.into_iter().map(|s| s.id).collect();
    assert_eq!(ids, made[..3]);
    assert_eq!(next.as_deref(), Some(made[2].as_str()));

    for (after, limit) in [
        (None, Some(0)),
        (None, Some(10_001)),
        (Some("x".to_string()), None),
    ] {
        let err = c
            .request(|id| ClientMsg::List { id, after, limit })
            .await
            .unwrap_err();
        assert!(err.to_string().starts_with("bad_request"), "{err}");
    }
}
