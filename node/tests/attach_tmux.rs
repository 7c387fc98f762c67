//! `termesh attach` driven in tmux as a person would, with tmux reporting
//! the outer terminal's state: modes restored on detach and on a signal,
//! ended and removed sessions, the prefix key and pastes, read-only, and
//! the node's marks answered behind a flood.

mod common;

use common::tmux::Tmux;
use common::*;
use termesh_transport::{ClientMsg, CreateRequest};

const BIN: &str = env!("CARGO_BIN_EXE_termesh");

/// `termesh attach ARGS` in a pane, against `node` with `token`.
fn attach(node: &TestNode, token: &str, cols: u16, rows: u16, args: &str) -> Tmux {
    let url = node.url();
    Tmux::start(
        cols,
        rows,
        &format!("{BIN} attach {args}"),
        &[("TERMESH_URL", &url), ("TERMESH_TOKEN", token)],
    )
}

/// A program that turns on every mode a TUI may, then shows a marker.
const MODES_ON: &str = "printf '\\033[?1049h\\033[?1000h\\033[?1002h\\033[?1006h\\033[?1004h\\033[?2004h\\033[?1h\\033=\\033[?25lTUI-READY'; exec sleep 100000";

const FLAGS: &str = "#{alternate_on} #{cursor_flag} #{mouse_any_flag} #{keypad_cursor_flag}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detach_and_signals_leave_the_outer_terminal_as_it_was() {
    let node = TestNode::start();
    let session = node.create(&["sh", "-c", MODES_ON]).await.id;
    for how in ["detach", "signal"] {
        let pane = attach(&node, OPERATOR, 100, 30, &session);
        pane.wait_for("TUI-READY").await;
        // The session's modes reach the outer terminal while attached.
        pane.wait_until("the modes on", |_| pane.show(FLAGS) == "1 0 1 1")
            .await;
        let want_code = match how {
            "detach" => {
                pane.keys(&["C-]", "d"]);
                0
            }
            _ => {
                let pid = nix::unistd::Pid::from_raw(pane.client_pid());
                nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
                128 + 15
            }
        };
        assert_eq!(pane.exit_code().await, want_code, "{how}");
        assert_eq!(pane.show(FLAGS), "0 1 0 0", "{how}: modes left on");
        // The notice is on a line of its own, on the normal screen.
        let screen = pane.screen();
        let note = screen
            .iter()
            .find(|l| l.contains("[termesh:"))
            .unwrap_or_else(|| panic!("{how}: no notice in {screen:?}"));
        assert!(note.starts_with("[termesh:"), "{how}: {note:?}");
        assert!(
            note.contains(&session),
            "{how}: the notice names the session"
        );
        assert!(
            !pane.text().contains("TUI-READY"),
            "{how}: the TUI's screen is gone"
        );
    }
    let info = node.info(&session).await.unwrap();
    assert_eq!(info.status, termesh_transport::SessionStatus::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_session_is_shown_then_the_attach_exits_with_its_code() {
    let node = TestNode::start();
    let session = node
        .create(&["sh", "-c", "echo quick-output; exit 3"])
        .await
        .id;
    node.wait_info(&session, "exit", |s| s.exit_code == Some(3))
        .await;
    let pane = attach(&node, VIEWER, 80, 24, &session);
    assert_eq!(pane.exit_code().await, 3);
    let text = pane.text();
    assert!(text.contains("quick-output"), "{text}");
    assert!(
        text.contains("[termesh: session exited with code 3]"),
        "{text}"
    );

    // `new --attach` of a program that ends at once.
    let url = node.url();
    let pane = Tmux::start(
        80,
        24,
        &format!("{BIN} new --attach -- sh -c 'echo quick-new; exit 4'"),
        &[("TERMESH_URL", &url), ("TERMESH_TOKEN", OPERATOR)],
    );
    assert_eq!(pane.exit_code().await, 4);
    assert!(pane.text().contains("quick-new"), "{}", pane.text());

    // A session ended by a signal says which.
    let session = node.create(&["sleep", "100000"]).await.id;
    let pane = attach(&node, OPERATOR, 80, 24, &session);
    node.wait_info(&session, "the attach", |s| s.viewers == 1)
        .await;
    let mut op = node.client(OPERATOR).await;
    op.request(|id| ClientMsg::Kill {
        id,
        session: session.clone(),
        signal: Some("TERM".into()),
    })
    .await
    .unwrap();
    assert_eq!(pane.exit_code().await, 143);
    assert!(
        pane.text().contains("ended by signal TERM"),
        "{}",
        pane.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_session_ends_the_attach_with_a_message() {
    let node = TestNode::start();
    let session = node.create(&["sleep", "100000"]).await.id;
    let pane = attach(&node, OPERATOR, 80, 24, &session);
    node.wait_info(&session, "the attach", |s| s.viewers == 1)
        .await;
    let mut op = node.client(OPERATOR).await;
    op.request(|id| ClientMsg::Remove {
        id,
        session: session.clone(),
        purge: None,
    })
    .await
    .unwrap();
    assert_eq!(pane.exit_code().await, 1);
    let text = pane.text();
    assert!(
        text.contains(&format!("session {session} was removed")),
        "{text}"
    );

    // Attaching to it afterwards is a plain error, not a retry loop.
    let pane = attach(&node, OPERATOR, 80, 24, &session);
    assert_eq!(pane.exit_code().await, 1);
    assert!(pane.text().contains("no session"), "{}", pane.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prefix_key_twice_and_a_paste_reach_the_program() {
    let node = TestNode::start();
    // Asks for bracketed pastes, then shows what it reads.
    let session = node
        .create(&["sh", "-c", "printf '\\033[?2004hREADY\\n'; exec cat -v"])
        .await
        .id;
    let pane = attach(&node, OPERATOR, 80, 24, &session);
    // Written after the mode, so tmux has it once this shows.
    pane.wait_for("READY").await;
    pane.paste("pasted\x1dd-end");
    pane.keys(&["Enter"]);
    pane.wait_for("pasted^]d-end").await;
    pane.keys(&["C-]", "C-]"]);
    pane.type_text("twice");
    pane.keys(&["Enter"]);
    pane.wait_for("^]twice").await;
    // Any other key after the prefix shows the keys and does nothing.
    pane.keys(&["C-]", "x"]);
    pane.wait_for("d detach").await;
    // Still attached; the prefix and d leave.
    pane.keys(&["C-]", "d"]);
    assert_eq!(pane.exit_code().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_attaches_say_so_and_send_nothing() {
    let node = TestNode::start();
    let session = node
        .create(&["sh", "-c", "echo READY; exec cat -v"])
        .await
        .id;
    for (token, flag, says) in [
        (OPERATOR, "--read-only", "read-only"),
        (VIEWER, "", "read-only (a viewer's token)"),
    ] {
        let pane = attach(&node, token, 80, 24, &format!("{flag} {session}"));
        pane.wait_for("READY").await;
        pane.type_text("typed-by-a-viewer");
        pane.keys(&["Enter"]);
        pane.wait_for(says).await;
        pane.keys(&["C-]", "d"]);
        assert_eq!(pane.exit_code().await, 0);
    }
    // Nothing typed reached the program.
    let mut c = node.client(VIEWER).await;
    let reply = c
        .request(|id| ClientMsg::History {
            id,
            session: session.clone(),
            limit: Some(4096),
            before_seq: None,
            rows: None,
        })
        .await
        .unwrap();
    let termesh_transport::ServerMsg::History { data, .. } = reply else {
        panic!("{reply:?}");
    };
    let text = String::from_utf8_lossy(&data.unwrap_or_default()).into_owned();
    assert!(!text.contains("typed-by"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smaller_viewer_sees_a_readable_crop_and_can_take_the_size() {
    let node = TestNode::start();
    let session = node
        .create_with(CreateRequest {
            command: Some(vec![
                "bash".into(),
                "--norc".into(),
                "--noprofile".into(),
                "-i".into(),
            ]),
            env: Some([("PS1".to_string(), "PROMPT> ".to_string())].into()),
            ..Default::default()
        })
        .await
        .id;
    let small = attach(&node, OPERATOR, 60, 20, &session);
    small.wait_for("PROMPT>").await;
    node.wait_info(&session, "the small size", |s| (s.cols, s.rows) == (60, 20))
        .await;
    // A larger viewer attaches: the last to attach sets the size.
    let large = attach(&node, OPERATOR, 100, 30, &session);
    node.wait_info(&session, "the large size", |s| {
        (s.cols, s.rows) == (100, 30)
    })
    .await;
    large.type_text("printf 'L%078dR\\n' 0");
    large.keys(&["Enter"]);
    large.wait_for("0R").await;
    // The smaller one shows the left part of the 80-column line on one
    // row, and says why; nothing wraps onto the next row.
    let text = small
        .wait_until("the crop", |t| {
            t.contains("session 100x30 shown in part") && t.contains("L0000")
        })
        .await;
    let rows: Vec<&str> = text.lines().collect();
    let at = rows.iter().position(|r| r.starts_with("L0000")).unwrap();
    assert_eq!(rows[at].len(), 60, "{text}");
    assert!(!rows[at + 1].contains("0R"), "the line wrapped: {text}");
    // The prefix then s takes the size back.
    small.keys(&["C-]", "s"]);
    node.wait_info(&session, "the size taken", |s| (s.cols, s.rows) == (60, 20))
        .await;
    small
        .wait_until("the crop notice gone", |t| {
            !t.contains("session 100x30 shown in part")
        })
        .await;
    for pane in [&small, &large] {
        pane.keys(&["C-]", "d"]);
        assert_eq!(pane.exit_code().await, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_without_a_name_takes_the_most_recently_active_session() {
    let node = TestNode::start();
    let older = node
        .create(&["sh", "-c", "echo OLDER-READY; exec sleep 100000"])
        .await
        .id;
    wait_output(&node, &older, "OLDER-READY").await;
    let newer = node
        .create(&["sh", "-c", "echo NEWER-READY; exec sleep 100000"])
        .await
        .id;
    wait_output(&node, &newer, "NEWER-READY").await;
    let pane = attach(&node, OPERATOR, 80, 24, "");
    pane.wait_for("NEWER-READY").await;
    pane.keys(&["C-]", "d"]);
    assert_eq!(pane.exit_code().await, 0);
    assert!(pane.text().contains(&format!("detached from {newer}")));
}

/// `printf 'y\r' | termesh attach ID` in a pane: keys from a pipe reach the
/// program, the attach exits 0 once they are sent, and the session keeps
/// its size although the pane is smaller (a piped attach never resizes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piped_attach_sends_its_input_exits_and_never_resizes() {
    let node = TestNode::start();
    let session = node.create(&["cat"]).await.id;
    let before = node.info(&session).await.unwrap();
    let url = node.url();
    let pane = Tmux::start(
        60,
        15,
        &format!("printf 'piped-line\\n' | {BIN} attach {session}"),
        &[("TERMESH_URL", &url), ("TERMESH_TOKEN", OPERATOR)],
    );
    assert_eq!(pane.exit_code().await, 0, "{:?}", pane.screen());
    wait_output(&node, &session, "piped-line").await;
    let after = node.info(&session).await.unwrap();
    assert_eq!(
        (after.cols, after.rows),
        (before.cols, before.rows),
        "a piped attach resized the session"
    );
    assert!(
        pane.text().contains("input ended and was sent"),
        "{:?}",
        pane.screen()
    );
}

/// The status row covers the terminal's bottom row for a while only: when
/// its notice goes, vim's command line under it is back without vim
/// redrawing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_over_vims_command_line_gives_the_line_back_when_it_goes() {
    let node = TestNode::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.txt");
    std::fs::write(&file, "one\ntwo\n").unwrap();
    let session = node
        .create(&["vim", "-u", "NONE", "-N", file.to_str().unwrap()])
        .await
        .id;
    let pane = attach(&node, OPERATOR, 80, 24, &session);
    pane.wait_for("two").await;
    pane.type_text(":echo \"on-the-command-line\"");
    pane.keys(&["Enter"]);
    let bottom = |pane: &Tmux| pane.screen().last().cloned().unwrap_or_default();
    within(PATIENCE, "vim's message on the bottom row", async {
        while !bottom(&pane).contains("on-the-command-line") {
            poll_pause().await;
        }
    })
    .await;
    // The prefix and an unknown key: the keys' list in the status row.
    pane.keys(&["C-]", "x"]);
    within(PATIENCE, "the notice on the bottom row", async {
        while !bottom(&pane).contains("d detach") {
            poll_pause().await;
        }
    })
    .await;
    // vim is sent nothing meanwhile, so only the attach can give it back.
    within(PATIENCE, "vim's line back under the notice", async {
        while !bottom(&pane).contains("on-the-command-line") {
            poll_pause().await;
        }
    })
    .await;
    pane.keys(&["C-]", "d"]);
    assert_eq!(pane.exit_code().await, 0);
}

/// `termesh attach` answers the node's marks behind a flood it shows, as a
/// browser does (so the node knows how much it has read, and a flood held
/// for it waits behind the echo of what its person types), and shows the
/// flood's last screen exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_answers_the_marks_behind_a_flood_and_shows_its_end_exactly() {
    const LAST: usize = 300_000;
    let node = TestNode::start();
    let script = format!("echo ready; read go; seq 1 {LAST}; echo flood-end; exec sleep 100000");
    let session = node.create(&["sh", "-c", &script]).await.id;
    let pane = attach(&node, OPERATOR, 100, 30, &session);
    pane.wait_for("ready").await;
    let answered = wire::metric(&node.url(), "termesh_output_marks_answered_total").await;
    pane.type_text("go");
    pane.keys(&["Enter"]);
    pane.wait_for("flood-end").await;
    let screen = pane.screen();
    let end = screen
        .iter()
        .position(|l| l.trim_end() == "flood-end")
        .unwrap();
    let tail: Vec<String> = (LAST - 19..=LAST).map(|n| n.to_string()).collect();
    assert!(end >= tail.len(), "{screen:?}");
    let shown: Vec<&str> = screen[end - tail.len()..end]
        .iter()
        .map(|l| l.trim_end())
        .collect();
    assert_eq!(shown, tail, "the flood's last lines, in order");
    assert!(
        wire::metric(&node.url(), "termesh_output_marks_answered_total").await > answered,
        "the attach answered the pings behind the flood"
    );
    assert_eq!(
        wire::metric(&node.url(), "termesh_pongless_connections_total").await,
        0.0,
        "the attach answers pings"
    );
}
