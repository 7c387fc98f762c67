//! Keys and the mouse through the attach: keyboard protocols and cursor style, predictive echo, mouse reports.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyboard_protocols_and_cursor_style_are_passed_undone_and_sent_again() {
    let node = TestNode::start();
    let session = every_mode_session(&node, "keys").await;
    for round in ["first", "again"] {
        let mut pty = PtyAttach::start(&node, &session);
        pty.wait_for("TUI-READY").await;
        let on = pty.text();
        for seq in [
            "\x1b[>4;2m",
            "\x1b[>1u",
            "\x1b[6 q",
            "\x1b[22;0t",
            "\x1b]2;keys: prog-title\x07",
        ] {
            assert!(on.contains(seq), "{round}: {seq:?} sent");
        }
        std::io::Write::write_all(&mut pty.keys, &[0x1d, b'd']).unwrap();
        pty.wait_for("[termesh: detached").await;
        within(PATIENCE, "the attach to exit", async {
            while pty.child.try_wait().unwrap().is_none() {
                poll_pause().await;
            }
        })
        .await;
        let all = pty.text();
        // Each one is undone after it was last set.
        for (set, unset) in [
            ("\x1b[>4;2m", "\x1b[>4;0m"),
            ("\x1b[>1u", "\x1b[<u"),
            ("\x1b[6 q", "\x1b[0 q"),
            ("\x1b[22;0t", "\x1b[23;0t"),
            ("\x1b[?1000h", "\x1b[?1000l"),
            ("\x1b[?2004h", "\x1b[?2004l"),
            ("\x1b[?1049h", "\x1b[?1049l"),
        ] {
            let last_set = all.rfind(set).unwrap();
            assert!(
                all[last_set..].contains(unset),
                "{round}: {set:?} undone by {unset:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predictive_echo_draws_keys_at_once_and_takes_back_what_is_not_echoed() {
    let node = TestNode::start();
    let session = shell_session(&node, 80, 24).await;
    let proxy = common::proxy::Proxy::start(node.node.addr()).await;
    // A slow link: the echo of a key comes back 600 ms after it went.
    proxy.delay(std::time::Duration::from_millis(300));
    let url = format!("http://{}", proxy.addr);
    let PtyAttach { out, mut keys, .. } = PtyAttach::start_at(&url, &session, &["--predict"]);
    let screen = || drawn(&out.lock().unwrap());
    let prompt_row = || screen().iter().rposition(|r| row_text(r).starts_with("S>"));
    within(PATIENCE, "the prompt", async {
        while prompt_row().is_none() {
            poll_pause().await;
        }
    })
    .await;
    // Keys typed one at a time until the round trip is known: then a key
    // shows underlined (a guess) before its echo, and plain once echoed.
    let mut guessed = false;
    let count_a = || {
        let s = screen();
        s[prompt_row().unwrap()]
            .iter()
            .filter(|c| c.0 == 'a')
            .count()
    };
    for _ in 0..40 {
        let before = count_a();
        std::io::Write::write_all(&mut keys, b"a").unwrap();
        let typed = within(PATIENCE, "the key drawn", async {
            loop {
                let s = screen();
                let row = &s[prompt_row().unwrap()];
                let drawn: Vec<bool> = row.iter().filter(|c| c.0 == 'a').map(|c| c.1).collect();
                if drawn.len() > before {
                    return drawn[before];
                }
                poll_pause().await;
            }
        })
        .await;
        if typed {
            guessed = true;
            break;
        }
        // Let the echo land before the next key.
        wait_on("the echo", || {
            let s = screen();
            s[prompt_row().unwrap()].iter().all(|c| !c.1)
        })
        .await;
    }
    assert!(guessed, "no key was drawn ahead of its echo");
    wait_on("the guesses confirmed by the echo", || {
        let s = screen();
        s[prompt_row().unwrap()].iter().all(|c| !c.1)
    })
    .await;
    // A password prompt: nothing is echoed, the guesses go away.
    std::io::Write::write_all(&mut keys, b"\x15read -s PW; echo got-$PW\r").unwrap();
    wait_output(&node, &session, "read -s PW").await;
    // Past the echo of Enter, so guessing resumes.
    wait_on("the command's echo", || {
        screen().iter().any(|r| row_text(r).contains("read -s PW"))
    })
    .await;
    std::io::Write::write_all(&mut keys, b"hunter2").unwrap();
    wait_on("the unechoed guesses taken back", || {
        let s = screen();
        let text: String = s.iter().map(|r| row_text(r)).collect::<Vec<_>>().join("\n");
        !text.contains("hunter2") && s.iter().all(|r| r.iter().all(|c| !c.1))
    })
    .await;
    std::io::Write::write_all(&mut keys, b"\r").unwrap();
    wait_on("the password read", || {
        screen().iter().any(|r| row_text(r) == "got-hunter2")
    })
    .await;
    std::io::Write::write_all(&mut keys, &[0x1d, b'd']).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mouse_reports_reach_the_program_at_the_session_s_cells() {
    let node = TestNode::start();
    let session = node
        .create_with(CreateRequest {
            command: Some(vec!["bash".into(), "-c".into(), MOUSE_PROGRAM.into()]),
            cols: Some(120),
            rows: Some(60),
            ..Default::default()
        })
        .await
        .id;
    wait_output(&node, &session, "row 59").await;
    let mut pty = PtyAttach::start(&node, &session);
    node.wait_info(&session, "the attach's size", |s| {
        (s.cols, s.rows) == (80, 24)
    })
    .await;
    // The attach shows the program's redraw at 80x24 (until then its
    // screen may still show the 120x60 window it started with, which the
    // wait below would take for the later one).
    within(PATIENCE, "the redraw at 80x24", async {
        loop {
            let screen = drawn(&pty.out.lock().unwrap());
            if row_text(&screen[0]) == "row 0" && row_text(&screen[23]) == "row 23" {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    // Another viewer takes 120x60 back: the 80x24 terminal shows 23 rows
    // above the notice, ending at the cursor's (the last) row: 37 to 59.
    let mut op = node.client(OPERATOR).await;
    op.send(&ClientMsg::Resize {
        session: session.clone(),
        cols: 120,
        rows: 60,
    })
    .await
    .unwrap();
    within(PATIENCE, "the window over rows 37 to 59", async {
        loop {
            let screen = drawn(&pty.out.lock().unwrap());
            if row_text(&screen[0]) == "row 37" && row_text(&screen[23]).contains("shown in part") {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    // A click on terminal cell (3, 4) is session cell (3, 41); one on
    // the notice row (24) is not sent.
    std::io::Write::write_all(&mut pty.keys, b"\x1b[<0;3;24M\x1b[<0;3;4M").unwrap();
    let text = wait_output(&node, &session, "[<0;3;41M").await;
    assert!(
        !text.contains(";3;24M") && !text.contains(";3;61M"),
        "a click on the notice row is not sent: {text}"
    );
}
