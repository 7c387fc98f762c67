//! The console draws every session exactly as the node's screen is (what
//! `termesh screen` renders), row by row and at the cursor, the view
//! scrolled to it: vim with splits, htop, a long `ls -l` in a shell and an agent's
//! question, after the window shrinks, in split view, at phone width, when
//! another viewer takes the size, and after the link drops.

use super::*;

/// A session's screen as the node has it: its seq, rows (trailing blanks
/// trimmed) and cursor (col, row), rendered as `termesh screen` does.
async fn node_screen(node: &TestNode, session: &str) -> (u64, Vec<String>, (usize, usize)) {
    let mut c = node.client(OPERATOR).await;
    let reply = c
        .request(|id| ClientMsg::Screen {
            id,
            session: session.into(),
            scrollback: None,
        })
        .await
        .expect("screen");
    c.close().await;
    let termesh_transport::ServerMsg::Snapshot {
        seq,
        cols,
        rows,
        data,
        ..
    } = reply
    else {
        panic!("screen: {reply:?}");
    };
    let mut term = avt::Terminal::new(cols.into(), rows.into()).unwrap();
    term.feed(String::from_utf8_lossy(&data).as_ref());
    let cursor = term.cursor();
    let lines = termesh_node::text::render_text(&data, cols, rows);
    (seq, lines, (cursor.col, cursor.row))
}

/// Waits until the page's terminal for `session` holds, at the node's
/// seq, the node's screen: every row of its screen (the buffer's last
/// rows) and the cursor, the view at the bottom (on the cursor's screen)
/// where its pane is shown (and the pane shown, with `must_show`), the
/// terminal at the session's size. Panics
/// with both screens. (A hidden pane's view is not a person's: xterm
/// syncs it to a layout of nothing, and showing the pane puts it back on
/// the cursor, which `shown_at_the_cursor` checks.)
async fn same_screen(b: &Browser, node: &TestNode, session: &str, when: &str, must_show: bool) {
    let js = format!(
        "const t = window.termesh.terms.get('{session}'); const x = t.xterm; \
         const buf = x.buffer.active; \
         const rows = []; \
         for (let i = 0; i < x.rows; i++) \
           rows.push(buf.getLine(buf.baseY + i).translateToString(true).trimEnd()); \
         return [t.shownSeq, rows, buf.cursorX, buf.cursorY, \
                 buf.viewportY === buf.baseY, x.cols, x.rows, !!t.pane.offsetParent, \
                 [buf.viewportY, buf.baseY, t.follow, x._core._bufferService.isUserScrolling, \
                  Math.round(performance.now() - t.keyAt), Math.round(performance.now() - t.scrolledAt)]]"
    );
    let mut last = String::new();
    let deadline = std::time::Instant::now() + PATIENCE;
    while std::time::Instant::now() < deadline {
        let (seq, mut want, cursor) = node_screen(node, session).await;
        let info = node.info(session).await.expect("the session");
        let v = b.js(&js).await;
        let shown = v[0].as_u64();
        let mut rows: Vec<String> = serde_json::from_value(v[1].clone()).unwrap();
        while rows.last().is_some_and(|l| l.is_empty()) {
            rows.pop();
        }
        while want.last().is_some_and(|l| l.is_empty()) {
            want.pop();
        }
        let at = (
            v[2].as_u64().unwrap() as usize,
            v[3].as_u64().unwrap() as usize,
        );
        let bottom = v[4] == serde_json::json!(true);
        let size = (v[5].as_u64().unwrap(), v[6].as_u64().unwrap());
        let visible = v[7] == serde_json::json!(true);
        if shown == Some(seq)
            && (bottom || !visible)
            && (visible || !must_show)
            && rows == want
            && at == cursor
            && size == (info.cols as u64, info.rows as u64)
        {
            return;
        }
        last = format!(
            "seq: page {shown:?}, node {seq}; cursor: page {at:?}, node {cursor:?}; \
             at the bottom: {bottom} (pane shown: {visible}; view, base, follow, user scrolling, \
             ms since key, ms since scroll: {}); size: page {size:?}, node {}x{}\n\
             page:\n{}\nnode:\n{}",
            v[8],
            info.cols,
            info.rows,
            rows.join("\n"),
            want.join("\n")
        );
        poll_pause().await;
    }
    panic!("{when}: the console's screen of {session} is not the node's\n{last}");
}

/// Shows `session`'s tab and waits for its view on the node's screen,
/// at the bottom.
async fn shown_at_the_cursor(b: &Browser, node: &TestNode, session: &str, when: &str) {
    b.js(&format!(
        "window.termesh.terms.get('{session}').tab.click(); return true"
    ))
    .await;
    same_screen(b, node, session, when, true).await;
}

async fn all_same(b: &Browser, node: &TestNode, sessions: &[&str], when: &str) {
    for s in sessions {
        same_screen(b, node, s, when, false).await;
    }
}

/// Shows `session`'s tab and gives it this pane's size (the fit button).
async fn fit_here(b: &Browser, session: &str) {
    b.js(&format!(
        "const t = window.termesh.terms.get('{session}'); t.tab.click(); \
         t.pane.querySelector('[data-key=fit]').click(); return true"
    ))
    .await;
}

/// The session's size once the page's ask has reached it.
async fn sized_as_page(b: &Browser, node: &TestNode, session: &str) {
    let asked = b
        .wait_js(
            "the page's size",
            &format!("return window.termesh.terms.get('{session}').asked"),
        )
        .await;
    let asked = asked.as_str().unwrap().to_string();
    node.wait_info(session, "the page's size on the session", |s| {
        format!("{}x{}", s.cols, s.rows) == asked
    })
    .await;
}

async fn fit_all(b: &Browser, node: &TestNode, sessions: &[&str]) {
    for s in sessions {
        fit_here(b, s).await;
        sized_as_page(b, node, s).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_draws_each_session_as_its_screen_at_every_size() {
    let _one = ONE_AT_A_TIME.lock().await;
    let node = TestNode::start();
    let proxy = Proxy::start(node.node.addr()).await;
    let b = Browser::start(1400, 900).await;
    log_in(&b, &format!("http://{}/", proxy.addr), OPERATOR, "operator").await;

    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    let body: String = (1..=200)
        .map(|i| {
            format!(
                "line {i}: the quick brown fox jumps over the lazy dog, {}\n",
                "x".repeat(i % 90)
            )
        })
        .collect();
    std::fs::write(&text, body).unwrap();
    let vim = node
        .create(&[
            "vim",
            "-u",
            "NONE",
            "-N",
            "-c",
            "split",
            "-c",
            "vsplit",
            text.to_str().unwrap(),
        ])
        .await
        .id;
    let top = node.create(&["htop", "-d", "50"]).await.id;
    let shell = node
        .create_with(CreateRequest {
            command: sh("PS1='$ ' exec bash --norc -i"),
            ..Default::default()
        })
        .await
        .id;
    let agent = node
        .create_with(CreateRequest {
            command: sh("for i in $(seq 1 150); do echo \"working on step $i: reading src/module_$i.rs and \
                         planning the change across the codebase\"; done; \
                         printf '\\033[1m? Allow edit to src/main.rs?\\033[0m [y/n] '; read a; \
                         echo \"answered $a\"; exec sleep 1000"),
            name: Some("agent".into()),
            ..Default::default()
        })
        .await
        .id;
    let all = [vim.as_str(), top.as_str(), shell.as_str(), agent.as_str()];
    for s in &all {
        open_terminal(&b, s).await;
    }
    // Opening watches: nobody resized yet (the node's default size).
    let default = node.info(&agent).await.unwrap();
    for s in &all {
        let info = node.info(s).await.unwrap();
        assert_eq!(
            (info.cols, info.rows),
            (default.cols, default.rows),
            "opening {s} resized it"
        );
    }
    all_same(&b, &node, &all, "opened, watching").await;
    // The page's help states the rule.
    let help = b
        .js("return document.getElementById('help').textContent")
        .await;
    assert!(
        help.as_str()
            .is_some_and(|h| h.contains("fit here") && h.contains("most recently")),
        "{help}"
    );

    // Typing takes the size; the shell lists a long directory.
    b.js(&format!(
        "window.termesh.terms.get('{shell}').tab.click(); return true"
    ))
    .await;
    b.type_into_terminal(&format!(
        "ls -l /usr/bin | head -120{}",
        char::from(Key::Enter)
    ))
    .await;
    sized_as_page(&b, &node, &shell).await;
    fit_all(&b, &node, &[&vim, &top, &agent]).await;
    all_same(&b, &node, &all, "each fitted at 1400x900").await;

    // Narrower and shorter: the page holds the sizes, so it gives them
    // (each pane measured as its tab is shown), no button pressed.
    b.client.set_window_size(1000, 700).await.unwrap();
    for s in &all {
        b.js(&format!(
            "window.termesh.terms.get('{s}').tab.click(); return true"
        ))
        .await;
        sized_as_page(&b, &node, s).await;
    }
    all_same(&b, &node, &all, "after the window shrank").await;
    // Each pane was resized while the next was shown: shown again, its
    // view is on its cursor.
    for s in &all {
        shown_at_the_cursor(&b, &node, s, "shown after the window shrank").await;
    }

    // Split: every pane smaller; each session follows its pane.
    b.find("#split").await.click().await.unwrap();
    for s in &all {
        sized_as_page(&b, &node, s).await;
    }
    all_same(&b, &node, &all, "in split view").await;

    // Phone width.
    b.client.set_window_size(390, 844).await.unwrap();
    for s in &all {
        sized_as_page(&b, &node, s).await;
    }
    all_same(&b, &node, &all, "at phone width").await;

    // Another viewer takes the shell's size: the page follows it.
    let mut other = node.client(OPERATOR).await;
    other
        .send(&ClientMsg::Resize {
            session: shell.clone(),
            cols: 100,
            rows: 30,
        })
        .await
        .unwrap();
    node.wait_info(&shell, "the other viewer's size", |s| {
        (s.cols, s.rows) == (100, 30)
    })
    .await;
    all_same(&b, &node, &all, "another viewer sized the shell").await;
    // Wider than the phone's pane: the pane is scrolled to the cursor.
    b.wait_js(
        "the shell's cursor in view",
        &format!(
            "const t = window.termesh.terms.get('{shell}'); const x = t.xterm; \
             const screen = x.element.querySelector('.xterm-screen'); \
             const cw = screen.clientWidth / x.cols, ch = screen.clientHeight / x.rows; \
             const b = x.buffer.active; const px = b.cursorX * cw, py = b.cursorY * ch; \
             return screen.clientWidth > t.el.clientWidth \
               && px >= t.el.scrollLeft && px + cw <= t.el.scrollLeft + t.el.clientWidth \
               && py >= t.el.scrollTop && py + ch <= t.el.scrollTop + t.el.clientHeight"
        ),
    )
    .await;
    other.close().await;

    // The link drops and stays down while another viewer resizes the
    // agent's session; the page resumes where it was, at the new size.
    proxy.refuse(true);
    proxy.cut();
    b.wait_js(
        "the page to see the link down",
        "return document.getElementById('link').textContent !== 'up'",
    )
    .await;
    let mut other = node.client(OPERATOR).await;
    other
        .send(&ClientMsg::Resize {
            session: agent.clone(),
            cols: 70,
            rows: 21,
        })
        .await
        .unwrap();
    node.wait_info(&agent, "the size given while the page was away", |s| {
        (s.cols, s.rows) == (70, 21)
    })
    .await;
    // The shell prints, is resized, prints again meanwhile: the page
    // replays each at the size it was printed at.
    type_line(
        &node,
        &shell,
        "echo printed-before-the-resize-$((6*7)) && ls -l /usr/bin | head -30",
    )
    .await;
    wait_output(&node, &shell, "printed-before-the-resize-42").await;
    other
        .send(&ClientMsg::Resize {
            session: shell.clone(),
            cols: 64,
            rows: 19,
        })
        .await
        .unwrap();
    node.wait_info(&shell, "the shell's new size", |s| {
        (s.cols, s.rows) == (64, 19)
    })
    .await;
    type_line(
        &node,
        &shell,
        "echo printed-after-the-resize-$((6*7)) && ls -l /usr/lib | head -30",
    )
    .await;
    wait_output(&node, &shell, "printed-after-the-resize-42").await;
    proxy.refuse(false);
    b.wait_js(
        "the page to reconnect",
        "return window.termesh.ws && window.termesh.ws.readyState === 1 \
         && document.getElementById('link').textContent === 'up'",
    )
    .await;
    all_same(&b, &node, &all, "after the link dropped").await;
    other.close().await;

    // A person scrolls back (Shift+Page Up): the view stays where they
    // put it while the shell prints; a key typed brings it to the cursor.
    b.js(&format!(
        "window.termesh.terms.get('{shell}').tab.click(); return true"
    ))
    .await;
    b.type_into_terminal(&format!(
        "{}{}{}",
        char::from(Key::Shift),
        char::from(Key::PageUp),
        char::from(Key::Null)
    ))
    .await;
    // The shell's terminal's buffer as `b`, what it shows as `seq`.
    let view = |then: &str| {
        format!(
            "const t = window.termesh.terms.get('{shell}'); const b = t.xterm.buffer.active; \
             const seq = t.shownSeq; {then}"
        )
    };
    let up = b
        .wait_js(
            "the view scrolled back",
            &view("return b.viewportY < b.baseY ? [b.viewportY] : null"),
        )
        .await[0]
        .as_u64();
    type_line(&node, &shell, "echo printed-while-scrolled-back-$((6*7))").await;
    wait_output(&node, &shell, "printed-while-scrolled-back-42").await;
    let (seq, _, _) = node_screen(&node, &shell).await;
    let shown = b
        .wait_js(
            "the page to show what the shell printed",
            &view(&format!(
                "return seq === {seq} ? [b.viewportY, b.baseY] : null"
            )),
        )
        .await;
    assert_eq!(
        shown[0].as_u64(),
        up,
        "the view stays where the person scrolled it while output arrives: {shown}"
    );
    b.type_into_terminal("x").await;
    b.wait_js(
        "a key typed to bring the view to the cursor",
        &view("return b.viewportY === b.baseY"),
    )
    .await;
}
