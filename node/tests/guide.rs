//! The examples of docs/agents.md, "Driving agents from code", run as they
//! are written there (each fenced block after a `<!-- run: NAME -->`
//! line), against a real node: the guide cannot rot.

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// The block after `<!-- run: name -->` in docs/agents.md.
fn example(name: &str) -> String {
    let doc = include_str!("../../docs/agents.md");
    let marker = format!("<!-- run: {name} -->");
    let after = &doc[doc.find(&marker).unwrap_or_else(|| panic!("no {marker}"))..];
    let start = after.find("```").unwrap();
    let body = &after[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("\n```").unwrap() + 1].to_string()
}

/// The venv deploy/test.sh makes (it has `websockets` and `msgpack` too).
fn python() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().join("py-mcp/bin/python")
}

async fn run(node: &TestNode, program: &Path, script: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("example");
    std::fs::write(&file, script).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_termesh")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (program, url) = (program.to_path_buf(), node.url());
    let out = within(
        PATIENCE * 2,
        "the example",
        tokio::task::spawn_blocking(move || {
            std::process::Command::new("timeout")
                .args(["-s", "KILL", "110"])
                .arg(program)
                .arg(&file)
                .env("PATH", path)
                .env("TERMESH_URL", url)
                .env("TERMESH_TOKEN", OPERATOR)
                .output()
                .unwrap()
        }),
    )
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const PRINTS: &str = "it asks: Deploy? [y/N]\ny\ndeployed: y\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_drives_an_agent_over_the_websocket() {
    let node = TestNode::start();
    let python = python();
    assert!(
        python.exists(),
        "no {}: run `bash deploy/test.sh` (it makes the venv)",
        python.display()
    );
    assert_eq!(run(&node, &python, &example("drive.py")).await, PRINTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bash_example_drives_an_agent_with_the_cli() {
    let node = TestNode::start();
    assert_eq!(
        run(&node, Path::new("bash"), &example("drive.sh")).await,
        PRINTS
    );
}
