//! A session's program: how it starts (environment, cwd, a terminal it
//! leads, nothing inherited from the node, a script without a shebang)
//! and how it ends (exit codes and signals reported, each of many exits
//! at once, the whole process group killed).

mod common;

use common::*;
use termesh_transport::{ClientMsg, CreateRequest, EventKind, ServerMsg, SessionStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_and_cwd() {
    let node = TestNode::start();
    let dir = tempfile::tempdir().unwrap();
    let info = node
        .create_with(CreateRequest {
            command: Some(vec!["sh".into(), "-c".into(), "echo \"id=$TERMESH_SESSION_ID\"; echo \"hook=$TERMESH_HOOK_URL\"; echo \"cwd=$(pwd)\"; echo \"x=$X\"; exec sleep 1000".into()]),
            cwd: Some(dir.path().display().to_string()),
            env: Some([("X".to_string(), "42".to_string())].into()),
            ..Default::default()
        })
        .await;
    let text = wait_output(&node, &info.id, "x=42").await;
    assert!(text.contains(&format!("id={}", info.id)), "{text}");
    assert!(
        text.contains(&format!(
            "hook={}/api/v1/sessions/{}/hook?key=",
            node.url(),
            info.id
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "cwd={}",
            dir.path().canonicalize().unwrap().display()
        )),
        "{text}"
    );
}

/// The program leads a session of its own whose controlling terminal is
/// the PTY (it is the terminal's foreground group), no signal is ignored
/// (but glibc's two internal ones, which posix_spawn leaves ignored and a
/// glibc program takes back) or blocked, it holds no descriptor of the
/// node's, and without a cwd it starts in the home directory with `SHELL`
/// set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_program_leads_its_own_terminal_and_inherits_nothing() {
    let node = TestNode::start();
    let script = "set -- $(cut -d' ' -f5-8 /proc/$$/stat); \
        [ \"$1\" = $$ ] && [ \"$2\" = $$ ] && [ \"$3\" != 0 ] && [ \"$4\" = $$ ] && echo leads-its-terminal; \
        grep -E '^Sig(Ign|Blk)' /proc/$$/status | tr -s '\\t\\n' '  '; echo; \
        echo \"home=$(pwd) shell=${SHELL:+set} pid=$$ done\"; exec sleep 1000";
    let info = node.create(&["sh", "-c", script]).await;
    let text = wait_output(&node, &info.id, "done").await;
    assert!(text.contains("leads-its-terminal"), "{text}");
    let mask = |name: &str| {
        let hex = text.split(name).nth(1).unwrap().split_whitespace().next();
        u64::from_str_radix(hex.unwrap(), 16).unwrap()
    };
    const GLIBC_INTERNAL: u64 = 0b11 << 31; // signals 32 and 33
    assert_eq!(mask("SigIgn:") & !GLIBC_INTERNAL, 0, "{text}");
    assert_eq!(mask("SigBlk:"), 0, "{text}");
    let home = std::env::var("HOME").unwrap_or_default();
    assert!(text.contains(&format!("home={home} shell=set")), "{text}");
    // Once it is `sleep` (same pid), its descriptors are its terminal's.
    let pid: u32 = text
        .split("pid=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // Not only exec'd (its name changes before its start-up runs, which
    // may hold a locale file open for a moment) but asleep in its sleep.
    let sleeps = [libc::SYS_clock_nanosleep, libc::SYS_nanosleep].map(|n| n.to_string());
    within(PATIENCE, "sleep asleep", async {
        loop {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let call = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
            let call = call.split(' ').next().unwrap_or("");
            if comm == "sleep\n" && sleeps.iter().any(|s| s == call) {
                break;
            }
            poll_pause().await;
        }
    })
    .await;
    let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    fds.sort();
    assert_eq!(fds, ["0", "1", "2"]);
}

/// Programs that end at once (one SIGCHLD may stand for many exits) each
/// report their own exit code: the node's exit passes miss none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn programs_ending_together_each_report_their_exit() {
    const N: u32 = 40;
    let node = TestNode::start();
    let mut c = node.client(OPERATOR).await;
    let mut sessions = Vec::new();
    for i in 0..N {
        let script = format!("read x; exit {}", i + 1);
        sessions.push(node.create(&["sh", "-c", &script]).await.id);
    }
    // Every program is waiting for its line: send them all in one go.
    for session in &sessions {
        c.send(&ClientMsg::Input {
            session: session.clone(),
            data: b"\n".to_vec(),
        })
        .await
        .unwrap();
    }
    for (i, session) in sessions.iter().enumerate() {
        let info = node
            .wait_info(session, "its exit", |s| s.status == SessionStatus::Exited)
            .await;
        assert_eq!(info.exit_code, Some(i as u32 + 1), "{info:?}");
    }
}

/// A script without `#!` runs through the shell, as a shell would run it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_without_a_shebang_runs_through_the_shell() {
    use std::os::unix::fs::PermissionsExt;
    let node = TestNode::start();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("plain-script");
    std::fs::write(&script, "echo \"ran as $0 with $1\"\nexec sleep 1000\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = script.display().to_string();
    let info = node.create(&[&path, "arg1"]).await;
    let text = wait_output(&node, &info.id, "arg1").await;
    assert!(text.contains(&format!("ran as {path} with arg1")), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_code_and_signal_are_reported() {
    let node = TestNode::start();
    let session = node.create(&["sh", "-c", "read x; exit 7"]).await.id;
    let mut c = node.client(OPERATOR).await;
    subscribe(&mut c, &session, None, 1 << 20).await.unwrap();
    c.send(&ClientMsg::Input {
        session: session.clone(),
        data: b"\n".to_vec(),
    })
    .await
    .unwrap();
    let mut s = Stream::new(1 << 20);
    pump_to_exit(&mut c, &session, &mut s, "exit event").await;
    assert_eq!(s.exited, Some(7));
    let info = node
        .wait_info(&session, "exited status", |i| {
            i.status == SessionStatus::Exited
        })
        .await;
    assert_eq!(info.exit_code, Some(7));

    let sleeper = node.create(&["sleep", "1000"]).await.id;
    subscribe(&mut c, &sleeper, None, 1 << 20).await.unwrap();
    c.request(|id| ClientMsg::Kill {
        id,
        session: sleeper.clone(),
        signal: None,
    })
    .await
    .unwrap();
    let event = within(PATIENCE, "the exited event", async {
        loop {
            if let ServerMsg::Event {
                session,
                event: e @ EventKind::Exited { .. },
            } = c.recv().await.unwrap()
            {
                if session == sleeper {
                    return e;
                }
            }
        }
    })
    .await;
    assert_eq!(
        event,
        EventKind::Exited {
            exit_code: 143,
            signal: Some("TERM".into())
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_leaves_no_process_of_the_session_alive() {
    let node = TestNode::start();
    // Children that ignore TERM (an ignored signal survives exec), in the
    // background and foreground: only the KILL after the grace time ends them.
    let session = node
        .create(&[
            "sh",
            "-c",
            "trap '' TERM; sleep 1000 & sleep 1001 & sh -c 'sleep 1002' ; wait",
        ])
        .await
        .id;
    within(PATIENCE, "the session's processes", async {
        while session_pids(&session).len() < 4 {
            poll_pause().await;
        }
    })
    .await;
    let mut c = node.client(OPERATOR).await;
    c.request(|id| ClientMsg::Kill {
        id,
        session: session.clone(),
        signal: Some("TERM".into()),
    })
    .await
    .unwrap();
    within(PATIENCE, "every process of the session to end", async {
        while !session_pids(&session).is_empty() {
            poll_pause().await;
        }
    })
    .await;
    let info = node
        .wait_info(&session, "exited", |i| i.status == SessionStatus::Exited)
        .await;
    assert!(info.exit_code.is_some());
}
