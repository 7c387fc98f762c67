//! Snapshot fidelity (a program drawing with cursor moves and the alternate
//! screen: the snapshot in a fresh emulator shows what the live stream
//! does), scrollback on attach, history, REST and the raw endpoint.

mod common;

use avt::Terminal;
use common::*;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, ServerMsg};

const DRAW: &str = r#"printf 'primary one\r\nprimary two\r\n'
printf '\033[?1049h\033[2J\033[H+------+\033[2;1H| box  |\033[3;1H+------+'
printf '\033[5;10H\033[1;32mGREEN\033[0m \033[7mINVERSE\033[0m'
printf '\033[10;20Hat 10,20'
printf '\033[?2004h\033]2;the title\007'
printf '\033[7;7H'
echo
printf '\033[8;3Hdone-drawing'
exec sleep 1000"#;

fn visible(t: &Terminal) -> Vec<Vec<(char, avt::Pen)>> {
    t.screen()
        .visible_lines()
        .map(|l| l.cells().iter().map(|c| (c.char(), *c.pen())).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_reproduces_the_live_screen() {
    let node = TestNode::start();
    let session = node.create(&["sh", "-c", DRAW]).await.id;

    // The live view: every byte from the start, through an emulator.
    let mut live_client = node.client(VIEWER).await;
    subscribe(&mut live_client, &session, Some(0), 1 << 20)
        .await
        .unwrap();
    let mut s = Stream::new(1 << 20);
    within(
        PATIENCE,
        "the drawing",
        pump_until(&mut live_client, &session, &mut s, true, |s| {
            String::from_utf8_lossy(&s.data).contains("done-drawing")
        }),
    )
    .await
    .unwrap();
    let mut live = Terminal::new(120, 30).unwrap();
    live.feed(String::from_utf8_lossy(&s.data).as_ref());

    // The snapshot, as a `screen` reply and as a fresh attach.
    let mut c = node.client(VIEWER).await;
    let reply = screen(&mut c, &session).await;
    let ServerMsg::Snapshot {
        seq,
        cols,
        rows,
        data,
        ..
    } = reply
    else {
        panic!("{reply:?}")
    };
    assert_eq!((cols, rows), (120, 30));
    assert_eq!(seq, s.last_seq);
    let mut fresh = Terminal::new(cols.into(), rows.into()).unwrap();
    fresh.feed(String::from_utf8_lossy(&data).as_ref());
    assert_eq!(
        visible(&fresh),
        visible(&live),
        "same characters and attributes"
    );
    assert_eq!(
        fresh.cursor(),
        live.cursor(),
        "same cursor position and visibility"
    );
    assert_eq!(fresh.active_screen_kind(), avt::ScreenKind::Alternate);
    let primary = |t: &Terminal| {
        t.primary_screen()
            .visible_lines()
            .map(|l| l.text())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        primary(&fresh),
        primary(&live),
        "the normal buffer beneath the alternate one"
    );
    let text = String::from_utf8_lossy(&data);
    assert!(
        text.contains("\x1b[?2004h") && text.contains("\x1b]2;the title\x07"),
        "modes avt omits are appended"
    );

    let mut attach = node.client(VIEWER).await;
    subscribe(&mut attach, &session, None, 1 << 20)
        .await
        .unwrap();
    let ServerMsg::Snapshot {
        data: attach_data,
        seq: attach_seq,
        ..
    } = next(&mut attach).await
    else {
        panic!()
    };
    assert_eq!((attach_seq, &attach_data), (seq, &data));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_attach_brings_requested_scrollback_and_history_renders_lines() {
    let node = TestNode::start();
    let session = node
        .create(&["sh", "-c", "for i in $(seq 1 100); do echo \"line $i\"; done; printf '50%%\\r100%%\\n'; echo end; exec sleep 1000"])
        .await
        .id;
    let mut c = node.client(VIEWER).await;
    wait_output(&node, &session, "end\r\n").await;
    let reply = c
        .request(|id| ClientMsg::Subscribe {
            id,
            session: session.clone(),
            from_seq: None,
            window: None,
            scrollback: Some(10),
        })
        .await
        .unwrap();
    assert!(matches!(reply, ServerMsg::Subscribed { .. }));
    let ServerMsg::Snapshot { data, .. } = next(&mut c).await else {
        panic!()
    };
    let mut t = Terminal::with_scrollback(120, 30, None).unwrap();
    t.feed(String::from_utf8_lossy(&data).as_ref());
    let all: Vec<String> = t
        .screen()
        .all_lines()
        .map(|l| l.text().trim_end().to_string())
        .collect();
    assert_eq!(all.len(), 40, "10 history lines above a 30-row screen");
    assert_eq!(all[0], "line 64");

    let ServerMsg::History {
        lines: Some(lines), ..
    } = c
        .request(|id| ClientMsg::History {
            id,
            session: session.clone(),
            limit: None,
            before_seq: None,
            rows: None,
        })
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(lines.first().map(String::as_str), Some("line 1"));
    assert!(
        lines.iter().any(|l| l == "100%"),
        "redraws collapse to what the screen showed"
    );
    assert!(!lines.iter().any(|l| l.contains("50%")));
    assert_eq!(lines.last().map(String::as_str), Some("end"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_api() {
    let node = TestNode::start();
    let base = format!("{}/api/v1", node.url());
    let root = node.url();
    tokio::task::spawn_blocking(move || {
        let auth = |r: ureq::Request, t: &str| r.set("Authorization", &format!("Bearer {t}"));
        let status = |r: Result<ureq::Response, ureq::Error>| match r {
            Ok(r) => r.status(),
            Err(ureq::Error::Status(s, _)) => s,
            Err(e) => panic!("{e}"),
        };
        let body = |r: Result<ureq::Response, ureq::Error>| match r {
            Ok(r) => r.into_string().unwrap(),
            Err(ureq::Error::Status(_, r)) => r.into_string().unwrap(),
            Err(e) => panic!("{e}"),
        };
        assert_eq!(status(ureq::get(&format!("{root}/healthz")).call()), 200);
        assert_eq!(status(ureq::get(&format!("{base}/sessions")).call()), 401);
        let e = body(ureq::get(&format!("{base}/sessions")).call());
        assert!(e.contains("\"code\":\"unauthorized\""), "{e}");
        assert_eq!(status(auth(ureq::post(&format!("{base}/sessions")), VIEWER).send_string("{}")), 403);
        assert_eq!(status(auth(ureq::post(&format!("{base}/sessions")), OPERATOR).send_string("{not json")), 400);
        let e = body(auth(ureq::post(&format!("{base}/sessions")), OPERATOR).send_string(r#"{"cwd":"/nope"}"#));
        assert!(e.contains("bad_request"), "{e}");

        let created = auth(ureq::post(&format!("{base}/sessions")), OPERATOR)
            .send_string(r#"{"command":["sh","-c","stty -echo; echo ready; read l; echo \"got $l\"; read x; exec sleep 1000"],"name":"rest"}"#)
            .unwrap();
        assert_eq!(created.status(), 201);
        let info: serde_json::Value = created.into_json().unwrap();
        let id = info["id"].as_str().unwrap().to_string();
        assert_eq!(info["name"], "rest");
        let one: serde_json::Value = auth(ureq::get(&format!("{base}/sessions/{id}")), VIEWER).call().unwrap().into_json().unwrap();
        assert_eq!(one["id"], id.as_str());
        assert_eq!(status(auth(ureq::get(&format!("{base}/sessions/nope")), VIEWER).call()), 404);
        // A path may name a session by its exact name (names are unique).
        let by_name: serde_json::Value = auth(ureq::get(&format!("{base}/sessions/rest")), VIEWER).call().unwrap().into_json().unwrap();
        assert_eq!(by_name["id"], id.as_str());
        let events: serde_json::Value = auth(ureq::get(&format!("{base}/sessions/rest/events")), VIEWER).call().unwrap().into_json().unwrap();
        assert!(events.as_array().is_some_and(|e| !e.is_empty()), "{events}");
        let read: serde_json::Value = auth(ureq::get(&format!("{base}/sessions/rest/read")), VIEWER).call().unwrap().into_json().unwrap();
        assert!(read["seq"].is_u64(), "{read}");

        let deadline = std::time::Instant::now() + PATIENCE;
        // Input only once the program has turned echo off.
        while !body(auth(ureq::get(&format!("{base}/sessions/{id}/logs")), VIEWER).call()).contains("ready") {
            assert!(std::time::Instant::now() < deadline, "the program never got ready");
            poll_pause_blocking();
        }
        assert_eq!(status(auth(ureq::post(&format!("{base}/sessions/{id}/input")), OPERATOR).send_bytes(b"hello\n")), 204);
        assert_eq!(status(auth(ureq::post(&format!("{base}/sessions/{id}/input")), OPERATOR).send_bytes(&vec![b'x'; 65537])), 413);
        loop {
            let logs = body(auth(ureq::get(&format!("{base}/sessions/{id}/logs?tail=100")), VIEWER).call());
            if logs.contains("got hello") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no echo in logs: {logs:?}");
            poll_pause_blocking();
        }
        let text = body(auth(ureq::get(&format!("{base}/sessions/{id}/screen?format=text")), VIEWER).call());
        assert!(text.starts_with("ready\ngot hello\n"), "{text:?}");
        let json: serde_json::Value = auth(ureq::get(&format!("{base}/sessions/{id}/screen")), VIEWER).call().unwrap().into_json().unwrap();
        assert!(json["data"].as_str().unwrap().contains("got hello") && json["cols"] == 120);
        let hist: serde_json::Value = auth(ureq::get(&format!("{base}/sessions/{id}/history")), VIEWER).call().unwrap().into_json().unwrap();
        assert_eq!(hist["lines"][1], "got hello");
        assert_eq!(status(auth(ureq::post(&format!("{base}/sessions/{id}/resize")), OPERATOR).send_string(r#"{"cols":0,"rows":5}"#)), 400);
        assert_eq!(status(auth(ureq::post(&format!("{base}/sessions/rest/resize")), OPERATOR).send_string(r#"{"cols":90,"rows":20}"#)), 204);
        assert_eq!(status(auth(ureq::post(&format!("{base}/sessions/{id}/kill")), OPERATOR).send_string(r#"{"signal":"KILL"}"#)), 204);
        loop {
            let one: serde_json::Value = auth(ureq::get(&format!("{base}/sessions/{id}")), VIEWER).call().unwrap().into_json().unwrap();
            if one["status"] == "exited" {
                assert_eq!(one["exit_code"], 137);
                assert_eq!((one["cols"].as_u64(), one["rows"].as_u64()), (Some(90), Some(20)));
                break;
            }
            assert!(std::time::Instant::now() < deadline);
            poll_pause_blocking();
        }
        assert_eq!(status(auth(ureq::post(&format!("{base}/sessions/{id}/input")), OPERATOR).send_bytes(b"x")), 409);
        assert_eq!(status(auth(ureq::delete(&format!("{base}/sessions/{id}?purge=true")), OPERATOR).call()), 204);
        assert_eq!(status(auth(ureq::get(&format!("{base}/sessions/{id}")), VIEWER).call()), 404);
        let metrics = body(ureq::get(&format!("{root}/metrics")).call());
        for name in ["termesh_sessions", "termesh_connections", "termesh_subscribers", "termesh_bytes_out_total", "termesh_resyncs_total"] {
            assert!(metrics.contains(name), "{name} missing from /metrics");
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_endpoint_streams_bytes_and_takes_input_and_resize() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let node = TestNode::start();
    let session = node
        .create(&[
            "sh",
            "-c",
            "stty -echo; echo ready; while read l; do echo \"got $l\"; stty size; done",
        ])
        .await
        .id;
    let url = |t: &str| format!("ws://{}/sessions/{session}/raw?token={t}", node.node.addr());
    assert!(
        tokio_tungstenite::connect_async(url("wrong"))
            .await
            .is_err(),
        "wrong token refused"
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(url(OPERATOR))
        .await
        .unwrap();
    let mut seen = Vec::new();
    let read_until = common::wire::raw_read_until;
    read_until(&mut ws, "ready", &mut seen).await;
    ws.send(Message::Text(
        r#"{"type":"resize","cols":77,"rows":22}"#.into(),
    ))
    .await
    .unwrap();
    ws.send(Message::Binary(b"one\n".to_vec())).await.unwrap();
    read_until(&mut ws, "got one\r\n22 77", &mut seen).await;
    ws.send(Message::Text("two\n".into())).await.unwrap();
    read_until(&mut ws, "got two", &mut seen).await;

    // A viewer's input is ignored.
    let (mut viewer, _) = tokio_tungstenite::connect_async(url(VIEWER)).await.unwrap();
    viewer
        .send(Message::Binary(b"from-viewer\n".to_vec()))
        .await
        .unwrap();
    ws.send(Message::Binary(b"three\n".to_vec())).await.unwrap();
    read_until(&mut ws, "got three", &mut seen).await;
    assert!(!String::from_utf8_lossy(&seen).contains("from-viewer"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_client_that_falls_behind_is_repainted_not_dropped() {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let node = TestNode::start_with(|c| c.session.ring_bytes = 64 << 10);
    let session = node
        .create(&[
            "sh",
            "-c",
            "stty -echo; echo ready; read go; seq 1 2000000; echo all-written; exec sleep 1000",
        ])
        .await
        .id;
    wait_output(&node, &session, "ready").await;
    let url = format!(
        "ws://{}/sessions/{session}/raw?token={VIEWER}",
        node.node.addr()
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    // This client reads nothing while ~15 MB are written: far more than the
    // socket buffers and the 64 KiB ring hold.
    let mut op = node.client(OPERATOR).await;
    op.send(&ClientMsg::Input {
        session: session.clone(),
        data: b"\n".to_vec(),
    })
    .await
    .unwrap();
    wait_output(&node, &session, "all-written").await;
    // Scan only what each message adds (the stream is ~15 MB).
    let mut seen: Vec<u8> = Vec::new();
    let mut reset: Option<usize> = None;
    within(PATIENCE, "the repaint", async {
        loop {
            let Message::Binary(b) = ws.next().await.expect("still connected").unwrap() else {
                continue;
            };
            let from = seen.len().saturating_sub(16);
            seen.extend_from_slice(&b);
            if reset.is_none() {
                reset = seen[from..]
                    .windows(2)
                    .position(|w| w == b"\x1bc")
                    .map(|p| from + p);
            }
            if let Some(at) = reset {
                let scan = from.max(at);
                if seen[scan..].windows(11).any(|w| w == b"all-written") {
                    break;
                }
            }
        }
    })
    .await;
    let reset = reset.expect("a reset came");
    assert!(
        reset > 0,
        "the first bytes were the attach snapshot and live output"
    );
    let mut screen = Terminal::new(120, 30).unwrap();
    screen.feed(String::from_utf8_lossy(&seen[reset..]).as_ref());
    let rows: Vec<String> = screen
        .screen()
        .visible_lines()
        .map(|l| l.text().trim_end().to_string())
        .collect();
    assert!(
        rows.iter().any(|r| r == "all-written") && rows.iter().any(|r| r == "2000000"),
        "{rows:?}"
    );
}

/// A session someone watches keeps its screen model warm while output
/// runs without a pause (no idle moment for a catch-up): background passes
/// emulate the flood as it comes, so a snapshot asked for at any moment
/// finds the model close behind. The snapshot shows the flood's screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_session_is_kept_warm_while_a_flood_runs() {
    let node = TestNode::start();
    let session = node
        .create(&["sh", "-c", "exec yes 'warm flood line'"])
        .await
        .id;
    // A viewer that never acks: it holds a model (its snapshot) and a
    // subscription, and the flood runs on without it.
    let mut viewer = node.client(VIEWER).await;
    subscribe(&mut viewer, &session, None, 1 << 16)
        .await
        .unwrap();
    let url = node.url();
    within(PATIENCE, "background passes during the flood", async {
        while wire::metric(&url, "termesh_screen_warm_bytes_total").await < (2 << 20) as f64 {
            poll_pause().await;
        }
    })
    .await;
    let requested = wire::metric(&url, "termesh_screen_request_bytes_total").await;
    let mut c = node.client(VIEWER).await;
    let reply = screen(&mut c, &session).await;
    let ServerMsg::Snapshot { data, .. } = reply else {
        panic!("{reply:?}")
    };
    let mut t = Terminal::new(120, 30).unwrap();
    t.feed(String::from_utf8_lossy(&data).as_ref());
    let rows: Vec<String> = t.screen().visible_lines().map(|l| l.text()).collect();
    assert!(
        rows.iter()
            .filter(|r| r.trim_end() == "warm flood line")
            .count()
            >= 28,
        "{rows:#?}"
    );
    let fed = wire::metric(&url, "termesh_screen_request_bytes_total").await - requested;
    assert!(
        fed <= (1 << 20) as f64,
        "a request emulates at most 1 MiB, warm or not: {fed}"
    );
}

/// The `screen` reply for `session`, without scrollback.
async fn screen(c: &mut Client, session: &str) -> ServerMsg {
    c.request(|id| ClientMsg::Screen {
        id,
        session: session.to_string(),
        scrollback: None,
    })
    .await
    .unwrap()
}

/// A watched session quiet for `session.model_idle` drops its screen model
/// and keeps its last snapshot: the next fresh attach gets the same
/// snapshot without a screen pass, and output after it lands on a model
/// brought back from that snapshot (the colours and text drawn before the
/// drop are still on the screen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_watched_session_drops_its_model_and_keeps_its_screen() {
    let node =
        TestNode::start_with(|c| c.session.model_idle = std::time::Duration::from_millis(300));
    let session = node
        .create(&["sh", "-c", "printf '\\033[1;32mgreen before\\033[0m\\r\\n'; stty -echo; read x; echo \"after $x\"; exec sleep 1000"])
        .await
        .id;
    wait_output(&node, &session, "green before").await;
    let (_first, before, seq) = fresh(node.client(VIEWER).await, &session).await;
    let url = node.url();
    within(PATIENCE, "the idle model to be dropped", async {
        while wire::metric(&url, "termesh_screen_models_dropped_total").await < 1.0 {
            poll_pause().await;
        }
    })
    .await;
    let passes = wire::metric(&url, "termesh_snapshots_total").await;
    let (_second, again, again_seq) = fresh(node.client(VIEWER).await, &session).await;
    assert_eq!((again, again_seq), (before, seq), "the kept snapshot");
    assert_eq!(
        wire::metric(&url, "termesh_snapshots_total").await,
        passes,
        "answered without a screen pass"
    );
    // New output lands on the model rebuilt from that snapshot: only the
    // new bytes are emulated, not the ring again.
    let emulated = || async {
        wire::metric(&url, "termesh_screen_request_bytes_total").await
            + wire::metric(&url, "termesh_screen_warm_bytes_total").await
    };
    let emulated_before = emulated().await;
    let mut typist = node.client(OPERATOR).await;
    typist
        .send(&ClientMsg::Input {
            session: session.clone(),
            data: b"x\n".to_vec(),
        })
        .await
        .unwrap();
    wait_output(&node, &session, "after x").await;
    let reply = screen(&mut typist, &session).await;
    let ServerMsg::Snapshot { data, .. } = reply else {
        panic!("{reply:?}")
    };
    let mut t = Terminal::new(120, 30).unwrap();
    t.feed(String::from_utf8_lossy(&data).as_ref());
    let rows: Vec<String> = t
        .screen()
        .visible_lines()
        .map(|l| l.text().trim_end().to_string())
        .collect();
    assert_eq!(&rows[..2], ["green before", "after x"], "{rows:#?}");
    let green = t.screen().visible_lines().next().unwrap().cells()[0]
        .pen()
        .foreground();
    assert_eq!(
        green,
        Some(avt::Color::Indexed(2)),
        "the colour drawn before the drop"
    );
    let fed = emulated().await - emulated_before;
    assert!(
        fed <= "after x\r\n".len() as f64,
        "emulated {fed} bytes, not only the new ones"
    );
}

/// A fresh subscribe of `session` on `c`: the client, the snapshot, its seq.
async fn fresh(mut c: Client, session: &str) -> (Client, Vec<u8>, u64) {
    let reply = c
        .request(|id| ClientMsg::Subscribe {
            id,
            session: session.to_string(),
            from_seq: None,
            window: None,
            scrollback: None,
        })
        .await
        .unwrap();
    assert!(matches!(reply, ServerMsg::Subscribed { .. }), "{reply:?}");
    let ServerMsg::Snapshot { data, seq, .. } = next(&mut c).await else {
        panic!("no snapshot")
    };
    (c, data, seq)
}
