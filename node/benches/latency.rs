//! Command latency (issue 18), a program, not assertions: the wall time of
//! the real CLI commands run as processes against a release node on
//! loopback (spawn to exit), and attach in a PTY whose output is read as a
//! terminal shows it (`common::pty`): its first paint, a keystroke's echo,
//! and what a flood costs it (wall time, bytes written to the terminal,
//! its CPU time), the renderer beside `--raw`. Each figure sits beside
//! this machine's limits measured in the same run: spawning `/bin/true`,
//! spawning `termesh --version` (the binary's own start), a bare TCP +
//! WebSocket connect, welcome and close from this process, the echo of
//! `cat` in a bare PTY and through the node to an in-process client, and
//! the flood's program in a bare PTY. Last, key to glyph over a slow link
//! (`slow_link`): attach and `attach --predict` through a relay with a
//! 100 ms round trip, beside that round trip and the same key on loopback.
//!
//!     cargo bench -p termesh-node --bench latency
//!
//! `TERMESH_BENCH_ROUNDS` changes the 30 rounds per figure,
//! `TERMESH_BENCH_FLOOD_ROUNDS` the 10 per flood.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
#[path = "latency/slow_link.rs"]
mod slow_link;

use common::pty::{row_text, shows, Pty, PATIENCE};
use common::*;
use portable_pty::CommandBuilder;
use termesh_node::client::{Client, Target};

const BIN: &str = env!("CARGO_BIN_EXE_termesh");
/// Between two keystrokes: a fast typist's pace is 100 ms.
const PAUSE: Duration = Duration::from_millis(20);

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
fn attach_ended(target: &Target, session: &str, state: &Path) -> Duration {
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

/// `termesh attach ARGS ID` in a fresh PTY of `size`: spawn until `done`
/// holds of what the PTY shows; then a detach (Ctrl-] d), waited for.
fn first_paint(
    target: &Target,
    session: &str,
    state: &Path,
    size: (u16, u16),
    args: &[&str],
    done: impl FnMut(&avt::Terminal) -> bool,
) -> Duration {
    let mut pty = Pty::attach(target, session, state, size, args);
    let painted = pty.wait_until("the first paint", done) - pty.started;
    pty.detach();
    painted
}

/// A screen of `cols`x`rows` full of text in 256 colours, a new pen every
/// 6 cells; row 0 starts with `row00`, the last row ends with `marker`.
fn full_screen(cols: usize, rows: usize, marker: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for r in 0..rows {
        let mut text: String = format!("row{r:02} ")
            .chars()
            .chain("coloured text ".chars().cycle())
            .take(cols)
            .collect();
        if r == rows - 1 {
            text.truncate(cols - marker.len());
            text.push_str(marker);
        }
        for (c, ch) in text.chars().enumerate() {
            if c % 6 == 0 {
                let fg = 16 + (r * cols + c) / 6 % 216;
                let bg = 232 + c / 6 % 24;
                out.extend_from_slice(format!("\x1b[38;5;{fg};48;5;{bg}m").as_bytes());
            }
            out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
        }
        out.extend_from_slice(b"\x1b[0m");
        if r < rows - 1 {
            out.extend_from_slice(b"\r\n");
        }
    }
    out
}

/// Types one key into each of `ptys` in turn (after a pause, as a fast
/// typist would: the renderer draws the first change after a quiet spell
/// at once) and times it to its echo on the screen, in `times`. Every 50
/// keys an untimed Enter starts a new row.
fn keystrokes(ptys: &mut [(Pty, String)], times: &mut [Vec<Duration>], timed: bool) {
    for ((pty, row), times) in ptys.iter_mut().zip(times.iter_mut()) {
        if row.len() == 50 {
            row.clear();
            pty.type_keys(b"\r\n");
            pty.wait_until("a new row", |s| row_text(s, s.cursor().row).is_empty());
        }
        std::thread::sleep(PAUSE);
        let key = char::from(b'a' + (row.len() % 26) as u8);
        row.push(key);
        let sent = Instant::now();
        pty.type_keys(&[key as u8]);
        let seen = pty.wait_until("the echo", |s| row_text(s, s.cursor().row) == *row);
        if timed {
            times.push(seen - sent);
        }
    }
}

/// One flood through `termesh attach ARGS`, in a 100x30 PTY: attached
/// to the flood session once it shows `flood-end-{n-1}.`, the key `n`
/// starts flood `n`, which ends with `flood-end-{n}.`. The wall time from
/// the key to that marker on the screen, the bytes written to the
/// terminal meanwhile, and the CPU time the attach spent on them.
fn flood(target: &Target, session: &str, state: &Path, n: usize, args: &[&str]) -> Cost {
    let mut pty = Pty::attach(target, session, state, (100, 30), args);
    pty.wait_for_text(&format!("flood-end-{}.", n - 1));
    let (cpu, bytes) = (pty.cpu(), pty.bytes);
    let start = Instant::now();
    pty.type_keys(format!("{n}\r").as_bytes());
    let end = pty.wait_for_text(&format!("flood-end-{n}."));
    let cost = Cost {
        wall: end - start,
        bytes: pty.bytes - bytes,
        cpu: Some(pty.cpu() - cpu),
    };
    pty.detach();
    cost
}

/// The same flood's floor: its program in a bare 100x30 PTY, read as a
/// terminal would (no termesh).
fn flood_bare(command: &str) -> Cost {
    let mut cmd = CommandBuilder::new("sh");
    cmd.args([
        "-c",
        &format!("{command}; echo flood-end-bare.; exec sleep 100000"),
    ]);
    let mut pty = Pty::spawn(cmd, (100, 30));
    let end = pty.wait_for_text("flood-end-bare.");
    let cost = Cost {
        wall: end - pty.started,
        bytes: pty.bytes,
        cpu: None,
    };
    pty.kill();
    cost
}

/// What one flood cost.
struct Cost {
    wall: Duration,
    bytes: u64,
    /// The attach's CPU time; `None` without an attach.
    cpu: Option<Duration>,
}

/// Median and range of `samples`, in `unit` (a divisor and a name).
fn spread(samples: impl Iterator<Item = f64>, (div, unit): (f64, &str)) -> String {
    let mut v: Vec<f64> = samples.map(|x| x / div).collect();
    v.sort_by(f64::total_cmp);
    let median = v[((v.len() - 1) as f64 * 0.5).round() as usize];
    format!("{median:6.0} [{:.0}-{:.0}] {unit}", v[0], v[v.len() - 1])
}

fn costs(label: &str, costs: &[Cost]) {
    let cpu = match costs.iter().map(|c| c.cpu).collect::<Option<Vec<_>>>() {
        Some(cpu) => spread(cpu.into_iter().map(ms), (1.0, "ms")),
        None => "-".into(),
    };
    println!(
        "  {label:<24} wall {:<22} written {:<24} attach CPU {cpu}",
        spread(costs.iter().map(|c| ms(c.wall)), (1.0, "ms")),
        spread(costs.iter().map(|c| c.bytes as f64), (1e3, "kB")),
    );
}

/// The bytes `command` writes to a PTY (each newline made CR LF).
fn output_bytes(command: &str) -> u64 {
    let out = Command::new("sh").args(["-c", command]).output().unwrap();
    (out.stdout.len() + out.stdout.iter().filter(|&&b| b == b'\n').count()) as u64
}

/// `termesh new --cols C --rows R -- sh -c SCRIPT`: the session's id.
fn new_session(target: &Target, (cols, rows): (u16, u16), script: &str) -> String {
    let (cols, rows) = (cols.to_string(), rows.to_string());
    let args = ["new", "--cols", &cols, "--rows", &rows, "--", "sh", "-c"];
    let (_, id) = cli(target, &[&args[..], &[script]].concat());
    id.trim().to_string()
}

/// Until `termesh screen ID` shows `text`.
fn wait_screen(target: &Target, session: &str, text: &str) {
    let deadline = Instant::now() + PATIENCE;
    while !cli(target, &["screen", session]).1.contains(text) {
        assert!(Instant::now() < deadline, "{session} never showed {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn rounds(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
        .max(2)
}

fn main() {
    let rounds_each = rounds("TERMESH_BENCH_ROUNDS", 30);
    let flood_rounds = rounds("TERMESH_BENCH_FLOOD_ROUNDS", 10);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let node = Node::start("");
    let target = node.target.clone();
    let state = tempfile::tempdir().unwrap();
    commands(&rt, &target, rounds_each);
    paints(&target, state.path(), rounds_each);
    echoes(&rt, &target, state.path(), rounds_each);
    floods(&target, state.path(), flood_rounds);
    slow_link::key_to_glyph(&target, state.path(), rounds_each);
}

/// The CLI commands, beside the machine's limits, each round in turn so
/// they share the machine's noise.
fn commands(rt: &tokio::runtime::Runtime, target: &Target, rounds: usize) {
    let (mut true_t, mut version_t, mut bare_t) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ls_t, mut screen_t, mut logs_t, mut new_t, mut kill_t) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let shown = new_session(target, (80, 24), "echo shown; exec sleep 100000");
    // Warm-up: the page cache holds the binary, the node has answered.
    for _ in 0..3 {
        cli(target, &["ls"]);
        rt.block_on(bare_connect(target));
    }
    wait_screen(target, &shown, "shown");
    for _ in 0..rounds {
        true_t.push(spawn_time("/bin/true", &[]));
        version_t.push(spawn_time(BIN, &["--version"]));
        bare_t.push(rt.block_on(bare_connect(target)));
        ls_t.push(cli(target, &["ls"]).0);
        screen_t.push(cli(target, &["screen", &shown]).0);
        logs_t.push(cli(target, &["logs", &shown]).0);
        let (took, id) = cli(target, &["new", "--", "sleep", "1000"]);
        new_t.push(took);
        kill_t.push(cli(target, &["kill", id.trim()]).0);
    }
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
}

/// Attach's first paint, renderer and `--raw` in turn: a session showing
/// one line in a 100x30 PTY, and a 120x40 session full of coloured text
/// in a 120x40 PTY (the renderer's whole first frame); each session is
/// the PTY's size, so no resize comes first.
fn paints(target: &Target, state: &Path, rounds: usize) {
    let marker = "latency-marker-0123";
    let line = new_session(
        target,
        (100, 30),
        &format!("printf '%s\\n' {marker}; exec sleep 100000"),
    );
    let full_marker = "full-screen-marker";
    let file = state.join("full-screen");
    std::fs::write(&file, full_screen(120, 40, full_marker)).unwrap();
    let full = new_session(
        target,
        (120, 40),
        &format!("cat {}; exec sleep 100000", file.display()),
    );
    wait_screen(target, &line, marker);
    wait_screen(target, &full, full_marker);
    let whole = |s: &avt::Terminal| {
        row_text(s, 0).starts_with("row00 ") && row_text(s, 39).ends_with(full_marker)
    };
    let mut t: [Vec<Duration>; 4] = Default::default();
    for _ in 0..rounds {
        for (i, args) in [&[][..], &["--raw"]].into_iter().enumerate() {
            t[i].push(first_paint(target, &line, state, (100, 30), args, |s| {
                shows(s, marker)
            }));
            t[2 + i].push(first_paint(target, &full, state, (120, 40), args, whole));
        }
    }
    let ended = new_session(target, (80, 24), "echo ended; exit 3");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cli(target, &["ls", "--all"]).1.contains("exit 3") {
        assert!(Instant::now() < deadline, "the session did not end in 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut ended_t: Vec<Duration> = (0..rounds)
        .map(|_| attach_ended(target, &ended, state))
        .collect();
    println!(
        "attach, first paint: spawn until the PTY's screen shows the session (--scrollback 0):"
    );
    let [line_t, line_raw_t, full_t, full_raw_t] = &mut t;
    figures("one line, 100x30", line_t, "(target < 100 ms)");
    figures("one line, 100x30, --raw", line_raw_t, "(pass-through)");
    figures("full 120x40, 256 colours", full_t, "(target < 100 ms)");
    figures("full 120x40, --raw", full_raw_t, "(pass-through)");
    figures(
        "to an ended session, to exit",
        &mut ended_t,
        "(no terminal; was 1.8-2 s)",
    );
}

/// Keystroke to echo on the screen through attach (renderer, `--raw`),
/// beside the same in a bare PTY (no termesh) and through the node to an
/// in-process client (no attach, no PTY on this side); `cat` in a raw
/// PTY echoes in all four.
fn echoes(rt: &tokio::runtime::Runtime, target: &Target, state: &Path, rounds: usize) {
    let script = "stty raw -echo; printf 'ready\\r\\n'; exec cat";
    let mut bare = CommandBuilder::new("sh");
    bare.args(["-c", script]);
    let mut ptys = vec![Pty::spawn(bare, (100, 30))];
    for args in [&[][..], &["--raw"]] {
        // A session each: an attach's keys echo in every attach.
        let session = new_session(target, (100, 30), script);
        ptys.push(Pty::attach(target, &session, state, (100, 30), args));
    }
    let mut ptys: Vec<(Pty, String)> = ptys
        .into_iter()
        .map(|mut pty| {
            pty.wait_for_text("ready");
            (pty, String::new())
        })
        .collect();
    let mut t: Vec<Vec<Duration>> = vec![Vec::new(); ptys.len()];
    for _ in 0..5 {
        keystrokes(&mut ptys, &mut t, false);
    }
    for _ in 0..rounds {
        keystrokes(&mut ptys, &mut t, true);
    }
    let (mut ptys, mut in_process) = (ptys.into_iter(), Vec::new());
    ptys.next().unwrap().0.kill();
    for (pty, _) in ptys {
        pty.detach();
    }
    let (p50, p99) = rt.block_on(common::echo(target, None, rounds.max(100), false));
    in_process.extend([p50, p99]);
    println!(
        "attach, one keystroke to its echo on the PTY's screen ({PAUSE:?} pause before each):"
    );
    println!(
        "  {:<32} median {:7.2}   p99 {:7.2} ms   (limit: no attach, no PTY here)",
        "through the node, in-process",
        ms(in_process[0]),
        ms(in_process[1])
    );
    let [bare_t, view_t, raw_t] = &mut t[..] else {
        unreachable!("three PTYs")
    };
    figures("bare PTY running cat", bare_t, "(limit: no termesh)");
    figures("attach", view_t, "");
    figures("attach --raw", raw_t, "(pass-through)");
}

/// A flood through attach, renderer and `--raw` in turn, each round a
/// fresh attach, beside its program in a bare PTY: wall time, bytes
/// written to the terminal, the attach's CPU time.
fn floods(target: &Target, state: &Path, rounds: usize) {
    // Every row differs from the last: each frame redraws every cell.
    let text = "base64 -w 79 /dev/urandom | head -c 20000000";
    for (name, command) in [
        ("seq 1 200000", "seq 1 200000"),
        ("20 MB of base64, 80-column lines", text),
    ] {
        let session = new_session(
            target,
            (100, 30),
            &format!(
                "stty -echo; echo flood-end-0.; while read n; do {command}; echo flood-end-$n.; done"
            ),
        );
        wait_screen(target, &session, "flood-end-0.");
        let (mut view, mut raw, mut bare) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            view.push(flood(target, &session, state, 2 * round + 1, &[]));
            raw.push(flood(target, &session, state, 2 * round + 2, &["--raw"]));
            bare.push(flood_bare(command));
        }
        println!(
            "attach, a flood: {name} ({:.2} MB to a PTY), a 100x30 PTY, {rounds} rounds, median [min-max]:",
            output_bytes(command) as f64 / 1e6
        );
        costs("bare PTY (limit)", &bare);
        costs("attach", &view);
        costs("attach --raw", &raw);
    }
}
