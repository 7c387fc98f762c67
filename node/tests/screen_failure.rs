//! A screen computation that fails (a panic in the emulator, injected here
//! through the session's fault hook) is retried once; a second failure is
//! told to whoever waited, never a silent stall. Its own test binary: the
//! hook is process-wide.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use futures_util::StreamExt;
use termesh_actors::session::FAIL_SCREEN_JOBS;
use termesh_transport::{ClientMsg, ErrorCode, ServerMsg};
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_screen_is_retried_once_then_reported() {
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
