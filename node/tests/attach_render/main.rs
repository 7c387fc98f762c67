//! `termesh attach` as a renderer, driven in tmux panes as a person would:
//! every way out leaves the outer pane exactly as it was (scrollback and
//! screen, title, modes); viewers of other sizes each see the session's
//! screen at their own size, with real programs (vim with splits, less,
//! top); the scroll mode finds a line printed 5,000 lines before; a node
//! that stops is said to have stopped. Modes tmux does not report (cursor
//! style, modifyOtherKeys, kitty flags) are read from a PTY's bytes.

#[path = "../common/mod.rs"]
mod common;

mod input;
mod scroll;

use std::io::Read;
use std::sync::{Arc, Mutex};

use common::binary::BinaryNode;
use common::tmux::{wait_on, Tmux};
use common::*;
use portable_pty::{native_pty_system, CommandBuilder, PtySize};
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg};

const BIN: &str = env!("CARGO_BIN_EXE_termesh");

/// Every mode a TUI may set, a title, then a marker.
const EVERY_MODE: &str = "printf '\\033[?1049h\\033[?1000h\\033[?1002h\\033[?1006h\\033[?1004h\\033[?2004h\\033[?1h\\033=\\033[>4;2m\\033[>1u\\033[6 q\\033]2;prog-title\\007\\033[?25lTUI-READY'; exec sleep 100000";

const FLAGS: &str = "#{alternate_on} #{cursor_flag} #{mouse_any_flag} #{mouse_sgr_flag} #{keypad_flag} #{keypad_cursor_flag} #{insert_flag} #{wrap_flag}";

/// A pane running an interactive shell that reaches the node.
fn shell_pane(url: &str, token: &str, cols: u16, rows: u16) -> Tmux {
    Tmux::start(
        cols,
        rows,
        "bash --norc --noprofile",
        &[
            ("TERMESH_URL", url),
            ("TERMESH_TOKEN", token),
            ("PS1", "$ "),
        ],
    )
}

/// What a person would notice of the outer pane.
#[derive(Debug, PartialEq)]
struct Seen {
    lines: Vec<String>,
    title: String,
    flags: String,
}

fn seen(pane: &Tmux) -> Seen {
    Seen {
        lines: pane.all_lines(),
        title: pane.show("#{pane_title}"),
        flags: pane.show(FLAGS),
    }
}

/// Gives the pane history beyond its screen and a title of its own.
async fn prepare(pane: &Tmux) -> Seen {
    pane.wait_for("$").await;
    pane.type_text("printf '\\033]2;outer-title\\007'; seq 1 60; echo MARKER");
    pane.keys(&["Enter"]);
    pane.wait_until("the prompt after MARKER", |t| {
        t.trim_end().ends_with("MARKER\n$")
    })
    .await;
    seen(pane)
}

/// Runs `termesh attach ARGS` at the pane's prompt.
fn run_attach(pane: &Tmux, args: &str) {
    pane.type_text(&format!("{BIN} attach {args}; echo EXIT=$?"));
    pane.keys(&["Enter"]);
}

/// The exit code the pane's shell printed after the attach.
async fn attach_exit(pane: &Tmux) -> i32 {
    let text = pane
        .wait_until("the attach to end", |t| {
            t.lines().any(|l| l.starts_with("EXIT="))
        })
        .await;
    let line = text.lines().find(|l| l.starts_with("EXIT=")).unwrap();
    line[5..].trim().parse().expect("an exit code")
}

/// The pane after the attach: the same lines up to the attach command,
/// the same title and modes.
fn assert_restored(before: &Seen, after: &Seen, how: &str) {
    assert_eq!(after.title, before.title, "{how}: the title");
    assert_eq!(after.flags, before.flags, "{how}: the modes ({FLAGS})");
    let n = before.lines.len();
    assert!(after.lines.len() > n, "{how}: {:?}", after.lines);
    assert_eq!(
        after.lines[..n - 1],
        before.lines[..n - 1],
        "{how}: the scrollback and screen above the command"
    );
    assert!(
        after.lines[n - 1].starts_with("$ ") && after.lines[n - 1].contains(" attach "),
        "{how}: {:?}",
        after.lines[n - 1]
    );
    assert!(
        after.lines[n..].iter().any(|l| l.starts_with("[termesh:")),
        "{how}: a note below: {:?}",
        after.lines
    );
}

async fn every_mode_session(node: &TestNode, name: &str) -> String {
    node.create_with(CreateRequest {
        command: Some(vec!["sh".into(), "-c".into(), EVERY_MODE.into()]),
        name: Some(name.into()),
        cols: Some(120),
        rows: Some(30),
        ..Default::default()
    })
    .await
    .id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_out_leaves_the_outer_pane_as_it_was() {
    let node = TestNode::start();
    let pane = shell_pane(&node.url(), OPERATOR, 80, 24);
    for how in ["detach", "TERM", "HUP", "INT", "exited", "removed"] {
        let before = prepare(&pane).await;
        let name = format!("modes-{}", how.to_lowercase());
        let session = every_mode_session(&node, &name).await;
        run_attach(&pane, &name);
        pane.wait_for("TUI-READY").await;
        // While attached: the program's modes and a title naming the session.
        let title = format!("{name}: prog-title");
        wait_on("the program's modes on the pane", || {
            pane.show("#{alternate_on} #{mouse_any_flag} #{keypad_cursor_flag} #{pane_title}")
                == format!("1 1 1 {title}")
        })
        .await;
        assert_eq!(pane.show("#{cursor_flag}"), "0", "the cursor hidden");
        let want = match how {
            "detach" => {
                pane.keys(&["C-]", "d"]);
                0
            }
            "TERM" | "HUP" | "INT" => {
                let n = match how {
                    "TERM" => nix::sys::signal::Signal::SIGTERM,
                    "HUP" => nix::sys::signal::Signal::SIGHUP,
                    _ => nix::sys::signal::Signal::SIGINT,
                };
                let pid = pane.descendant("attach").expect("the attach runs");
                let pid = nix::unistd::Pid::from_raw(pid);
                nix::sys::signal::kill(pid, n).unwrap();
                128 + n as i32
            }
            "exited" => {
                let mut op = node.client(OPERATOR).await;
                op.request(|id| ClientMsg::Kill {
                    id,
                    session: session.clone(),
                    signal: Some("TERM".into()),
                })
                .await
                .unwrap();
                143
            }
            _ => {
                let mut op = node.client(OPERATOR).await;
                op.request(|id| ClientMsg::Remove {
                    id,
                    session: session.clone(),
                    purge: None,
                })
                .await
                .unwrap();
                1
            }
        };
        assert_eq!(attach_exit(&pane).await, want, "{how}");
        pane.wait_until("the prompt", |t| t.trim_end().ends_with("\n$"))
            .await;
        let after = seen(&pane);
        assert_restored(&before, &after, how);
        if how != "exited" {
            assert!(
                !after.lines[before.lines.len()..]
                    .iter()
                    .any(|l| l.contains("TUI-READY")),
                "{how}: the session's screen is not left in the scrollback"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stops_is_said_to_have_stopped_and_the_attach_waits() {
    let node = BinaryNode::start("");
    let target = node.target(OPERATOR);
    let session = termesh_node::client::commands::new(
        &target,
        CreateRequest {
            command: Some(vec!["sh".into(), "-c".into(), EVERY_MODE.into()]),
            ..Default::default()
        },
    )
    .await
    .unwrap()
    .id;
    let pane = shell_pane(&node.url, OPERATOR, 80, 24);
    let before = prepare(&pane).await;
    run_attach(&pane, &session);
    pane.wait_for("TUI-READY").await;
    let addr = node.addr.to_string();
    let dir = tokio::task::spawn_blocking(move || node.stop_keeping_dir())
        .await
        .unwrap();
    // The status row says so (detach hint first) and the attach waits.
    let text = pane.wait_for("node stopped").await;
    let status = text.lines().find(|l| l.contains("node stopped")).unwrap();
    assert!(status.starts_with("[termesh] ^] d detaches"), "{status}");
    // Back on the same data dir: the program died with it (`lost`).
    let node = BinaryNode::start_in(dir, &addr, "");
    assert_eq!(attach_exit(&pane).await, 1);
    pane.wait_until("the prompt", |t| t.trim_end().ends_with("\n$"))
        .await;
    let after = seen(&pane);
    assert_restored(&before, &after, "lost");
    assert!(after.lines.iter().any(|l| l.contains("was lost")));
    drop(node);
}

/// The session's screen as the node renders it: cells per row, cursor.
async fn session_screen(node: &TestNode, session: &str) -> (Vec<Vec<char>>, (usize, usize)) {
    let mut c = node.client(OPERATOR).await;
    let reply = c
        .request(|id| ClientMsg::Screen {
            id,
            session: session.into(),
            scrollback: Some(0),
        })
        .await
        .unwrap();
    let ServerMsg::Snapshot {
        cols, rows, data, ..
    } = reply
    else {
        panic!("a snapshot: {reply:?}")
    };
    let mut t = avt::Terminal::new(cols.into(), rows.into()).unwrap();
    t.feed(String::from_utf8_lossy(&data).as_ref());
    let cells = t
        .screen()
        .visible_lines()
        .map(|l| {
            l.cells()
                .iter()
                .filter(|c| c.width() > 0)
                .map(|c| c.char())
                .collect()
        })
        .collect();
    let cursor = t.cursor();
    (cells, (cursor.row, cursor.col))
}

/// What a pane of `cols` x `rows` should show of `screen`: all of it
/// top-left with its edges marked, or a window at the cursor over a
/// notice row.
fn expected(screen: &[Vec<char>], cursor: (usize, usize), cols: usize, rows: usize) -> Vec<String> {
    let (srows, scols) = (screen.len(), screen[0].len());
    let trim = |s: String| s.trim_end().to_string();
    if scols <= cols && srows <= rows {
        let edge = if scols < cols { "│" } else { "" };
        let mut out: Vec<String> = screen
            .iter()
            .map(|r| trim(format!("{}{edge}", r.iter().collect::<String>())))
            .collect();
        if srows < rows {
            let corner = if scols < cols { "┘" } else { "" };
            out.push(format!("{}{corner}", "─".repeat(scols)));
        }
        return out;
    }
    let height = rows - 1;
    let top = (cursor.0 + 1)
        .saturating_sub(height)
        .min(srows.saturating_sub(height));
    let left = (cursor.1 + 1)
        .saturating_sub(cols)
        .min(scols.saturating_sub(cols));
    screen[top..(top + height).min(srows)]
        .iter()
        .map(|r| trim(r.iter().skip(left).take(cols).collect()))
        .collect()
}

/// Waits until `pane` shows `session` as `expected` says (the program may
/// be redrawing: both are read again each time).
async fn wait_matches(
    node: &TestNode,
    session: &str,
    pane: &Tmux,
    cols: usize,
    rows: usize,
    what: &str,
) {
    let mut last = (Vec::new(), Vec::new());
    let done = tokio::time::timeout(PATIENCE, async {
        loop {
            let (screen, cursor) = session_screen(node, session).await;
            let want = expected(&screen, cursor, cols, rows);
            let got: Vec<String> = pane
                .screen()
                .into_iter()
                .map(|l| l.trim_end().to_string())
                .collect();
            // A window over a larger session has a notice row.
            let windowed = screen.len() > rows || screen[0].len() > cols;
            if got.len() >= want.len()
                && got[..want.len()] == want[..]
                && (!windowed || got[rows - 1].starts_with("[termesh]"))
            {
                return;
            }
            last = (want, got);
            poll_pause().await;
        }
    })
    .await;
    assert!(
        done.is_ok(),
        "{what} at {cols}x{rows}: wanted\n{}\ngot\n{}",
        last.0.join("\n"),
        last.1.join("\n")
    );
}

async fn type_in(op: &mut termesh_node::client::Client, session: &str, text: &str) {
    op.send(&ClientMsg::Input {
        session: session.into(),
        data: text.as_bytes().to_vec(),
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewers_of_other_sizes_each_see_the_session_at_their_size() {
    let node = TestNode::start();
    let session = shell_session(&node, 70, 20).await;
    let url = node.url();
    let env = [("TERMESH_URL", url.as_str()), ("TERMESH_TOKEN", VIEWER)];
    let cmd = format!("{BIN} attach --read-only {session}");
    let big = Tmux::start(100, 30, &cmd, &env);
    let small = Tmux::start(50, 12, &cmd, &env);
    let mut op = node.client(OPERATOR).await;
    let programs = [
        (
            "long lines and erases",
            "printf '%0150d\\n' 0; printf '\\033[44mBLUE\\033[K\\033[0m\\n'; echo END\r",
            "",
        ),
        (
            "vim with splits",
            "vim -u NONE -N -c split -c vsplit /etc/passwd\r",
            ":qa!\r",
        ),
        ("less", "less /etc/services\r", "q"),
        ("top", "top -d 1\r", "q"),
    ];
    for (what, start, stop) in programs {
        type_in(&mut op, &session, start).await;
        for (pane, cols, rows) in [(&big, 100, 30), (&small, 50, 12)] {
            wait_matches(&node, &session, pane, cols, rows, what).await;
        }
        if !stop.is_empty() {
            type_in(&mut op, &session, stop).await;
        }
        type_in(&mut op, &session, "clear\r").await;
    }
    // A viewer that takes the size shows the session whole, nothing stale.
    let taker = Tmux::start(
        64,
        16,
        &format!("{BIN} attach {session}"),
        &[("TERMESH_URL", &url), ("TERMESH_TOKEN", OPERATOR)],
    );
    node.wait_info(&session, "the new size", |s| (s.cols, s.rows) == (64, 16))
        .await;
    type_in(&mut op, &session, "seq 1 30\r").await;
    wait_matches(&node, &session, &taker, 64, 16, "after taking the size").await;
    for pane in [&big, &small, &taker] {
        pane.keys(&["C-]", "d"]);
        assert_eq!(pane.exit_code().await, 0);
    }
}

/// A PTY running `termesh attach`, its output kept.
struct PtyAttach {
    out: Arc<Mutex<Vec<u8>>>,
    keys: Box<dyn std::io::Write + Send>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
}

impl PtyAttach {
    fn start(node: &TestNode, session: &str) -> PtyAttach {
        PtyAttach::start_at(&node.url(), session, &[])
    }

    /// `termesh attach SESSION ARGS` in an 80x24 PTY, through `url`.
    fn start_at(url: &str, session: &str, args: &[&str]) -> PtyAttach {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: 24,
                cols: 80,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
        let mut cmd = CommandBuilder::new(BIN);
        cmd.args(["attach", session, "--url", url, "--token", OPERATOR]);
        cmd.args(args);
        cmd.env("TERM", "xterm");
        let child = pair.slave.spawn_command(cmd).unwrap();
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().unwrap();
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let keys = pair.master.take_writer().unwrap();
        PtyAttach { out, keys, child }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    async fn wait_for(&self, needle: &str) {
        within(PATIENCE, needle, async {
            while !self.text().contains(needle) {
                poll_pause().await;
            }
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_d_takes_the_session_from_other_attaches_but_not_from_viewers() {
    let node = TestNode::start();
    let session = shell_session(&node, 120, 30).await;
    let url = node.url();
    let env = [("TERMESH_URL", url.as_str()), ("TERMESH_TOKEN", OPERATOR)];
    let others = [
        Tmux::start(80, 24, &format!("{BIN} attach {session}"), &env),
        Tmux::start(90, 30, &format!("{BIN} attach --read-only {session}"), &env),
    ];
    for pane in &others {
        pane.wait_for("S>").await;
    }
    // A console-like viewer of the stream.
    let mut viewer = node.client(VIEWER).await;
    subscribe(&mut viewer, &session, None, 1 << 20)
        .await
        .unwrap();

    let taker = Tmux::start(70, 20, &format!("{BIN} attach -d {session}"), &env);
    for pane in &others {
        assert_eq!(pane.exit_code().await, 0);
        assert!(
            pane.text().contains("another terminal took it (attach -d)"),
            "{}",
            pane.text()
        );
    }
    taker.type_text("echo taken-$((6*7))");
    taker.keys(&["Enter"]);
    taker.wait_for("taken-42").await;
    // The viewer stayed and sees what the taker typed.
    let mut stream = Stream::new(1 << 20);
    pump_until(&mut viewer, &session, &mut stream, true, |s| {
        String::from_utf8_lossy(&s.data).contains("taken-42")
    })
    .await
    .unwrap();
    taker.keys(&["C-]", "d"]);
    assert_eq!(taker.exit_code().await, 0);
}

/// The screen `bytes` draw on an 80x24 terminal, with each cell's
/// underline.
fn drawn(bytes: &[u8]) -> Vec<Vec<(char, bool)>> {
    let mut t = avt::Terminal::new(80, 24).unwrap();
    t.feed(String::from_utf8_lossy(bytes).as_ref());
    t.screen()
        .visible_lines()
        .map(|l| {
            l.cells()
                .iter()
                .map(|c| (c.char(), c.pen().is_underline()))
                .collect()
        })
        .collect()
}

fn row_text(row: &[(char, bool)]) -> String {
    row.iter()
        .map(|c| c.0)
        .collect::<String>()
        .trim_end()
        .to_string()
}

async fn shell_session(node: &TestNode, cols: u64, rows: u64) -> String {
    let session = node
        .create_with(CreateRequest {
            command: Some(vec![
                "bash".into(),
                "--norc".into(),
                "--noprofile".into(),
                "-i".into(),
            ]),
            env: Some([("PS1".to_string(), "S> ".to_string())].into()),
            cols: Some(cols),
            rows: Some(rows),
            ..Default::default()
        })
        .await
        .id;
    wait_output(node, &session, "S> ").await;
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_grows_taller_is_drawn_as_the_node_has_it() {
    // Taller, a terminal pulls rows back from its history: the node's
    // model does, and a viewer must show the same rows.
    let node = TestNode::start();
    let session = shell_session(&node, 80, 24).await;
    let mut op = node.client(OPERATOR).await;
    type_in(&mut op, &session, "seq 1 100\r").await;
    wait_output(&node, &session, "100\r\n").await;
    let pane = Tmux::start(
        90,
        40,
        &format!("{BIN} attach --read-only {session}"),
        &[("TERMESH_URL", &node.url()), ("TERMESH_TOKEN", VIEWER)],
    );
    wait_matches(&node, &session, &pane, 90, 40, "at first").await;
    for (cols, rows) in [(80, 10), (80, 30)] {
        op.send(&ClientMsg::Resize {
            session: session.clone(),
            cols,
            rows,
        })
        .await
        .unwrap();
        node.wait_info(&session, "the size", |s| {
            (u64::from(s.cols), u64::from(s.rows)) == (cols, rows)
        })
        .await;
        wait_matches(&node, &session, &pane, 90, 40, "after a resize").await;
    }
    pane.keys(&["C-]", "d"]);
    assert_eq!(pane.exit_code().await, 0);
}

/// Asks for the mouse, draws `row N` on every row (again at every
/// resize, cursor on the last row), and shows what it reads, a report
/// whole (a read's timeout may cut one in two).
const MOUSE_PROGRAM: &str = r#"stty raw -echo
draw() { s=$(stty size); r=${s% *}; printf '\033[H\033[2J'; i=0; while [ $i -lt $r ]; do printf '\033[%d;1Hrow %d' $((i+1)) $i; i=$((i+1)); done; printf '\033[%d;1H' $r; }
trap draw WINCH
printf '\033[?1000h\033[?1006h'; draw
b=; while true; do k=; IFS= read -r -s -t 0.2 -n 64 -d '' k; b="$b$k"; case $b in *M) printf 'GOT %q\r\n' "$b"; b=;; esac; done"#;
