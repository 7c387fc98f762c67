//! Tokens managed while the node runs: `termesh token add --config` puts a
//! new token's hash in the file, `termesh config reload` (or SIGHUP)
//! applies it without a restart; `token revoke` and a reload close the
//! connections that used it (WebSocket protocol and raw endpoint), even
//! ones that only listen; a broken file changes nothing.

mod common;

use std::os::unix::fs::OpenOptionsExt;

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
        looked: Vec::new(),
    }
}

/// `POST /api/v1/config/reload` as the admin: the HTTP status.
fn rest_reload(url: &str) -> u16 {
    ureq::post(&format!("{url}/api/v1/config/reload"))
        .set("authorization", &format!("Bearer {ADMIN}"))
        .timeout(std::time::Duration::from_secs(120))
        .call()
        .map(|r| r.status())
        .unwrap_or_else(|e| match e {
            ureq::Error::Status(code, _) => code,
            other => panic!("{other}"),
        })
}

async fn lists(node: &BinaryNode, token: &str) -> bool {
    match Client::connect(&target(node, token)).await {
        Ok(mut c) => c.request(ClientMsg::list).await.is_ok(),
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

/// A reload reads its file off the HTTP workers: reloads stuck on a config
/// that never finishes reading (here a FIFO nobody writes yet) leave the
/// node answering other requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_stuck_reading_its_file_holds_up_no_other_request() {
    let node = BinaryNode::start("");
    let config = node.config_path();
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::remove_file(&config).unwrap();
    nix::unistd::mkfifo(&config, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let url = node.url.clone();
    // More than the node's HTTP workers (2), however they are spread.
    let reloads: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || rest_reload(&url))
        })
        .collect();
    // Each reload waits for the FIFO's writer once the node has read the
    // request; meanwhile other requests are answered.
    let health = url.clone();
    let answered = within(PATIENCE, "healthz while reloads hang", async {
        tokio::task::spawn_blocking(move || {
            ureq::get(&format!("{health}/healthz"))
                .timeout(std::time::Duration::from_secs(15))
                .call()
                .map(|r| r.status())
                .ok()
        })
        .await
        .unwrap()
    })
    .await;
    // Let the reloads go: write the config into the FIFO until all ended.
    let released = {
        let (config, text) = (config.clone(), text.clone());
        std::thread::spawn(move || {
            for reload in reloads {
                while !reload.is_finished() {
                    use std::io::Write;
                    if let Ok(mut fifo) = std::fs::OpenOptions::new()
                        .write(true)
                        .custom_flags(libc::O_NONBLOCK)
                        .open(&config)
                    {
                        let _ = fifo.write_all(text.as_bytes());
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                reload.join().unwrap();
            }
        })
    };
    within(PATIENCE, "the stuck reloads to end", async {
        while !released.is_finished() {
            poll_pause().await;
        }
    })
    .await;
    std::fs::remove_file(&config).unwrap();
    std::fs::write(&config, text).unwrap();
    assert_eq!(answered, Some(200), "healthz was answered");
}

/// Threads of `pid` blocked opening a FIFO (waiting for a writer: the
/// kernel's `wait_for_partner`, called by `fifo_open`).
fn opening_a_fifo(pid: i32) -> usize {
    let waits = |t: &std::fs::DirEntry| {
        let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
        ["wait_for_partner", "fifo_open"].contains(&read("wchan").as_str())
            || read("stack").contains("fifo_open")
    };
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| tasks.flatten().filter(waits).count())
        .unwrap_or(0)
}

/// A REST reload and a SIGHUP at once run one after the other, each from
/// reading the file to applying it, so an older file is never applied
/// after a newer one (a revoked token would come back). Seen from
/// outside: with the config a FIFO nobody writes, the first reload waits
/// opening it, and the second waits for the first, not at the FIFO.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sighup_and_a_rest_reload_at_once_run_one_after_the_other() {
    let node = BinaryNode::start("");
    let pid = node.pid().as_raw();
    let config = node.config_path();
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::remove_file(&config).unwrap();
    nix::unistd::mkfifo(&config, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let url = node.url.clone();
    let rest = std::thread::spawn(move || rest_reload(&url));
    within(PATIENCE, "the REST reload waiting at the FIFO", async {
        while opening_a_fifo(pid) < 1 {
            poll_pause().await;
        }
    })
    .await;
    nix::sys::signal::kill(node.pid(), nix::sys::signal::Signal::SIGHUP).unwrap();
    within(PATIENCE, "the SIGHUP reload waiting for the other", async {
        while !node.log().contains("another reload is running") {
            poll_pause().await;
        }
    })
    .await;
    assert_eq!(opening_a_fifo(pid), 1, "both reloads read the file at once");
    // Let them go: the config through the FIFO until both have read it.
    let feed = |config: &std::path::Path, text: &str| {
        use std::io::Write;
        if let Ok(mut fifo) = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(config)
        {
            let _ = fifo.write_all(text.as_bytes());
        }
    };
    // One copy per reader: a reader waiting at the FIFO gets the text,
    // then its reload is applied before the next copy is written (two
    // copies read as one would be a file with every key twice).
    for applied in 1..=2 {
        within(PATIENCE, "a reload waiting at the FIFO", async {
            while opening_a_fifo(pid) < 1 {
                poll_pause().await;
            }
        })
        .await;
        feed(&config, &text);
        within(PATIENCE, "that reload applied", async {
            while node.log().matches("config reloaded").count() < applied {
                poll_pause().await;
            }
        })
        .await;
    }
    assert_eq!(rest.join().unwrap(), 200);
    std::fs::remove_file(&config).unwrap();
    std::fs::write(&config, text).unwrap();
    assert!(lists(&node, OPERATOR).await);
}
