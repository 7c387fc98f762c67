//! `termesh attach` in a real PTY, through a proxy the test can cut: output
//! shows, input echoes, and after the link drops the client resumes with
//! what it missed and without clearing the screen. What the PTY received
//! is played into an emulator to read the screen back.

mod common;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use common::proxy::Proxy;
use common::*;
use portable_pty::{native_pty_system, CommandBuilder, PtySize};
use termesh_transport::{ClientMsg, CreateRequest};

struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The screen's rows after everything received, on an 80x24 terminal.
    fn rows(&self) -> Vec<String> {
        let mut screen = avt::Terminal::new(80, 24).unwrap();
        screen.feed(self.text().as_str());
        screen
            .screen()
            .visible_lines()
            .map(|l| l.text().trim_end().to_string())
            .collect()
    }

    async fn wait_for(&self, needle: &str) {
        within(PATIENCE, needle, async {
            while !self.rows().iter().any(|r| r.contains(needle)) {
                poll_pause().await;
            }
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_shows_output_echoes_input_and_resumes_without_a_clear() {
    let node = TestNode::start();
    let session = node
        .create_with(CreateRequest {
            command: Some(vec![
                "bash".into(),
                "--norc".into(),
                "--noprofile".into(),
                "-i".into(),
            ]),
            env: Some([("PS1".to_string(), "$ ".to_string())].into()),
            cols: Some(80),
            rows: Some(24),
            ..Default::default()
        })
        .await
        .id;
    let proxy = Proxy::start(node.node.addr()).await;

    let pair = native_pty_system()
        .openpty(PtySize {
            rows: 24,
            cols: 80,
            pixel_width: 0,
            pixel_height: 0,
        })
        .unwrap();
    let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_termesh"));
    cmd.args([
        "attach",
        &session,
        "--url",
        &format!("http://{}", proxy.addr),
        "--token",
        OPERATOR,
    ]);
    cmd.env("TERM", "xterm");
    let mut child = pair.slave.spawn_command(cmd).unwrap();
    drop(pair.slave);
    let mut reader = pair.master.try_clone_reader().unwrap();
    let mut keys = pair.master.take_writer().unwrap();
    let captured = Captured(Arc::default());
    let sink = captured.0.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });

    captured.wait_for("$").await;
    keys.write_all(b"echo hi-$((1+2))\r").unwrap();
    captured.wait_for("hi-3").await;

    // Cut the link; meanwhile the session prints, and the user types.
    assert!(
        proxy.cut() >= 1,
        "the attach connection went through the proxy"
    );
    let mut op = node.client(OPERATOR).await;
    op.send(&ClientMsg::Input {
        session: session.clone(),
        data: b"echo missed-$((3+4))\r".to_vec(),
    })
    .await
    .unwrap();
    op.close().await;
    keys.write_all(b"echo after-$((2+3))\r").unwrap();
    captured.wait_for("missed-7").await;
    captured.wait_for("after-5").await;

    let text = captured.text();
    assert_eq!(
        text.matches("\x1b[2J").count(),
        1,
        "only the first frame clears the screen: a resume draws what changed"
    );
    let rows = captured.rows();
    let at = |want: &str| rows.iter().position(|r| r == want);
    assert!(
        at("missed-7") < at("after-5"),
        "output missed while away comes first, in order: {rows:?}"
    );
    for want in ["hi-3", "missed-7", "after-5"] {
        assert_eq!(
            rows.iter().filter(|r| r.as_str() == want).count(),
            1,
            "{want} once on screen: {rows:?}"
        );
    }

    // Detach: the client leaves, the session keeps running.
    keys.write_all(&[0x1d, b'd']).unwrap();
    let status = within(PATIENCE, "attach to exit", async {
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            poll_pause().await;
        }
    })
    .await;
    assert!(status.success(), "{status:?}");
    within(PATIENCE, "the detach note", async {
        while !captured.text().contains("[termesh: detached from") {
            poll_pause().await;
        }
    })
    .await;
    let info = node.info(&session).await.unwrap();
    assert_eq!(info.status, termesh_transport::SessionStatus::Running);
}
