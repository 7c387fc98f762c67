//! `termesh attach` with stdin that is not a terminal (`</dev/null`):
//! errors surface with a non-zero exit, and the end of stdin does not
//! detach (output still shows until the session ends).

mod common;

use std::process::{Command, Stdio};

use common::*;

async fn attach_without_a_terminal(node: &TestNode, session: &str) -> std::process::Output {
    let (url, session) = (node.url(), session.to_string());
    tokio::task::spawn_blocking(move || {
        // `timeout` bounds a hang (a bug) so the test fails, not CI.
        Command::new("timeout")
            .arg("120")
            .arg(env!("CARGO_BIN_EXE_termesh"))
            .args(["attach", "--scrollback", "0", &session])
            .env("TERMESH_URL", url)
            .env("TERMESH_TOKEN", OPERATOR)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_without_a_terminal_reports_errors_and_follows_output() {
    let node = TestNode::start();
    let out = within(
        PATIENCE,
        "attach of an unknown session",
        attach_without_a_terminal(&node, "nosuchsession"),
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit {:?}", out.status);
    assert!(err.contains("nosuchsession"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("detached"));

    // A session that prints, then ends: its output shows and the exit
    // code is the session's, although stdin ended at once.
    let go = node.data_dir.path().join("go");
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; echo late-output; exit 3",
        go.display()
    );
    let session = node.create(&["sh", "-c", &script]).await.id;
    let attached = attach_without_a_terminal(&node, &session);
    let release = async {
        node.wait_info(&session, "the attach to subscribe", |s| s.viewers == 1)
            .await;
        std::fs::write(&go, "").unwrap();
    };
    let (out, ()) = within(
        PATIENCE,
        "attach to follow the session",
        futures_util::future::join(attached, release),
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("late-output"), "{text}");
    assert!(text.contains("exited with code 3"), "{text}");
    assert_eq!(out.status.code(), Some(3));
}

/// A bare `termesh attach` returns to the session this user attached last
/// through this node (while it runs), not to the one with the newest
/// output, as the detach hint says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_attach_returns_to_the_session_attached_last() {
    let node = TestNode::start();
    let state = tempfile::tempdir().unwrap();
    let go = node.data_dir.path().join("go-last");
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; echo last-one-output; exit 0",
        go.display()
    );
    let last = node.create(&["sh", "-c", &script]).await.id;
    // Another session with newer output all the time.
    node.create(&["sh", "-c", "while :; do echo busy; sleep 0.1; done"])
        .await;
    let attach = |session: Option<String>| {
        let (url, state) = (node.url(), state.path().to_path_buf());
        tokio::task::spawn_blocking(move || {
            let mut c = Command::new("timeout");
            c.arg("120")
                .arg(env!("CARGO_BIN_EXE_termesh"))
                .args(["attach", "--scrollback", "0"]);
            if let Some(s) = session {
                c.arg(s);
            }
            c.env("TERMESH_URL", url)
                .env("TERMESH_TOKEN", OPERATOR)
                .env("XDG_STATE_HOME", state)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
    };
    // Attach to it by id, then leave (SIGTERM: the session runs on).
    let first = attach(Some(last.clone())).await.unwrap();
    node.wait_info(&last, "the first attach", |s| s.viewers == 1)
        .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = tokio::task::spawn_blocking(move || first.wait_with_output()).await;
    node.wait_info(&last, "the first attach to leave", |s| s.viewers == 0)
        .await;
    // A bare attach: back to it; its output ends the attach.
    let bare = attach(None).await.unwrap();
    node.wait_info(&last, "the bare attach", |s| s.viewers == 1)
        .await;
    std::fs::write(&go, "").unwrap();
    let out = within(
        PATIENCE,
        "the bare attach to follow the session to its end",
        tokio::task::spawn_blocking(move || bare.wait_with_output()),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(out.status.success(), "exit {:?}", out.status);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("last-one-output"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
