//! Sessions that end or go away, as a subscriber sees them: `exited` comes
//! after the last output the subscriber is sent (whatever its credit), a
//! new subscriber of an exited session is told too, a removed session's
//! subscribers get `not_found`, and names are unique on a node.

mod common;

use common::*;
use termesh_transport::{ClientMsg, CreateRequest, ErrorCode, ServerMsg};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exited_comes_after_the_last_output_even_when_credit_holds_it_back() {
    let node = TestNode::start();
    let go = node.data_dir.path().join("go");
    // About 200 KiB, far more than the smallest window, then exit 5.
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; seq 1 40000; exit 5",
        go.display()
    );
    let session = node.create(&["sh", "-c", &script]).await.id;
    let mut c = node.client(VIEWER).await;
    let window = 16 * 1024;
    subscribe(&mut c, &session, None, window).await.unwrap();
    std::fs::write(&go, "").unwrap();
    node.wait_info(&session, "the program to exit", |s| s.exit_code == Some(5))
        .await;

    // Without acks: one window of output, and no `exited` yet.
    let mut s = Stream::new(window);
    within(
        PATIENCE,
        "a window of output",
        pump_until(&mut c, &session, &mut s, false, |s| {
            s.data.len() as u64 >= window
        }),
    )
    .await
    .unwrap();
    assert_eq!(s.exited, None, "exited overtook output held back by credit");

    // Acking as the protocol says: everything, then `exited`, then nothing.
    pump_to_exit(&mut c, &session, &mut s, "the rest and exited").await;
    let text = String::from_utf8_lossy(&s.data);
    assert!(text.trim_end().ends_with("40000"), "output ended early");
    assert_eq!(s.exited, Some(5));
    let info = node.info(&session).await.unwrap();
    assert_eq!(
        s.last_seq, info.last_seq,
        "exited came before the last frame"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_subscriber_of_an_exited_session_gets_the_screen_then_exited() {
    let node = TestNode::start();
    let session = node
        .create(&["sh", "-c", "echo quick-output; exit 4"])
        .await
        .id;
    node.wait_info(&session, "exit", |s| s.exit_code == Some(4))
        .await;
    for from_seq in [None, Some(0), Some(1)] {
        let mut c = node.client(VIEWER).await;
        subscribe(&mut c, &session, from_seq, 1 << 20)
            .await
            .unwrap();
        let mut s = Stream::new(1 << 20);
        pump_to_exit(&mut c, &session, &mut s, "exited for a late subscriber").await;
        assert_eq!(s.exited, Some(4), "from_seq {from_seq:?}");
        if from_seq.is_none() {
            let (_, snap) = s.snapshots.last().expect("a fresh attach gets a snapshot");
            assert!(String::from_utf8_lossy(snap).contains("quick-output"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_of_a_removed_session_are_told() {
    let node = TestNode::start();
    let session = node.create(&["sleep", "1000"]).await.id;
    let mut viewer = node.client(VIEWER).await;
    subscribe(&mut viewer, &session, None, 1 << 20)
        .await
        .unwrap();
    let mut op = node.client(OPERATOR).await;
    op.request(|id| ClientMsg::Remove {
        id,
        session: session.clone(),
        purge: None,
    })
    .await
    .unwrap();
    let told = within(PATIENCE, "the removal notice", async {
        loop {
            if let ServerMsg::Error {
                id: None,
                session: Some(s),
                code,
                message,
            } = next(&mut viewer).await
            {
                return (s, code, message);
            }
        }
    })
    .await;
    assert_eq!(told.0, session);
    assert_eq!(told.1, ErrorCode::NotFound);
    assert!(told.2.contains("removed"), "{}", told.2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_are_unique_on_a_node() {
    let node = TestNode::start();
    let named = |name: &str| CreateRequest {
        command: Some(vec!["sleep".into(), "1000".into()]),
        name: Some(name.into()),
        ..Default::default()
    };
    let first = node.create_with(named("build")).await.id;
    let mut op = node.client(OPERATOR).await;
    let err = op
        .request(|id| ClientMsg::Create {
            id,
            req: named("build"),
        })
        .await
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("bad_request"), "{err}");
    assert!(err.contains(&first), "the error names the holder: {err}");

    let second = node.create_with(named("test")).await.id;
    let err = op
        .request(|id| ClientMsg::Rename {
            id,
            session: second.clone(),
            name: "build".into(),
        })
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("bad_request") && err.contains(&first),
        "{err}"
    );
    // Renaming a session to its own name is fine; so is a free name.
    for name in ["test", "deploy"] {
        op.request(|id| ClientMsg::Rename {
            id,
            session: second.clone(),
            name: name.into(),
        })
        .await
        .unwrap();
    }
    node.wait_info(&second, "the rename", |s| {
        s.name.as_deref() == Some("deploy")
    })
    .await;
    node.create_with(named("test")).await;
}
