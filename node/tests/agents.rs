//! Every running session's state (PROTOCOL.md section 15), from real
//! programs in real PTYs: scripts that behave as agents do (a plain
//! `[y/N]` question, a TUI with a spinner and a numbered choice) and the
//! shipped hook command. Each reaches its state on its own, an answer
//! typed in makes it work again, and quiet makes it idle.

mod common;

use std::time::Instant;

use common::*;
use serde_json::{json, Value};
use termesh_node::client::Client;
use termesh_transport::{
    AgentState, ClientMsg, CreateRequest, EventKind, SendWhen, ServerMsg, SessionInfo, MAX_SEND,
};

async fn type_text(node: &TestNode, session: &str, text: &str) {
    let mut c = node.client(OPERATOR).await;
    c.send(&ClientMsg::Input {
        session: session.into(),
        data: text.as_bytes().to_vec(),
    })
    .await
    .unwrap();
    c.close().await;
}

async fn wait_state(
    node: &TestNode,
    session: &str,
    state: AgentState,
    waiting_for: Option<&str>,
) -> SessionInfo {
    let what = format!("{session} {state:?} {waiting_for:?}");
    let began = Instant::now();
    let info = node
        .wait_info(session, &what, |s| {
            s.state == Some(state)
                && (waiting_for.is_none() || s.waiting_for.as_deref() == waiting_for)
        })
        .await;
    println!("{what}: after {:?}", began.elapsed());
    info
}

/// The `state` events a subscriber got, in order, until `last` came.
async fn state_events(c: &mut Client, session: &str, last: AgentState) -> Vec<AgentState> {
    let mut seen = Vec::new();
    within(PATIENCE, "state events", async {
        loop {
            if let ServerMsg::Event {
                session: s,
                event: EventKind::State { state, .. },
            } = next(c).await
            {
                assert_eq!(s, session);
                seen.push(state);
                if state == last {
                    return;
                }
            }
        }
    })
    .await;
    seen
}

/// A waiting `session` (beside a quiet shell) as the REST filter, the
/// metrics and `termesh ls --waiting` show it.
async fn the_queue_shows(node: &TestNode, session: &str) {
    let quiet = node.create(&["sh", "-c", "exec sleep 1000"]).await.id;
    let url = format!("{}/api/v1/sessions?state=waiting", node.url());
    let listed: Value = serde_json::from_str(&http_get(&url, VIEWER).await).unwrap();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [session]);
    assert_eq!(listed[0]["waiting_for"], "Overwrite config.toml? [y/N]");
    let metrics = http_get(&format!("{}/metrics", node.url()), VIEWER).await;
    assert!(
        metrics.contains("termesh_sessions_by_state{node=\"t1\",state=\"waiting\"} 1\n"),
        "{metrics}"
    );
    let bin = env!("CARGO_BIN_EXE_termesh");
    let out = std::process::Command::new("timeout")
        .args([
            "60",
            bin,
            "ls",
            "--waiting",
            "--url",
            &node.url(),
            "--token",
            VIEWER,
        ])
        .env("COLUMNS", "200")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 2, "the header and the waiting one: {text}");
    assert!(rows[0].contains("STATE"), "{text}");
    assert!(
        rows[1].starts_with(session) && rows[1].contains("waiting"),
        "{text}"
    );
    assert!(
        rows[1].contains("\"Overwrite config.toml? [y/N]\""),
        "{text}"
    );
    assert!(!text.contains(&quiet));
    let bad = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            &format!("Authorization: Bearer {VIEWER}"),
        ])
        .arg(format!("{}/api/v1/sessions?state=sleepy", node.url()))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&bad.stdout), "400");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_question_waits_an_answer_works_and_quiet_idles() {
    let node = TestNode::start();
    let script = "echo building; sleep 0.3; printf 'Overwrite config.toml? [y/N] '; \
                  read a; echo \"answered $a\"; exec sleep 1000";
    let session = node.create(&["sh", "-c", script]).await.id;
    let mut c = node.client(VIEWER).await;
    subscribe(&mut c, &session, Some(0), 1 << 20).await.unwrap();
    let asked = wait_state(
        &node,
        &session,
        AgentState::Waiting,
        Some("Overwrite config.toml? [y/N]"),
    )
    .await;
    assert!(asked.state_since.unwrap() >= asked.created_at);
    the_queue_shows(&node, &session).await;
    // Answered by `termesh send` with an id prefix.
    let out = std::process::Command::new("timeout")
        .args([
            "60",
            env!("CARGO_BIN_EXE_termesh"),
            "send",
            &session[..6],
            "y",
        ])
        .args(["--url", &node.url(), "--token", OPERATOR])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_state(&node, &session, AgentState::Idle, None).await;
    // The subscriber saw each change, and the store kept them.
    let events = state_events(&mut c, &session, AgentState::Idle).await;
    assert_eq!(
        events,
        [AgentState::Waiting, AgentState::Working, AgentState::Idle]
    );
    let stored: Value = serde_json::from_str(
        &http_get(
            &format!("{}/api/v1/sessions/{session}/events", node.url()),
            ADMIN,
        )
        .await,
    )
    .unwrap();
    let states: Vec<&str> = stored
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "state")
        .map(|e| e["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["waiting", "working", "idle"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tui_spinner_works_and_its_numbered_choice_waits() {
    let node = TestNode::start();
    let spinner = "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do \
                   printf '\\r\\342\\240\\213 Thinking\\342\\200\\246 (%ss \\302\\267 esc to interrupt)' $i; sleep 0.2; done";
    let script = format!(
        "stty -echo; {spinner}; \
         printf '\\r\\033[2K\\342\\225\\255\\342\\224\\200\\342\\224\\200\\r\\n\
         \\342\\224\\202 Bash command: rm -rf build\\r\\n\
         \\342\\224\\202 Do you want to proceed?\\r\\n\
         \\342\\224\\202 \\342\\235\\257 1. Yes\\r\\n\
         \\342\\224\\202   2. No\\r\\n\\033[?25l'; \
         read -r n; printf '\\033[5A\\r\\033[J\\033[?25hchose %s\\r\\n' \"$n\"; {spinner}; \
         printf '\\r\\033[2Kdone\\r\\n'; exec sleep 1000"
    );
    let session = node.create(&["bash", "-c", &script]).await.id;
    // While the spinner turns it works; the question makes it wait.
    let working = node.info(&session).await.unwrap();
    assert_eq!(working.state, Some(AgentState::Working));
    wait_state(
        &node,
        &session,
        AgentState::Waiting,
        Some("Do you want to proceed?"),
    )
    .await;
    // Answered over REST, without opening the terminal.
    let sent = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
        .args(["-H", &format!("Authorization: Bearer {OPERATOR}")])
        .args([
            "-H",
            "Content-Type: application/json",
            "--data",
            r#"{"text":"1"}"#,
        ])
        .arg(format!("{}/api/v1/sessions/{session}/send", node.url()))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&sent.stdout), "204");
    let again = wait_state(&node, &session, AgentState::Working, None).await;
    assert_eq!(again.waiting_for, None);
    wait_output(&node, &session, "chose 1").await;
    wait_state(&node, &session, AgentState::Idle, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_hook_sets_the_state_until_the_screen_changes() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/claude-code-hooks.json"
    );
    let config: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let command = config["hooks"]["Notification"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    let node = TestNode::start();
    let payload = json!({
        "hook_event_name": "Notification",
        "message": "Claude needs your permission to use Bash",
    });
    // Quiet first (idle), then the hook as Claude Code runs it.
    let info = node
        .create_with(CreateRequest {
            command: Some(vec![
                "sh".into(),
                "-c".into(),
                "stty -echo; read go; printf %s \"$PAYLOAD\" | sh -c \"$HOOK\"; read answer; \
                 printf '\\342\\240\\213 Running\\342\\200\\246 (esc to interrupt)'; sleep 1; \
                 printf '\\r\\033[2Kdone\\r\\n'; exec sleep 1000"
                    .into(),
            ]),
            env: Some(
                [
                    ("PAYLOAD".to_string(), payload.to_string()),
                    ("HOOK".to_string(), command),
                ]
                .into(),
            ),
            ..Default::default()
        })
        .await;
    let session = info.id;
    wait_state(&node, &session, AgentState::Idle, None).await;
    type_text(&node, &session, "go\n").await;
    wait_state(
        &node,
        &session,
        AgentState::Waiting,
        Some("Claude needs your permission to use Bash"),
    )
    .await;
    // The screen changes (the program works): the rules speak again.
    type_text(&node, &session, "granted\n").await;
    wait_state(&node, &session, AgentState::Working, None).await;
    wait_state(&node, &session, AgentState::Idle, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_sets_the_phase_and_ends_the_state() {
    let node = TestNode::start();
    let failed = node.create(&["sh", "-c", "sleep 0.2; exit 3"]).await.id;
    let done = node.create(&["sh", "-c", "sleep 0.2; exit 0"]).await.id;
    for (session, phase) in [(failed, "failed"), (done, "completed")] {
        let ended = node
            .wait_info(&session, "the exit", |s| s.status.has_ended())
            .await;
        assert_eq!(ended.phase.as_deref(), Some(phase));
        assert_eq!(
            (ended.state, ended.state_since, ended.waiting_for),
            (None, None, None)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revive_runs_the_resume_command_of_the_create_or_of_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    // An agent the config names: its revive continues "the conversation".
    let agent = dir.path().join("fake-agent");
    std::fs::write(&agent, "#!/bin/sh\necho \"agent run: $*\"\nexit 0\n").unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let node = TestNode::start_with(|c| {
        c.agents = vec![termesh_config::agents::AgentConfig {
            name: "fake".into(),
            command: vec!["fake-agent".into()],
            waiting: vec![],
            working: vec![],
            resume: Some(vec![agent.display().to_string(), "--continue".into()]),
        }]
    });
    let by_agent = node.create(&[agent.to_str().unwrap(), "--first"]).await.id;
    let by_create = node
        .create_with(CreateRequest {
            command: Some(vec!["sh".into(), "-c".into(), "echo first run".into()]),
            resume_command: Some(vec!["sh".into(), "-c".into(), "echo resumed run".into()]),
            cwd: Some(dir.path().display().to_string()),
            ..Default::default()
        })
        .await
        .id;
    for (session, first, again, ran) in [
        (
            &by_agent,
            "agent run: --first",
            "agent run: --continue",
            "--continue",
        ),
        (&by_create, "first run", "resumed run", "echo resumed run"),
    ] {
        wait_output(&node, session, first).await;
        node.wait_info(session, "the first run's exit", |s| s.status.has_ended())
            .await;
        let mut c = node.client(OPERATOR).await;
        let reply = c
            .request(|id| ClientMsg::Revive {
                id,
                session: session.clone(),
            })
            .await
            .unwrap();
        assert!(
            matches!(reply, ServerMsg::Ok { .. } | ServerMsg::Created { .. }),
            "{reply:?}"
        );
        wait_output(&node, session, again).await;
        let info = node.info(session).await.unwrap();
        assert_eq!(
            info.command[0] == "sh",
            session == &by_create,
            "the command stays the session's"
        );
        let events: Value = serde_json::from_str(
            &http_get(
                &format!("{}/api/v1/sessions/{session}/events", node.url()),
                ADMIN,
            )
            .await,
        )
        .unwrap();
        let revived = events
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "revived")
            .expect("a revived event");
        let command: Vec<&str> = revived["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        assert!(command.join(" ").ends_with(ran), "{revived}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_waits_for_the_question_and_types_as_a_paste_when_asked() {
    let node = TestNode::start();
    // Works a while, then turns bracketed paste on and asks.
    let script = "stty -icanon -icrnl -echo min 1; echo working; sleep 1; printf '\\033[?2004h'; \
                  printf 'Continue? [y/n] '; dd bs=1 count=15 2>/dev/null | od -An -c | tr -s ' '; \
                  exec sleep 1000";
    let session = node.create(&["sh", "-c", script]).await.id;
    let mut c = node.client(OPERATOR).await;
    let began = Instant::now();
    let reply = within(
        PATIENCE,
        "send to be written once the session waits",
        c.request(|id| ClientMsg::Send {
            id,
            session: session.clone(),
            text: "hi".into(),
            submit: None,
            when: Some(SendWhen::Waiting),
        }),
    )
    .await
    .unwrap();
    assert!(matches!(reply, ServerMsg::Ok { .. }), "{reply:?}");
    let info = node.info(&session).await.unwrap();
    assert_eq!(
        info.state,
        Some(AgentState::Waiting),
        "held until it waited"
    );
    println!("send held {:?}", began.elapsed());
    // ESC [ 2 0 0 ~ h i ESC [ 2 0 1 ~ \r, as od prints them.
    wait_output(&node, &session, "033 [ 2 0 0 ~ h i 033 [ 2 0 1 ~ \\r").await;
    // Bounds and errors.
    let big = "x".repeat(MAX_SEND + 1);
    let err = c
        .request(|id| ClientMsg::Send {
            id,
            session: session.clone(),
            text: big,
            submit: None,
            when: None,
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("over the"), "{err}");
    let ended = node.create(&["true"]).await.id;
    node.wait_info(&ended, "exit", |s| s.status.has_ended())
        .await;
    let err = c
        .request(|id| ClientMsg::Send {
            id,
            session: ended.clone(),
            text: "late".into(),
            submit: None,
            when: Some(SendWhen::Waiting),
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("exited"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_changes_and_next_attaches_to_the_longest_waiting() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::{Command, Stdio};
    let node = TestNode::start();
    let bin = env!("CARGO_BIN_EXE_termesh");
    let client_args = [
        "--url".to_string(),
        node.url(),
        "--token".into(),
        OPERATOR.into(),
    ];
    // `next` remembers where it went in the user's state dir: the test's own.
    let state = tempfile::tempdir().unwrap();
    let mut watch = Command::new(bin)
        .arg("watch")
        .args(&client_args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(serde_json::from_str(&line).expect("a JSON line"));
        }
    });
    let none = Command::new(bin)
        .arg("next")
        .args(&client_args)
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no session is waiting"));

    let ask = |q: &str| format!("printf '{q} [y/n] '; read a; echo \"got $a\"; exec sleep 1000");
    let first = node.create(&["sh", "-c", &ask("First?")]).await.id;
    wait_state(&node, &first, AgentState::Waiting, None).await;
    let second = node.create(&["sh", "-c", &ask("Second?")]).await.id;
    wait_state(&node, &second, AgentState::Waiting, None).await;
    // watch saw each start working and then wait, with the question.
    let mut seen: Vec<(String, String)> = Vec::new();
    within(PATIENCE, "watch lines of both waiting", async {
        while seen.iter().filter(|(_, st)| st == "waiting").count() < 2 {
            let v = rx.recv().await.expect("watch runs");
            if v["state"] == "waiting" {
                assert!(
                    v["waiting_for"].as_str().unwrap().ends_with("? [y/n]"),
                    "{v}"
                );
            }
            seen.push((
                v["session"].as_str().unwrap().into(),
                v["state"].as_str().unwrap().into(),
            ));
        }
    })
    .await;

    // `next` goes to the first asked; detached without an answer, the
    // next `next` goes on to the second.
    for (want, question) in [(&first, "First?"), (&second, "Second?")] {
        let mut next = Command::new(bin)
            .arg("next")
            .args(&client_args)
            .env("XDG_STATE_HOME", state.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = next.stdout.take().unwrap();
        let shown = tokio::task::spawn_blocking(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&got).contains("[y/n]") {
                match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            // Read on to the end: the attach keeps writing until it detaches.
            std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
            String::from_utf8_lossy(&got).into_owned()
        });
        let shown = within(PATIENCE, "next to show the question", shown)
            .await
            .unwrap();
        assert!(shown.contains(question), "{want}: {shown}");
        next.stdin.as_mut().unwrap().write_all(b"\x1dd").unwrap();
        let status = tokio::task::spawn_blocking(move || next.wait_with_output().unwrap());
        let out = within(PATIENCE, "next to detach", status).await.unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains(question));
    }
    node.wait_info(&first, "still waiting", |s| {
        s.state == Some(AgentState::Waiting)
    })
    .await;
    type_text(&node, &first, "y\n").await;
    within(PATIENCE, "watch to see the answer work", async {
        loop {
            let v = rx.recv().await.expect("watch runs");
            if v["session"] == first.as_str() && v["state"] == "working" {
                return;
            }
        }
    })
    .await;
    let _ = watch.kill();
    let _ = watch.wait();
}
