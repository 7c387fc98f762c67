//! Driving agents from code (PROTOCOL.md section 15): `wait` answers at
//! once, on a change, on an exit and on its timeout; `read` returns exactly
//! the new text since a seq, escapes gone and redraws collapsed; the same
//! over REST and the CLI (`termesh wait`, `termesh read`, `termesh send ID
//! -`). Real node, real PTYs, scripted agents.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::*;
use termesh_node::client::{error_code, Client};
use termesh_transport::{ClientMsg, ErrorCode, ServerMsg};

async fn wait(
    c: &mut Client,
    session: &str,
    until: &[&str],
    timeout_ms: Option<u64>,
) -> anyhow::Result<(String, u64)> {
    let reply = within(
        PATIENCE,
        "a wait's answer",
        c.request(|id| ClientMsg::Wait {
            id,
            session: session.into(),
            until: until.iter().map(|s| s.to_string()).collect(),
            timeout_ms,
        }),
    )
    .await?;
    match reply {
        ServerMsg::State { state, seq, .. } => Ok((state, seq)),
        other => panic!("{other:?}"),
    }
}

async fn read(c: &mut Client, session: &str, since: u64) -> (u64, String) {
    let reply = c
        .request(|id| ClientMsg::Read {
            id,
            session: session.into(),
            since_seq: Some(since),
            max_bytes: None,
        })
        .await
        .unwrap();
    match reply {
        ServerMsg::Text { seq, text, .. } => (seq, text),
        other => panic!("{other:?}"),
    }
}

/// `termesh ARGS` against `node`, with `stdin` fed in.
fn cli(node: &TestNode, args: &[&str], stdin: &str) -> std::process::Output {
    // Killed (137) rather than timed out (124, `termesh wait`'s own code)
    // if it hangs.
    let mut child = Command::new("timeout")
        .args(["-s", "KILL", "60"])
        .arg(env!("CARGO_BIN_EXE_termesh"))
        .args(args)
        .args(["--url", &node.url(), "--token", OPERATOR])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_answers_at_once_on_change_on_exit_and_on_timeout() {
    let node = TestNode::start();
    let script = "echo building; sleep 1; printf 'Overwrite config.toml? [y/N] '; \
                  read a; echo \"answered $a\"; sleep 0.5; exit 3";
    let session = node.create(&["sh", "-c", script]).await.id;
    let mut c = node.client(VIEWER).await;

    // On change: asked before the question is on the screen.
    let (state, seq) = wait(&mut c, &session, &["waiting"], None).await.unwrap();
    assert_eq!(state, "waiting");
    assert!(seq >= 2, "the question's seq, {seq}");
    let text = read(&mut c, &session, 0).await.1;
    assert!(text.contains("Overwrite config.toml? [y/N]"), "{text:?}");
    // At once: it waits already.
    let began = Instant::now();
    assert_eq!(
        wait(&mut c, &session, &["waiting", "exited"], Some(1))
            .await
            .unwrap()
            .0,
        "waiting"
    );
    println!("answered at once in {:?}", began.elapsed());
    // On timeout.
    let err = wait(&mut c, &session, &["idle"], Some(300))
        .await
        .unwrap_err();
    assert_eq!(error_code(&err), Some(ErrorCode::Timeout), "{err}");
    // Bad requests.
    for (until, timeout) in [
        (vec![], None),
        (vec!["sleepy"], None),
        (vec!["idle"], Some(3_600_001)),
    ] {
        let err = wait(&mut c, &session, &until, timeout).await.unwrap_err();
        assert_eq!(error_code(&err), Some(ErrorCode::BadRequest), "{err}");
    }
    // Over REST: the time out is 408 with the code.
    let url = format!(
        "{}/api/v1/sessions/{session}/wait?until=idle&timeout_ms=200",
        node.url()
    );
    let got = tokio::task::spawn_blocking(move || {
        match ureq::get(&url)
            .set("authorization", &format!("Bearer {VIEWER}"))
            .call()
        {
            Err(ureq::Error::Status(code, resp)) => (code, resp.into_string().unwrap()),
            other => panic!("{other:?}"),
        }
    })
    .await
    .unwrap();
    assert_eq!(got.0, 408);
    assert!(got.1.contains("\"timeout\""), "{}", got.1);

    // The answer typed from stdin; on exit a wait answers `exited`.
    let out = cli(&node, &["send", &session, "-"], "y");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // (Not `waiting`: it still waits until its screen shows the answer.)
    let (state, _) = wait(&mut c, &session, &["idle"], None).await.unwrap();
    assert_eq!(state, "exited");
    assert!(read(&mut c, &session, 0).await.1.contains("answered y"));
    // The CLI: 0 and the state once reached.
    let out = cli(&node, &["wait", &session, "--until", "idle"], "");
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("exited "));
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_s_wait_times_out_with_its_own_exit_code() {
    let node = TestNode::start();
    let session = node.create(&["sleep", "1000"]).await.id;
    let out = cli(
        &node,
        &["wait", &session, "--until", "waiting", "--timeout", "500ms"],
        "",
    );
    assert_eq!(
        out.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&node, &["wait", &session, "--until", "sleepy"], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("sleepy"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_returns_exactly_the_new_text_as_plain_text() {
    let node = TestNode::start();
    let script = "printf '\\033[1;32mbold\\033[0m line\\r\\n'; \
                  for i in 1 2 3 4 5; do printf '\\r%s spinning' $i; sleep 0.05; done; \
                  printf '\\r\\033[Kdone\\n'; read x; echo \"after $x\"; exec sleep 1000";
    let session = node.create(&["sh", "-c", script]).await.id;
    wait_output(&node, &session, "done").await;
    let mut c = node.client(OPERATOR).await;
    let (seq, text) = read(&mut c, &session, 0).await;
    assert_eq!(text, "bold line\ndone\n", "escapes gone, redraws collapsed");
    // Nothing new: the same seq, no text.
    assert_eq!(read(&mut c, &session, seq).await, (seq, String::new()));

    c.send(&ClientMsg::Input {
        session: session.clone(),
        data: b"more\r".to_vec(),
    })
    .await
    .unwrap();
    wait_output(&node, &session, "after more").await;
    let (end, text) = read(&mut c, &session, seq).await;
    assert_eq!(text, "more\nafter more\n", "exactly what came after {seq}");
    assert!(end > seq);
    // REST and the CLI say the same.
    let rest = http_get(
        &format!(
            "{}/api/v1/sessions/{session}/read?since_seq={seq}",
            node.url()
        ),
        VIEWER,
    )
    .await;
    let rest: serde_json::Value = serde_json::from_str(&rest).unwrap();
    assert_eq!(rest["seq"], end);
    assert_eq!(rest["text"], "more\nafter more\n");
    let out = cli(&node, &["read", &session, "--since", &seq.to_string()], "");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "more\nafter more\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("seq {end}")));
    let out = cli(&node, &["read", &session[..6], "--json"], "");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["seq"], end);
    c.close().await;
}

/// A 100 KB paste of lines with UTF-8 arrives whole, in order, its Enter
/// last, and `ok` comes once it is written; over REST too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_paste_with_newlines_and_utf8_arrives_whole() {
    use sha2::{Digest, Sha256};
    let node = TestNode::start();
    let text: String = (0..2_000)
        .map(|i| format!("line {i:05}: é → 日本語 ✓ {}\n", "x".repeat(20)))
        .collect();
    assert!(text.len() > 100_000, "{}", text.len());
    // What the program reads: the text, then Enter (no paste marks: it
    // did not ask for them), digested once it has all of it.
    let want = format!("{:x}", Sha256::digest(format!("{text}\r").as_bytes()));
    let n = text.len() + 1;
    for via_rest in [false, true] {
        let script =
            format!("stty raw -echo; echo ready; head -c {n} | sha256sum; exec sleep 1000");
        let session = node.create(&["sh", "-c", &script]).await.id;
        wait_output(&node, &session, "ready").await;
        if via_rest {
            let (url, body) = (
                format!("{}/api/v1/sessions/{session}/send", node.url()),
                serde_json::json!({ "text": text }).to_string(),
            );
            let status = tokio::task::spawn_blocking(move || {
                ureq::post(&url)
                    .set("authorization", &format!("Bearer {OPERATOR}"))
                    .set("content-type", "application/json")
                    .send_string(&body)
                    .map(|r| r.status())
                    .unwrap_or_else(|e| panic!("{e}"))
            })
            .await
            .unwrap();
            assert_eq!(status, 204);
        } else {
            let mut c = node.client(OPERATOR).await;
            let reply = c
                .request(|id| ClientMsg::Send {
                    id,
                    session: session.clone(),
                    text: text.clone(),
                    submit: None,
                    when: None,
                })
                .await
                .unwrap();
            assert!(matches!(reply, ServerMsg::Ok { .. }), "{reply:?}");
            c.close().await;
        }
        wait_output(&node, &session, &want).await;
    }
}
