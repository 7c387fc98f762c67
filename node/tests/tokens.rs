//! Tokens managed while the node runs: `termesh token add --config` puts a
//! new token's hash in the file, `termesh config reload` (or SIGHUP)
//! applies it without a restart; `token revoke` and a reload close the
//! connections that used it (WebSocket protocol and raw endpoint), even
//! ones that only listen; a broken file changes nothing.

mod common;

use common::binary::BinaryNode;
use common::*;
use termesh_node::client::{Client, Target};
use termesh_transport::{ClientMsg, ServerMsg};

/// The CLI, run to the end: (exit code, stdout, stderr).
fn termesh(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_termesh"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn target(node: &BinaryNode, token: &str) -> Target {
    Target {
        url: node.url.clone(),
        token: Some(token.to_string()),
        token_source: "the test".into(),
        ca: None,
    }
}

async fn lists(node: &BinaryNode, token: &str) -> bool {
    match Client::connect(&target(node, token)).await {
        Ok(mut c) => c.request(|id| ClientMsg::List { id }).await.is_ok(),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_added_and_revoked_without_a_restart() {
    let node = BinaryNode::start("[ws]\nping_interval = \"1s\"\n");
    let config = node.config_path().display().to_string();
    let url = node.url.clone();
    let reload = || termesh(&["config", "reload", "--url", &url, "--token", ADMIN]);

    let (code, out, err) = termesh(&[
        "token", "add", "--role", "viewer", "--name", "carol", "--config", &config,
    ]);
    assert_eq!(code, 0, "{err}");
    let carol = out.trim().strip_prefix("token: ").unwrap().to_string();
    assert!(!std::fs::read_to_string(&config).unwrap().contains(&carol));
    assert!(!lists(&node, &carol).await, "not before the reload");
    let (code, out, err) = reload();
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("4 token(s)"), "{out}");
    assert!(lists(&node, &carol).await, "in force after the reload");
    let (_, listed, _) = termesh(&["token", "list", "--config", &config]);
    assert!(
        listed.contains("carol") && listed.contains("viewer"),
        "{listed}"
    );

    // A viewer may not reload.
    let (code, _, err) = termesh(&["config", "reload", "--url", &url, "--token", &carol]);
    assert_ne!(code, 0);
    assert!(err.contains("admin"), "{err}");

    // Carol listens to a session; her token is revoked and SIGHUP reloads:
    // her connection is closed although she sends nothing.
    let session = {
        let mut c = Client::connect(&target(&node, OPERATOR)).await.unwrap();
        let req = termesh_transport::CreateRequest {
            command: Some(vec!["cat".into()]),
            ..Default::default()
        };
        match c.request(|id| ClientMsg::Create { id, req }).await.unwrap() {
            ServerMsg::Created { session, .. } => session.id,
            other => panic!("{other:?}"),
        }
    };
    let mut listening = Client::connect(&target(&node, &carol)).await.unwrap();
    subscribe(&mut listening, &session, None, 1 << 20)
        .await
        .unwrap();
    // And watches it on the raw endpoint too.
    let raw_url = format!(
        "{}/sessions/{session}/raw?token={carol}",
        node.url.replacen("http", "ws", 1)
    );
    let (mut raw, _) = tokio_tungstenite::connect_async(&raw_url).await.unwrap();
    let (code, _, err) = termesh(&["token", "revoke", "carol", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    nix::sys::signal::kill(node.pid(), nix::sys::signal::Signal::SIGHUP).unwrap();
    let closed = within(PATIENCE, "the revoked connection to close", async {
        loop {
            match listening.recv().await {
                Ok(_) => continue,
                Err(e) => return format!("{e:#}"),
            }
        }
    })
    .await;
    assert!(
        closed.contains("revoked") || closed.contains("4401"),
        "{closed}"
    );
    let raw_closed = within(PATIENCE, "the revoked raw connection to close", async {
        use futures_util::StreamExt;
        loop {
            match raw.next().await {
                Some(Ok(tokio_tungstenite::tungstenite::Message::Close(frame))) => return frame,
                Some(Ok(_)) => continue,
                other => panic!("closed without a close frame: {other:?}"),
            }
        }
    })
    .await
    .expect("a close frame with a code");
    assert_eq!(u16::from(raw_closed.code), 4401, "{raw_closed:?}");
    assert!(!lists(&node, &carol).await, "refused after the revoke");
    assert!(lists(&node, OPERATOR).await, "the others still work");

    // A file that does not parse changes nothing, and says why.
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{good}\n[session]\ncols = \"wide\"\n")).unwrap();
    let (code, _, err) = reload();
    assert_ne!(code, 0);
    assert!(
        err.contains("nothing changed") && err.contains("cols"),
        "{err}"
    );
    assert!(lists(&node, OPERATOR).await);
    assert!(node.log().contains("config reloaded"), "{}", node.log());
}
