//! The attach's scroll mode: a line printed long before, the oldest retained line, the wheel.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scroll_mode_finds_a_line_printed_5000_lines_before() {
    let node = TestNode::start();
    let session = shell_session(&node, 120, 30).await;
    let mut op = node.client(OPERATOR).await;
    op.send(&ClientMsg::Input {
        session: session.clone(),
        data: b"echo NEEDLE-OLD; seq 1 5000 | sed 's/^/n-/'\r".to_vec(),
    })
    .await
    .unwrap();
    wait_output(&node, &session, "n-5000").await;
    let pane = Tmux::start(
        80,
        24,
        &format!("{BIN} attach {session}"),
        &[("TERMESH_URL", &node.url()), ("TERMESH_TOKEN", OPERATOR)],
    );
    pane.wait_for("n-5000").await;
    pane.keys(&["C-]", "["]);
    pane.wait_for("[scroll] q back").await;
    pane.keys(&["/"]);
    pane.type_text("NEEDLE-OLD");
    pane.keys(&["Enter"]);
    let text = pane
        .wait_until("the old line", |t| {
            t.lines().any(|l| l.trim_end() == "NEEDLE-OLD")
        })
        .await;
    assert!(!text.contains("n-5000"), "the view moved up: {text}");
    pane.keys(&["q"]);
    pane.wait_until("the live screen", |t| {
        t.contains("n-5000") && !t.contains("[scroll]")
    })
    .await;
    pane.keys(&["C-]", "d"]);
    assert_eq!(pane.exit_code().await, 0);
}

/// `termesh grep` names a line's seq; `attach --at SEQ` opens the scroll
/// mode there, the line on screen; `q` goes on live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_at_a_grep_hit_shows_its_line_in_the_scroll_mode() {
    let node = TestNode::start();
    let session = shell_session(&node, 120, 30).await;
    let mut op = node.client(OPERATOR).await;
    op.send(&ClientMsg::Input {
        session: session.clone(),
        data: b"seq 1 3000 | sed 's/^/a-/'; echo NEEDLE-HIT; seq 1 3000 | sed 's/^/b-/'\r".to_vec(),
    })
    .await
    .unwrap();
    wait_output(&node, &session, "b-3000").await;
    let grep = std::process::Command::new(BIN)
        .args([
            "grep",
            "^NEEDLE-HIT$",
            "--url",
            &node.url(),
            "--token",
            OPERATOR,
        ])
        .output()
        .unwrap();
    let hit = String::from_utf8_lossy(&grep.stdout).to_string();
    let seq = hit
        .split(':')
        .nth(1)
        .unwrap_or_else(|| panic!("{hit:?}"))
        .to_string();
    let pane = Tmux::start(
        80,
        24,
        &format!("{BIN} attach {session} --at {seq}"),
        &[("TERMESH_URL", &node.url()), ("TERMESH_TOKEN", OPERATOR)],
    );
    let text = pane
        .wait_until("the hit in the scroll mode", |t| {
            t.contains("[scroll]") && t.lines().any(|l| l.trim_end() == "NEEDLE-HIT")
        })
        .await;
    assert!(!text.contains("b-3000"), "the view is at the hit: {text}");
    pane.keys(&["q"]);
    pane.wait_until("the live screen", |t| {
        t.contains("b-3000") && !t.contains("[scroll]")
    })
    .await;
    pane.keys(&["C-]", "d"]);
    assert_eq!(pane.exit_code().await, 0);
}

/// Past the ring (256 KiB here), the first page of history and a raw
/// search page (1 MiB): the search reads raw pages of the stored output
/// back to the hit, renders it, and fills the pages between as a search
/// towards newer lines passes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scroll_mode_reaches_the_oldest_retained_line() {
    let node = TestNode::start_with(|c| c.session.ring_bytes = 256 << 10);
    let session = shell_session(&node, 120, 30).await;
    let mut op = node.client(OPERATOR).await;
    op.send(&ClientMsg::Input {
        session: session.clone(),
        data: b"echo NEEDLE-OLDEST; seq 1 300000 | sed 's/^/n-/'\r".to_vec(),
    })
    .await
    .unwrap();
    wait_output(&node, &session, "n-300000").await;
    let pane = Tmux::start(
        80,
        24,
        &format!("{BIN} attach {session}"),
        &[("TERMESH_URL", &node.url()), ("TERMESH_TOKEN", OPERATOR)],
    );
    pane.wait_for("n-300000").await;
    pane.keys(&["C-]", "["]);
    pane.wait_for("[scroll] q back").await;
    pane.keys(&["/"]);
    pane.type_text("NEEDLE-OLDEST");
    pane.keys(&["Enter"]);
    let text = pane
        .wait_until("the oldest line, pages back", |t| {
            t.lines().any(|l| l.trim_end() == "NEEDLE-OLDEST")
        })
        .await;
    assert!(text.contains("n-1"), "the lines after it: {text}");
    // Towards newer lines, into the output between (not rendered yet).
    pane.keys(&["/"]);
    pane.type_text("n-250000");
    pane.keys(&["Enter"]);
    pane.wait_for("not found").await;
    pane.keys(&["N"]);
    pane.wait_until("a line of the output between", |t| {
        t.lines().any(|l| l.trim_end() == "n-250000")
    })
    .await;
    // Paging down from there walks back towards the newest lines.
    pane.keys(&["G"]);
    pane.wait_until("the newest lines", |t| t.contains("n-300000"))
        .await;
    pane.keys(&["q"]);
    pane.keys(&["C-]", "d"]);
    assert_eq!(pane.exit_code().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_mouse_the_wheel_opens_the_scroll_mode() {
    let node = TestNode::start();
    let session = shell_session(&node, 80, 24).await;
    let mut op = node.client(OPERATOR).await;
    type_in(&mut op, &session, "seq 1 200 | sed 's/^/w-/'\r").await;
    wait_output(&node, &session, "w-200").await;
    let mut pty = PtyAttach::start_at(&node.url(), &session, &["--mouse"]);
    pty.wait_for("\x1b[?1000h").await;
    let screen = || drawn(&pty.out.lock().unwrap());
    within(PATIENCE, "the live screen", async {
        while !screen().iter().any(|r| row_text(r) == "w-200") {
            poll_pause().await;
        }
    })
    .await;
    // The wheel goes up: the scroll mode opens, a wheel's worth up; no
    // report reaches the shell.
    std::io::Write::write_all(&mut pty.keys, b"\x1b[<64;5;5M").unwrap();
    within(PATIENCE, "the scroll mode", async {
        loop {
            let s = screen();
            if row_text(&s[23]).starts_with("[scroll] q back")
                && !s.iter().any(|r| row_text(r) == "w-200")
            {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    std::io::Write::write_all(&mut pty.keys, b"q").unwrap();
    within(PATIENCE, "the live screen again", async {
        while !screen().iter().any(|r| row_text(r) == "w-200") {
            poll_pause().await;
        }
    })
    .await;
    type_in(&mut op, &session, "echo typed-$((2*21))\r").await;
    let text = wait_output(&node, &session, "typed-42").await;
    assert!(
        !text.contains("[<64"),
        "no report reached the shell: {text}"
    );
}
