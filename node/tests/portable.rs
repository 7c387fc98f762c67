//! Snapshots in the portable subset (PROTOCOL.md section 7), checked with
//! emulators other than the node's own: the `vt100` crate and tmux. A
//! program draws boxes, 256-colour and truecolour text, wide characters and
//! an alternate screen over a primary one, and hides the cursor; every
//! surface's snapshot (WebSocket reply and subscription, raw endpoint, REST,
//! `termesh attach` in a tmux pane) draws the same screen as the live
//! output did.

mod common;

use std::process::Command;

use common::*;
use futures_util::StreamExt;
use termesh_actors::session::portable::is_portable;
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg};

const COLS: u16 = 60;
const ROWS: u16 = 12;

/// What the program prints (through the PTY it becomes the live output).
const DRAWING: &str = concat!(
    "primary: \x1b[38;5;208morange\x1b[0m \x1b[38;2;10;200;30mtrue\x1b[0m 界面 wide\r\n",
    "+------------------------+\r\n",
    "|\x1b[1;4mbold under\x1b[0m              |\r\n",
    "+------------------------+\r\n",
    "\x1b[?1049h\x1b[H\x1b[2J",
    "alt: +==========================+\r\n",
    "\x1b[48;5;17m\x1b[38;2;255;100;0m colours on alt \x1b[0m 界界界界界界界界\r\n",
    "\x1b[7m          \x1b[0m|\x1b[3;20H*\x1b[?25l",
);

/// Every cell's look, as an emulator reports it, row by row (a cell never
/// written and a blank one look the same).
fn cells(screen: &vt100::Screen) -> Vec<String> {
    (0..ROWS)
        .map(|r| {
            (0..COLS)
                .map(|c| {
                    let cell = screen.cell(r, c).unwrap();
                    let text = match cell.contents() {
                        "" if !cell.is_wide_continuation() => " ",
                        text => text,
                    };
                    format!(
                        "[{}{:?}{:?}{}{}{}]",
                        text,
                        cell.fgcolor(),
                        cell.bgcolor(),
                        cell.bold() as u8,
                        cell.underline() as u8,
                        cell.inverse() as u8
                    )
                })
                .collect()
        })
        .collect()
}

/// Fails naming the first row that differs.
fn same_rows(got: &[String], want: &[String], what: &str) {
    for (row, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g, w, "{what}: row {row}");
    }
}

fn vt100_of(bytes: &[u8]) -> vt100::Parser {
    let mut p = vt100::Parser::new(ROWS.try_into().unwrap(), COLS.try_into().unwrap(), 0);
    p.process(bytes);
    p
}

/// A tmux server of this test's own, killed (only it) on drop.
struct Tmux {
    socket: String,
    dir: tempfile::TempDir,
}

impl Tmux {
    fn start() -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tmux.conf"), "set -g status off\n").unwrap();
        Tmux {
            socket: format!("termesh-test-{}", std::process::id()),
            dir,
        }
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .arg("-f")
            .arg(self.dir.path().join("tmux.conf"))
            .args(args)
            .output()
            .expect("tmux runs (install it: apt-get install tmux)");
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A pane of COLS x ROWS running `command`.
    fn pane(&self, name: &str, command: &str) {
        self.run(&[
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            &COLS.to_string(),
            "-y",
            &ROWS.to_string(),
            command,
        ]);
    }

    /// The pane's screen with its colours (`-a`: the primary screen held
    /// beneath an active alternate one).
    fn capture(&self, name: &str, beneath: bool) -> String {
        let mut args = vec!["capture-pane", "-p", "-e", "-t", name];
        if beneath {
            args.push("-a");
        }
        self.run(&args)
    }

    fn flag(&self, name: &str, format: &str) -> String {
        self.run(&["display", "-p", "-t", name, format])
            .trim()
            .to_string()
    }

    fn file(&self, name: &str, data: &[u8]) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, data).unwrap();
        path.display().to_string()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

async fn wait_pane(tmux: &Tmux, name: &str, needle: &str) {
    within(PATIENCE, needle, async {
        while !tmux.capture(name, false).contains(needle) {
            poll_pause().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_draw_the_live_screen_in_other_emulators() {
    let node = TestNode::start();
    let tmux = Tmux::start();
    let drawing = tmux.file("drawing", DRAWING.as_bytes());
    let session = node
        .create_with(CreateRequest {
            command: Some(vec![
                "sh".into(),
                "-c".into(),
                format!("cat {drawing}; echo; exec sleep 1000"),
            ]),
            cols: Some(COLS.into()),
            rows: Some(ROWS.into()),
            ..Default::default()
        })
        .await
        .id;
    // The drawing and the `echo`'s newline after it: the whole output, so
    // the snapshots below cannot be ahead of `live`.
    let live = wait_output(&node, &session, "\x1b[?25l\r\n").await;
    let mut c = node.client(VIEWER).await;

    // Every surface's snapshot.
    let ws_screen = match c
        .request(|id| ClientMsg::Screen {
            id,
            session: session.clone(),
            scrollback: None,
        })
        .await
        .unwrap()
    {
        ServerMsg::Snapshot { data, .. } => data,
        other => panic!("{other:?}"),
    };
    subscribe(&mut c, &session, None, 1 << 20).await.unwrap();
    let ws_sub = match next(&mut c).await {
        ServerMsg::Snapshot { data, .. } => data,
        other => panic!("{other:?}"),
    };
    let url = format!("{}/api/v1/sessions/{session}/screen", node.url());
    let rest: serde_json::Value = serde_json::from_str(&http_get(&url, VIEWER).await).unwrap();
    let rest = rest["data"].as_str().unwrap().as_bytes().to_vec();
    let raw_url = format!(
        "ws://{}/sessions/{session}/raw?token={VIEWER}",
        node.node.addr()
    );
    let (mut raw_ws, _) = tokio_tungstenite::connect_async(raw_url).await.unwrap();
    let raw = match within(PATIENCE, "the raw snapshot", raw_ws.next()).await {
        Some(Ok(tokio_tungstenite::tungstenite::Message::Binary(data))) => data,
        other => panic!("{other:?}"),
    };
    for (surface, data) in [
        ("screen", &ws_screen),
        ("subscribe", &ws_sub),
        ("REST", &rest),
        ("raw", &raw),
    ] {
        assert!(
            is_portable(&String::from_utf8_lossy(data)),
            "{surface} snapshot uses sequences outside the portable subset: {:?}",
            String::from_utf8_lossy(data)
        );
    }

    // vt100: the snapshot draws what the live output drew.
    let mut from_live = vt100_of(live.as_bytes());
    let mut from_snap = vt100_of(&ws_screen);
    same_rows(
        &cells(from_snap.screen()),
        &cells(from_live.screen()),
        "vt100 draws the snapshot differently",
    );
    assert!(from_snap.screen().alternate_screen());
    assert!(from_snap.screen().hide_cursor());
    assert_eq!(
        from_snap.screen().cursor_position(),
        from_live.screen().cursor_position()
    );
    from_live.process(b"\x1b[?1049l");
    from_snap.process(b"\x1b[?1049l");
    same_rows(
        &cells(from_snap.screen()),
        &cells(from_live.screen()),
        "the primary screen beneath differs",
    );

    // tmux: the live output, the snapshot, and `termesh attach --raw` (the
    // pass-through; the renderer draws on its own alternate screen).
    let live_file = tmux.file("live", live.as_bytes());
    let snap_file = tmux.file("snap", &ws_screen);
    tmux.pane("live", &format!("cat {live_file}; exec sleep 1000"));
    tmux.pane("snap", &format!("cat {snap_file}; exec sleep 1000"));
    let attach = format!(
        "TERMESH_URL={} TERMESH_TOKEN={VIEWER} {} attach --raw --scrollback 0 {}; sleep 1000",
        node.url(),
        env!("CARGO_BIN_EXE_termesh"),
        session,
    );
    tmux.pane("attach", &attach);
    for pane in ["live", "snap", "attach"] {
        wait_pane(&tmux, pane, "colours on alt").await;
    }
    let want = tmux.capture("live", false);
    assert!(
        want.contains("38;5;208") || want.contains("colours"),
        "{want}"
    );
    for pane in ["snap", "attach"] {
        assert_eq!(tmux.capture(pane, false), want, "tmux pane {pane}");
        assert_eq!(
            tmux.capture(pane, true),
            tmux.capture("live", true),
            "the primary beneath, tmux pane {pane}"
        );
        for flag in [
            "#{alternate_on}",
            "#{cursor_flag}",
            "#{cursor_x},#{cursor_y}",
        ] {
            assert_eq!(
                tmux.flag(pane, flag),
                tmux.flag("live", flag),
                "{flag} in pane {pane}"
            );
        }
    }
    assert_eq!(
        tmux.flag("snap", "#{cursor_flag}"),
        "0",
        "the cursor is hidden"
    );
}
