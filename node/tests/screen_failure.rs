//! A screen computation that fails (a panic in the emulator, injected here
//! through the session's fault hook) is retried once; a second failure is
//! told to whoever waited, never a silent stall. A background pass that
//! never runs (a starved idle-class thread, held here) holds up nobody.
//! Its own test binary, one test at a time: the hooks are process-wide.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use futures_util::StreamExt;
use termesh_actors::session::{FAIL_SCREEN_JOBS, HELD_BACKGROUND_JOBS, HOLD_BACKGROUND};
use termesh_transport::{ClientMsg, ErrorCode, ServerMsg};
use tokio_tungstenite::tungstenite::Message;

/// The hooks are process-wide: one test at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_screen_is_retried_once_then_reported() {
    let _one = ONE_AT_A_TIME.lock().await;
    let node = TestNode::start();
    let session = node
        .create(&["sh", "-c", "echo hello-screen; exec sleep 1000"])
        .await
        .id;
    wait_output(&node, &session, "hello-screen").await;
    // Its state settled (the look that reads its screen after output is
    // done): no pass but the test's own takes an injected failure.
    node.wait_info(&session, "the session idle", |s| {
        s.state == Some(termesh_transport::AgentState::Idle)
    })
    .await;

    // One failure: the retry serves the subscriber as if nothing happened.
    FAIL_SCREEN_JOBS.store(1, Ordering::SeqCst);
    let mut c = node.client(VIEWER).await;
    subscribe(&mut c, &session, None, 1 << 20).await.unwrap();
    match next(&mut c).await {
        ServerMsg::Snapshot { data, .. } => {
            assert!(String::from_utf8_lossy(&data).contains("hello-screen"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(FAIL_SCREEN_JOBS.load(Ordering::SeqCst), 0);
    c.close().await;

    // Two failures: the subscriber is told, and its subscription ends.
    FAIL_SCREEN_JOBS.store(2, Ordering::SeqCst);
    let mut c = node.client(VIEWER).await;
    subscribe(&mut c, &session, None, 1 << 20).await.unwrap();
    match next(&mut c).await {
        ServerMsg::Error {
            session: Some(s),
            code: ErrorCode::Internal,
            message,
            ..
        } => {
            assert_eq!(s, session);
            assert!(message.contains("subscription has ended"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    node.wait_info(&session, "no viewers left", |s| s.viewers == 0)
        .await;

    // A screen request is answered with the error.
    FAIL_SCREEN_JOBS.store(2, Ordering::SeqCst);
    let err = c
        .request(|id| ClientMsg::Screen {
            id,
            session: session.clone(),
            scrollback: None,
        })
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("internal"), "{err}");

    // A raw client is closed with 1011.
    FAIL_SCREEN_JOBS.store(2, Ordering::SeqCst);
    let url = format!(
        "ws://{}/sessions/{session}/raw?token={VIEWER}",
        node.node.addr()
    );
    let (mut raw, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let code = within(PATIENCE, "the raw close", async {
        loop {
            match raw.next().await {
                Some(Ok(Message::Close(Some(frame)))) => return u16::from(frame.code),
                Some(Ok(_)) => {}
                other => panic!("{other:?}"),
            }
        }
    })
    .await;
    assert_eq!(code, 1011);

    // The session itself is fine: a new subscription gets its screen.
    assert_eq!(FAIL_SCREEN_JOBS.load(Ordering::SeqCst), 0);
    subscribe(&mut c, &session, None, 1 << 20).await.unwrap();
    assert!(matches!(next(&mut c).await, ServerMsg::Snapshot { .. }));
}

/// Lets the background thread go when the test ends, however it ends.
struct Hold;

impl Hold {
    fn start() -> Hold {
        HOLD_BACKGROUND.store(true, Ordering::SeqCst);
        Hold
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        HOLD_BACKGROUND.store(false, Ordering::SeqCst);
    }
}

/// A snapshot or a screen someone waits for does not wait behind a
/// background pass of its session that the background thread does not get
/// to run (a machine kept busy runs nothing in the idle class; held here):
/// it runs a pass of its own, and output after the snapshot flows. Before,
/// a fresh subscriber waited for as long as the thread was starved, and so
/// did every byte after its snapshot (checked: with the overtake switched
/// off this test times out waiting for the snapshot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starved_background_pass_holds_up_no_snapshot() {
    let _one = ONE_AT_A_TIME.lock().await;
    let node = TestNode::start();
    let script = "echo ready; read x; seq 1 40000; exec cat";
    let session = node.create(&["sh", "-c", script]).await.id;
    wait_output(&node, &session, "ready").await;
    // Watched, so its model is kept warm by background passes.
    let mut watcher = node.client(OPERATOR).await;
    let mut watched = subscribe_fresh(&mut watcher, &session, 1 << 20).await;
    let hold = Hold::start();
    let held_before = HELD_BACKGROUND_JOBS.load(Ordering::SeqCst);
    let input = |data: &str| ClientMsg::Input {
        session: session.clone(),
        data: data.as_bytes().to_vec(),
    };
    // 229 KB of output, more than a warming step's lag.
    watcher.send(&input("go\r")).await.unwrap();
    within(
        PATIENCE,
        "every line",
        pump_until(&mut watcher, &session, &mut watched, true, |s| {
            s.data.ends_with(b"40000\r\n")
        }),
    )
    .await
    .unwrap();
    within(PATIENCE, "a warming pass on the held thread", async {
        while HELD_BACKGROUND_JOBS.load(Ordering::SeqCst) == held_before {
            poll_pause().await;
        }
    })
    .await;

    // A fresh subscriber gets its snapshot, and the output after it.
    let mut viewer = node.client(VIEWER).await;
    subscribe(&mut viewer, &session, None, 1 << 20)
        .await
        .unwrap();
    let mut s = Stream::new(1 << 20);
    within(
        PATIENCE,
        "the snapshot",
        pump_until(&mut viewer, &session, &mut s, true, |s| {
            !s.snapshots.is_empty()
        }),
    )
    .await
    .unwrap();
    assert!(
        String::from_utf8_lossy(&s.snapshots[0].1).contains("40000"),
        "the snapshot shows the last line"
    );
    watcher.send(&input("typed-while-held\r")).await.unwrap();
    within(
        PATIENCE,
        "the echo after the snapshot",
        pump_until(&mut viewer, &session, &mut s, true, |s| {
            String::from_utf8_lossy(&s.data).contains("typed-while-held")
        }),
    )
    .await
    .unwrap();
    // So does a screen request.
    let mut c = node.client(VIEWER).await;
    let screen = |id| ClientMsg::Screen {
        id,
        session: session.clone(),
        scrollback: None,
    };
    match within(PATIENCE, "the screen", c.request(screen))
        .await
        .unwrap()
    {
        ServerMsg::Snapshot { data, .. } => assert!(
            String::from_utf8_lossy(&data).contains("typed-while-held"),
            "the screen shows the echo"
        ),
        other => panic!("{other:?}"),
    }

    // Let go, the held pass ends (its model older than the one kept now),
    // and requests go on being answered with everything.
    drop(hold);
    watcher.send(&input("after-release\r")).await.unwrap();
    within(PATIENCE, "the screen after the release", async {
        loop {
            if let ServerMsg::Snapshot { data, .. } = c.request(screen).await.unwrap() {
                let text = String::from_utf8_lossy(&data).to_string();
                if text.contains("after-release") {
                    assert!(text.contains("typed-while-held"), "{text}");
                    return;
                }
            }
            poll_pause().await;
        }
    })
    .await;
}
