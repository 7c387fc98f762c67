//! Edge paths found in review, each against a real node: stale acks,
//! busy sessions, frozen watchers, looping screen requests, the hook
//! endpoint's authorization order, and fragmented raw input.

mod common;

use common::wire::{self, Got};
use common::*;
use futures_util::{SinkExt, StreamExt};
use termesh_transport::{ClientMsg, ErrorCode, ServerMsg};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::Message;

/// An ack that raced an unsubscribe is ignored: no error (section 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_after_unsubscribe_is_ignored() {
    let node = TestNode::start();
    let session = node.create(&["sleep", "1000"]).await.id;
    let mut c = node.client(VIEWER).await;
    subscribe(&mut c, &session, None, 1 << 20).await.unwrap();
    c.send(&ClientMsg::Unsubscribe {
        session: session.clone(),
    })
    .await
    .unwrap();
    c.send(&ClientMsg::Ack {
        session: session.clone(),
        seq: 1,
    })
    .await
    .unwrap();
    c.send(&ClientMsg::Ping { nonce: None }).await.unwrap();
    loop {
        match next(&mut c).await {
            ServerMsg::Pong { .. } => break,
            ServerMsg::Error { .. } => panic!("a stale ack got an error"),
            _ => {}
        }
    }
}

/// A session with many messages queued (acks from raw clients, who ack
/// every frame, and from a client acking in bursts) is served, not
/// reported gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_session_answers_screen_requests() {
    let node = TestNode::start();
    let session = node.create(&["yes", "busy busy busy"]).await.id;
    let url = format!(
        "ws://{}/sessions/{session}/raw?token={VIEWER}",
        node.node.addr()
    );
    let mut raws = Vec::new();
    for _ in 0..3 {
        let (mut raw, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
        raws.push(tokio::spawn(async move {
            while let Some(Ok(_)) = raw.next().await {}
        }));
    }
    let mut ws = wire::connect(node.node.addr(), VIEWER, None).await;
    let _welcome = wire::read_msg(&mut ws).await;
    wire::send(
        &mut ws,
        &ClientMsg::Subscribe {
            id: 1,
            session: session.clone(),
            from_seq: None,
            window: Some(16 << 10),
            scrollback: None,
        },
    )
    .await;
    for round in 0..20u64 {
        // Hundreds of acks and a screen request in one write: the acks
        // queue in the session's mailbox ahead of the request.
        for _ in 0..300 {
            let ack = ClientMsg::Ack {
                session: session.clone(),
                seq: 1,
            };
            ws.feed(Message::Binary(rmp_serde::to_vec_named(&ack).unwrap()))
                .await
                .unwrap();
        }
        let screen = ClientMsg::Screen {
            id: 100 + round,
            session: session.clone(),
            scrollback: None,
        };
        ws.feed(Message::Binary(rmp_serde::to_vec_named(&screen).unwrap()))
            .await
            .unwrap();
        ws.flush().await.unwrap();
        loop {
            match wire::read_msg(&mut ws).await {
                ServerMsg::Snapshot { id: Some(id), .. } if id == 100 + round => break,
                ServerMsg::Error { message, .. } => panic!("round {round}: {message}"),
                _ => {}
            }
        }
    }
    for raw in raws {
        raw.abort();
    }
}

/// A watcher whose socket is full gets the latest state of each session
/// when it reads again, not every change queued in the node's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_watcher_gets_coalesced_news() {
    let node = TestNode::start();
    let flood = node.create(&["yes", "flood"]).await.id;
    let target = node.create(&["sleep", "1000"]).await.id;
    let mut watcher = wire::connect(node.node.addr(), VIEWER, Some(4096)).await;
    let _welcome = wire::read_msg(&mut watcher).await;
    wire::send(&mut watcher, &ClientMsg::Watch { id: 1 }).await;
    // A flood with the largest window fills the watcher's socket, and the
    // watcher stops reading: its connection actor is frozen.
    wire::send(
        &mut watcher,
        &ClientMsg::Subscribe {
            id: 2,
            session: flood.clone(),
            from_seq: None,
            window: Some(16 << 20),
            scrollback: None,
        },
    )
    .await;
    let mut ops = node.client(OPERATOR).await;
    // Output reaches the watcher only through its frozen socket, so the
    // flood stalls at its window: wait for that.
    within(PATIENCE, "the watcher's window to fill", async {
        loop {
            let m = wire::metrics(&node.url()).await;
            if m["termesh_bytes_out_total"] >= (15 << 20) as f64 {
                break;
            }
            poll_pause().await;
        }
    })
    .await;
    const RENAMES: usize = 500;
    for i in 0..RENAMES {
        ops.request(|id| ClientMsg::Rename {
            id,
            session: target.clone(),
            name: format!("name-{i}"),
        })
        .await
        .unwrap();
    }
    // The last rename is applied before the watcher reads again.
    node.wait_info(&target, "the last rename", |s| {
        s.name.as_deref() == Some(&*format!("name-{}", RENAMES - 1))
    })
    .await;
    ops.close().await;
    let mut changes = 0;
    let mut last_name = None;
    within(PATIENCE, "the last name to reach the watcher", async {
        while last_name.as_deref() != Some(&*format!("name-{}", RENAMES - 1)) {
            match wire::read(&mut watcher).await {
                Got::Msg(ServerMsg::SessionChanged { session }) if session.id == target => {
                    changes += 1;
                    last_name = session.name;
                }
                Got::Closed(why) => panic!("watcher closed: {why}"),
                _ => {}
            }
        }
    })
    .await;
    assert!(
        changes < RENAMES / 4,
        "{changes} notifications for {RENAMES} renames: not coalesced"
    );
}

/// A connection looping screen requests is bounded; identical requests
/// share one computation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screen_requests_are_bounded_and_shared() {
    let node = TestNode::start();
    let session = node
        .create(&[
            "sh",
            "-c",
            "i=0; while [ $i -lt 12000 ]; do i=$((i+1)); printf '\\033[3%dmline %d\\033[0m\\n' $((i%7)) $i; done; exec sleep 1000",
        ])
        .await
        .id;
    wait_output(&node, &session, "line 12000").await;
    let before = wire::metric(&node.url(), "termesh_snapshots_total").await;
    let mut ws = wire::connect(node.node.addr(), VIEWER, None).await;
    let _welcome = wire::read_msg(&mut ws).await;
    const SENT: u64 = 40;
    for id in 1..=SENT {
        let msg = ClientMsg::Screen {
            id,
            session: session.clone(),
            scrollback: Some(10_000),
        };
        ws.feed(Message::Binary(rmp_serde::to_vec_named(&msg).unwrap()))
            .await
            .unwrap();
    }
    ws.flush().await.unwrap();
    let (mut served, mut refused) = (0, 0);
    while served + refused < SENT {
        match wire::read_msg(&mut ws).await {
            ServerMsg::Snapshot { id: Some(_), .. } => served += 1,
            ServerMsg::Error {
                code: ErrorCode::Unavailable,
                message,
                ..
            } if message.contains("in flight") => refused += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(refused > 0, "all {SENT} looping requests were accepted");
    assert!(served >= 4, "at least the first four are served");
    // Identical requests from many connections at once share passes.
    let mut conns = Vec::new();
    for _ in 0..8 {
        let mut c = wire::connect(node.node.addr(), VIEWER, None).await;
        let _welcome = wire::read_msg(&mut c).await;
        conns.push(c);
    }
    let mid = wire::metric(&node.url(), "termesh_snapshots_total").await;
    for c in &mut conns {
        for id in 1..=4 {
            let msg = ClientMsg::Screen {
                id,
                session: session.clone(),
                scrollback: Some(10_000),
            };
            c.feed(Message::Binary(rmp_serde::to_vec_named(&msg).unwrap()))
                .await
                .unwrap();
        }
    }
    for c in &mut conns {
        c.flush().await.unwrap();
    }
    for c in &mut conns {
        for _ in 0..4 {
            assert!(matches!(
                wire::read_msg(c).await,
                ServerMsg::Snapshot { id: Some(_), .. }
            ));
        }
    }
    let after = wire::metric(&node.url(), "termesh_snapshots_total").await;
    assert!(
        after - mid < 32.0,
        "32 identical requests took {} passes",
        after - mid
    );
    assert!(mid - before <= served as f64);
}

/// The hook endpoint authorizes before it looks anything up, so an
/// unauthorized caller cannot tell which sessions exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_endpoint_is_no_existence_oracle() {
    let node = TestNode::start();
    let session = node
        .create(&[
            "sh",
            "-c",
            "echo \"url=$TERMESH_HOOK_URL\"; exec sleep 1000",
        ])
        .await
        .id;
    let out = wait_output(&node, &session, "key=").await;
    let hook_url = out
        .split("url=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let base = node.url();
    let status = move |url: String, token: Option<&'static str>| {
        let mut req = ureq::post(&url).set("content-type", "application/json");
        if let Some(t) = token {
            req = req.set("authorization", &format!("Bearer {t}"));
        }
        match req.send_string(r#"{"hook_event_name":"Stop"}"#) {
            Ok(r) => r.status(),
            Err(ureq::Error::Status(code, _)) => code,
            Err(e) => panic!("{e}"),
        }
    };
    let results = tokio::task::spawn_blocking(move || {
        let missing = format!("{base}/api/v1/sessions/000000000000/hook");
        let real = format!("{base}/api/v1/sessions/{session}/hook");
        [
            status(missing.clone(), None),
            status(format!("{missing}?key=00"), None),
            status(real.clone(), None),
            status(format!("{real}?key=00"), None),
            status(missing, Some(OPERATOR)),
            status(hook_url, None),
        ]
    })
    .await
    .unwrap();
    assert_eq!(results, [401, 401, 401, 401, 404, 204]);
}

/// The raw endpoint reassembles fragmented messages (within 1 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_input_may_come_in_fragments() {
    let node = TestNode::start();
    let session = node
        .create(&[
            "sh",
            "-c",
            "stty -echo; echo ready; while read l; do echo \"got $l\"; done",
        ])
        .await
        .id;
    let url = format!(
        "ws://{}/sessions/{session}/raw?token={OPERATOR}",
        node.node.addr()
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let mut seen = Vec::new();
    let read_until = wire::raw_read_until;
    read_until(&mut ws, "ready", &mut seen).await;
    // One message as fragments: the first frame of `kind`, continuations.
    async fn send_fragments(ws: &mut wire::RawWs, kind: Data, parts: &[&[u8]]) {
        for (i, part) in parts.iter().enumerate() {
            let op = OpCode::Data(if i == 0 { kind } else { Data::Continue });
            let fin = i + 1 == parts.len();
            ws.send(Message::Frame(Frame::message(part.to_vec(), op, fin)))
                .await
                .unwrap();
        }
    }
    send_fragments(&mut ws, Data::Binary, &[b"frag", b"men", b"ted\n"]).await;
    read_until(&mut ws, "got fragmented", &mut seen).await;
    // Text fragments too.
    send_fragments(&mut ws, Data::Text, &[b"te", b"xt\n"]).await;
    read_until(&mut ws, "got text", &mut seen).await;
    // Fragments past the bound close with 1009.
    let chunk = vec![b'x'; 600 << 10];
    ws.send(Message::Frame(Frame::message(
        chunk.clone(),
        OpCode::Data(Data::Binary),
        false,
    )))
    .await
    .unwrap();
    let _ = ws
        .send(Message::Frame(Frame::message(
            chunk,
            OpCode::Data(Data::Continue),
            true,
        )))
        .await;
    let code = within(PATIENCE, "the 1009 close", async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(Some(frame)))) => return u16::from(frame.code),
                Some(Ok(_)) => {}
                other => panic!("no close frame: {other:?}"),
            }
        }
    })
    .await;
    assert_eq!(code, 1009);
}
