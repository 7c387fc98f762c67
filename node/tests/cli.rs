//! The `termesh` binary as a user runs it: a node with no config, clients
//! that find it and its token, `config check`, and a clean stop on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_termesh");

fn run(args: &[&str], data_dir: &std::path::Path, url: &str) -> (bool, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("TERMESH_URL", url)
        .env("TERMESH_DATA_DIR", data_dir)
        .env_remove("TERMESH_TOKEN")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Polls `f` (another process's state has no event to wait on here) until
/// it holds, failing after a generous bound.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn node_and_clients_with_defaults() {
    let data = tempfile::tempdir().unwrap();
    let mut node = Command::new(BIN)
        .args(["node", "--listen", "127.0.0.1:0", "--name", "cli-test"])
        .arg("--data-dir")
        .arg(data.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(node.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the URL is printed")
        .to_string();
    let banner: Vec<String> = lines.by_ref().take(3).map(|l| l.unwrap()).collect();
    let token = std::fs::read_to_string(data.path().join("admin.token")).unwrap();
    assert!(
        banner.iter().any(|l| l.contains(token.trim())),
        "the generated token is printed: {banner:?}"
    );

    let (ok, out, err) = run(
        &[
            "new",
            "--name",
            "greeter",
            "--",
            "sh",
            "-c",
            "echo hello-from-cli; exec sleep 1000",
        ],
        data.path(),
        &url,
    );
    assert!(ok, "{err}");
    let id = out.trim().to_string();
    eventually("the output", || {
        run(&["logs", &id], data.path(), &url)
            .1
            .contains("hello-from-cli")
    });
    let (ok, out, _) = run(&["screen", &id], data.path(), &url);
    assert!(ok && out.starts_with("hello-from-cli"), "{out}");
    let (ok, out, _) = run(&["ls"], data.path(), &url);
    assert!(
        ok && out.contains(&id) && out.contains("greeter") && out.contains("running"),
        "{out}"
    );
    assert!(run(&["kill", &id], data.path(), &url).0);
    eventually("the exit", || {
        run(&["ls"], data.path(), &url).1.contains("exit 143")
    });
    let (ok, _, err) = run(&["ls", "--token", "wrong"], data.path(), &url);
    assert!(!ok && err.contains("401"), "{err}");
    let (ok, _, err) = run(&["logs", "nope"], data.path(), &url);
    assert!(!ok && err.contains("not_found"), "{err}");

    let pid = nix::unistd::Pid::from_raw(node.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = node.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the node did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn config_check_names_key_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/termesh.example.toml"
        ),
        &good,
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["config", "check"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[session]\nring_bytes = \"lots\"\n").unwrap();
    let out = Command::new(BIN)
        .args(["config", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("bad.toml") && err.contains("session.ring_bytes") && err.contains("lots"),
        "{err}"
    );
    let out = Command::new(BIN)
        .args(["node", "--listen", "nowhere"])
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--listen"));
}
