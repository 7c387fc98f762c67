//! Command latency (issue 18), a program, not assertions: the wall time of
//! the real CLI commands run as processes against a release node on
//! loopback (spawn to exit), and attach's time to first paint in a PTY,
//! each beside this machine's limits measured in the same run: spawning
//! `/bin/true`, spawning `termesh --version` (the binary's own start), and
//! a bare TCP + WebSocket connect, welcome and close from this process.
//!
//!     cargo bench -p termesh-node --bench latency
//!
//! `TERMESH_BENCH_ROUNDS` changes the 30 rounds per figure.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;

use common::*;
use portable_pty::{native_pty_system, CommandBuilder, PtySize};
use termesh_node::client::{Client, Target};

const BIN: &str = env!("CARGO_BIN_EXE_termesh");
/// Bound on one attach's wait for its first paint or its exit.
const PATIENCE: Duration = Duration::from_secs(30);

/// Median, p90, min, max of `samples`, in ms, on one line.
fn figures(label: &str, samples: &mut [Duration], target: &str) {
    samples.sort();
    println!(
        "  {label:<32} median {:7.2}   p90 {:7.2}   min {:7.2}   max {:7.2} ms   {target}",
        ms(percentile(samples, 0.5)),
        ms(percentile(samples, 0.9)),
        ms(samples[0]),
        ms(samples[samples.len() - 1]),
    );
}

/// `termesh ARGS` against the node: spawn to exit, and its stdout.
fn cli(target: &Target, args: &[&str]) -> (Duration, String) {
    let start = Instant::now();
    let out = Command::new(BIN)
        .args(args)
        .env("TERMESH_URL", &target.url)
        .env("TERMESH_TOKEN", target.token.as_deref().unwrap_or_default())
        .stdin(Stdio::null())
        .output()
        .expect("run termesh");
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "termesh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (took, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `termesh attach ID` of a session that has ended, without a terminal:
/// spawn to exit (it shows the last screen and exits with the session's
/// code).
fn attach_ended(target: &Target, session: &str, state: &std::path::Path) -> Duration {
    let start = Instant::now();
    let out = Command::new(BIN)
        .args(["attach", "--scrollback", "0", session])
        .env("TERMESH_URL", &target.url)
        .env("TERMESH_TOKEN", target.token.as_deref().unwrap_or_default())
        .env("XDG_STATE_HOME", state)
        .stdin(Stdio::null())
        .output()
        .expect("run termesh attach");
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    took
}

fn spawn_time(program: &str, args: &[&str]) -> Duration {
    let start = Instant::now();
    let status = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .status()
        .expect("spawn");
    assert!(status.success());
    start.elapsed()
}

/// A bare connect: TCP, the WebSocket upgrade, the welcome, the close
/// handshake; no request.
async fn bare_connect(target: &Target) -> Duration {
    let start = Instant::now();
    let client = Client::connect(target).await.expect("connect");
    client.close().await;
    start.elapsed()
}

/// `termesh attach ID` in a fresh 100x30 PTY: spawn until `marker` shows
/// in what it draws; then a detach (Ctrl-] d), waited for.
fn first_paint(target: &Target, session: &str, marker: &str, state: &std::path::Path) -> Duration {
    let pair = native_pty_system()
        .openpty(PtySize {
            rows: 30,
            cols: 100,
            pixel_width: 0,
            pixel_height: 0,
        })
        .unwrap();
    let mut cmd = CommandBuilder::new(BIN);
    cmd.args(["attach", "--scrollback", "0", session]);
    cmd.env("TERMESH_URL", &target.url);
    cmd.env("TERMESH_TOKEN", target.token.as_deref().unwrap_or_default());
    cmd.env("XDG_STATE_HOME", state);
    cmd.env("TERM", "xterm-256color");
    let mut reader = pair.master.try_clone_reader().unwrap();
    let mut writer = pair.master.take_writer().unwrap();
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut child = pair.slave.spawn_command(cmd).unwrap();
    drop(pair.slave);
    let mut seen = Vec::new();
    let painted = loop {
        let chunk = rx
            .recv_timeout(PATIENCE.saturating_sub(start.elapsed()))
            .expect("attach painted the marker in time");
        seen.extend_from_slice(&chunk);
        if String::from_utf8_lossy(&seen).contains(marker) {
            break start.elapsed();
        }
    };
    writer.write_all(b"\x1dd").unwrap();
    writer.flush().unwrap();
    let deadline = Instant::now() + PATIENCE;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        // The PTY's output must be read, or the detach message could
        // block the exit; its end has no event but the drain.
        let _ = rx.recv_timeout(Duration::from_millis(20));
        assert!(Instant::now() < deadline, "attach did not detach");
    }
    painted
}

fn main() {
    let rounds: usize = std::env::var("TERMESH_BENCH_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(30)
        .max(2);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let node = Node::start("");
    let target = node.target.clone();
    let state = tempfile::tempdir().unwrap();

    // The machine's limits, then the commands, each round in turn so they
    // share the machine's noise.
    let (mut true_t, mut version_t, mut bare_t) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ls_t, mut screen_t, mut logs_t, mut new_t, mut kill_t) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let marker = "latency-marker-0123";
    let (_, shown) = cli(
        &target,
        &[
            "new",
            "--",
            "sh",
            "-c",
            &format!("printf '%s\\n' {marker}; exec sleep 100000"),
        ],
    );
    let shown = shown.trim().to_string();
    // Warm-up: the page cache holds the binary, the node has answered.
    for _ in 0..3 {
        cli(&target, &["ls"]);
        rt.block_on(bare_connect(&target));
    }
    while !cli(&target, &["screen", &shown]).1.contains(marker) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..rounds {
        true_t.push(spawn_time("/bin/true", &[]));
        version_t.push(spawn_time(BIN, &["--version"]));
        bare_t.push(rt.block_on(bare_connect(&target)));
        ls_t.push(cli(&target, &["ls"]).0);
        screen_t.push(cli(&target, &["screen", &shown]).0);
        logs_t.push(cli(&target, &["logs", &shown]).0);
        let (took, id) = cli(&target, &["new", "--", "sleep", "1000"]);
        new_t.push(took);
        kill_t.push(cli(&target, &["kill", id.trim()]).0);
    }
    let mut paint_t: Vec<Duration> = (0..rounds)
        .map(|_| first_paint(&target, &shown, marker, state.path()))
        .collect();
    let (_, ended) = cli(&target, &["new", "--", "sh", "-c", "echo ended; exit 3"]);
    let ended = ended.trim().to_string();
    while !cli(&target, &["ls", "--all"]).1.contains("exit 3") {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut ended_t: Vec<Duration> = (0..rounds)
        .map(|_| attach_ended(&target, &ended, state.path()))
        .collect();

    println!("\ncommand latency on loopback, release node, {rounds} rounds each (wall time, spawn to exit)");
    println!("limits of this machine, same run:");
    figures("spawn /bin/true", &mut true_t, "");
    figures(
        "spawn termesh --version",
        &mut version_t,
        "(the binary's own start)",
    );
    figures(
        "TCP+WS connect, welcome, close",
        &mut bare_t,
        "(in-process, no request)",
    );
    println!("commands:");
    figures("termesh ls", &mut ls_t, "(target median < 50 ms)");
    figures(
        "termesh screen ID",
        &mut screen_t,
        "(target median < 50 ms)",
    );
    figures("termesh logs ID", &mut logs_t, "(target median < 50 ms)");
    figures(
        "termesh new -- sleep 1000",
        &mut new_t,
        "(target median < 50 ms)",
    );
    figures("termesh kill ID", &mut kill_t, "(target median < 50 ms)");
    println!("attach (a 100x30 PTY, --scrollback 0):");
    figures(
        "spawn to the marker painted",
        &mut paint_t,
        "(target < 100 ms)",
    );
    figures(
        "to an ended session, to exit",
        &mut ended_t,
        "(no terminal; was 1.8-2 s)",
    );
}
