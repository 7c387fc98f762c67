//! `termesh ls` and `termesh rename` as a user runs them: rows cut to a
//! real terminal's width (the command first), ended sessions hidden and
//! counted, whole rows in a pipe; renames by prefix and their errors.

mod common;

use std::io::Read;
use std::process::Command;

use common::*;
use portable_pty::{native_pty_system, CommandBuilder, PtySize};
use termesh_transport::{CreateRequest, SessionStatus};
use unicode_width::UnicodeWidthStr;

const BIN: &str = env!("CARGO_BIN_EXE_termesh");

/// Runs `termesh ARGS` against `node` with `env`, off the async threads:
/// (success, stdout, stderr). `timeout` bounds a hang (a bug).
async fn termesh(node: &TestNode, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new("timeout");
    cmd.arg("60")
        .arg(BIN)
        .args(args)
        .env("TERMESH_URL", node.url())
        .env("TERMESH_TOKEN", OPERATOR)
        .env_remove("COLUMNS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// `termesh ls` in a terminal `cols` wide: what it showed, line by line.
async fn ls_in_terminal(node: &TestNode, cols: u16) -> Vec<String> {
    let url = node.url();
    let text = tokio::task::spawn_blocking(move || {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: 40,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
        let mut cmd = CommandBuilder::new("timeout");
        cmd.args(["60", BIN, "ls"]);
        cmd.env("TERMESH_URL", url);
        cmd.env("TERMESH_TOKEN", OPERATOR);
        cmd.env_remove("COLUMNS");
        let mut child = pair.slave.spawn_command(cmd).unwrap();
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        // The end of the output: EOF, or EIO once the child has gone.
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        assert!(child.wait().unwrap().success());
        String::from_utf8_lossy(&out).into_owned()
    });
    let text = within(PATIENCE, "ls in a terminal", text).await.unwrap();
    text.split("\r\n")
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_fits_the_terminal_and_hides_ended_sessions() {
    let node = TestNode::start();
    let tail = "y".repeat(150);
    let running = node
        .create(&["sh", "-c", &format!("exec sleep 1000 # {tail}")])
        .await
        .id;
    let mut ended = Vec::new();
    for _ in 0..2 {
        let id = node.create(&["sh", "-c", "exit 0"]).await.id;
        node.wait_info(&id, "the session to exit", |s| {
            s.status == SessionStatus::Exited
        })
        .await;
        ended.push(id);
    }

    // An 84-column terminal: every row fits; the command is cut, the
    // columns before it are whole; the ended sessions are counted.
    let lines = ls_in_terminal(&node, 84).await;
    for line in &lines {
        assert!(line.width() <= 84, "{line:?} in {lines:#?}");
    }
    assert!(lines[0].starts_with("ID ") && lines[0].contains("COMMAND"));
    let row = lines.iter().find(|l| l.starts_with(&running)).unwrap();
    assert!(
        row.contains("running") && row.contains("exec sleep") && row.ends_with('…'),
        "{row:?}"
    );
    assert!(
        !lines.iter().any(|l| ended.iter().any(|id| l.contains(id))),
        "{lines:#?}"
    );
    assert_eq!(
        lines.last().unwrap(),
        "(2 ended sessions hidden; --all shows them)"
    );

    // A pipe: whole rows on stdout, the note on stderr.
    let (ok, out, err) = termesh(&node, &["ls"], &[]).await;
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains(&tail), "{out}");
    assert_eq!(err.trim(), "(2 ended sessions hidden; --all shows them)");
    // ... cut when COLUMNS asks for a width.
    let (_, out, _) = termesh(&node, &["ls"], &[("COLUMNS", "60")]).await;
    assert!(out.lines().all(|l| l.width() <= 60), "{out}");
    // --all lists them, with nothing hidden; --json lists everything.
    let (_, out, err) = termesh(&node, &["ls", "--all"], &[]).await;
    assert!(ended.iter().all(|id| out.contains(id)), "{out}");
    assert!(out.contains("exit 0") && err.is_empty(), "{out}{err}");
    let (_, out, _) = termesh(&node, &["ls", "--json"], &[]).await;
    let listed: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(listed.len(), 3, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_by_prefix_with_clear_errors() {
    let node = TestNode::start();
    let named = |name: &str| CreateRequest {
        command: Some(vec!["sleep".into(), "1000".into()]),
        name: Some(name.into()),
        ..Default::default()
    };
    let first = node.create_with(named("first")).await.id;
    node.create_with(named("second")).await;

    let (ok, out, err) = termesh(&node, &["rename", &first[..8], "build"], &[]).await;
    assert!(ok && out.is_empty(), "{out}{err}");
    node.wait_info(&first, "the new name", |s| {
        s.name.as_deref() == Some("build")
    })
    .await;
    // By its new name, then errors a person can act on.
    let (ok, _, err) = termesh(&node, &["rename", "build", "second"], &[]).await;
    assert!(
        !ok && err.contains("cannot rename") && err.contains("taken"),
        "{err}"
    );
    let (ok, _, err) = termesh(&node, &["rename", "nosuch", "x"], &[]).await;
    assert!(!ok && err.contains("no session named `nosuch`"), "{err}");
    let long = "x".repeat(300);
    let (ok, _, err) = termesh(&node, &["rename", "build", &long], &[]).await;
    assert!(!ok && err.contains("at most 256 bytes"), "{err}");
    let (ok, _, err) = termesh(&node, &["rename", "build", ""], &[]).await;
    assert!(!ok && err.contains("an empty name"), "{err}");
}
