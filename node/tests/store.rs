//! Persistence: a restarted node still shows its earlier sessions (`lost`
//! when they were running) with their history and seqs; a node killed
//! with SIGKILL during a flood restarts with its stored output intact and
//! byte-identical to what a client received, and revived continues above
//! its last stored seq; a second node on the same data dir, a corrupt
//! store and a store the node may not open each stop the start clearly.

mod common;

use common::binary::{client, create, info, stored_output, wait_exited, BinaryNode};
use common::*;
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg, SessionStatus};

const BIG_RING: &str = "[session]\nring_bytes = \"64MiB\"\nring_frames = 4194304\n";

async fn replay(node: &BinaryNode, session: &str, last_seq: u64) -> Stream {
    let mut c = client(node).await;
    let mut s = Stream::new(1 << 20);
    subscribe(&mut c, session, Some(0), 1 << 20).await.unwrap();
    within(
        PATIENCE,
        "the stored output",
        pump_until(&mut c, session, &mut s, true, |s| s.last_seq >= last_seq),
    )
    .await
    .unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_shows_its_sessions_lost_with_their_history() {
    // Without a keeper: the programs end with the node (keeper.rs has
    // them run on).
    let node = BinaryNode::start(binary::NO_KEEPER);
    let running = create(&node, "echo before-restart; exec sleep 100000").await;
    let ended = create(&node, "echo all-done; exit 3").await;
    let mut c = client(&node).await;
    let mut s = Stream::new(1 << 20);
    subscribe(&mut c, &running.id, Some(0), 1 << 20)
        .await
        .unwrap();
    within(
        PATIENCE,
        "the output",
        pump_until(&mut c, &running.id, &mut s, true, |s| {
            String::from_utf8_lossy(&s.data).contains("before-restart")
        }),
    )
    .await
    .unwrap();
    drop(c);
    wait_exited(&node, &ended.id).await;
    let before = info(&node, &running.id).await;

    let node = node.restart(binary::NO_KEEPER);
    let lost = info(&node, &running.id).await;
    assert_eq!(lost.status, SessionStatus::Lost, "{lost:?}");
    assert_eq!(lost.last_seq, before.last_seq, "the seq did not go back");
    assert_eq!(lost.command, before.command);
    let exited = info(&node, &ended.id).await;
    assert_eq!(
        (exited.status, exited.exit_code),
        (SessionStatus::Exited, Some(3))
    );
    // Its output, as a client saw it before the restart.
    let replayed = replay(&node, &running.id, before.last_seq).await;
    assert_eq!(replayed.data, s.data);
    let mut c = client(&node).await;
    let history = c
        .request(|id| ClientMsg::History {
            id,
            session: running.id.clone(),
            limit: None,
            before_seq: None,
            rows: None,
        })
        .await
        .unwrap();
    let ServerMsg::History {
        lines: Some(lines), ..
    } = history
    else {
        panic!("{history:?}");
    };
    assert!(
        lines.iter().any(|l| l.contains("before-restart")),
        "{lines:?}"
    );
    // Its events survive too, with the restart told once, only for the
    // session that was running.
    let kinds = |events: Vec<serde_json::Value>| -> Vec<String> {
        events
            .iter()
            .filter_map(|e| e["kind"].as_str().map(String::from))
            .collect()
    };
    let lost_kinds = kinds(events_of(&mut c, &running.id).await);
    assert_eq!(lost_kinds, ["created", "node_restarted"], "{lost_kinds:?}");
    let ended_kinds = kinds(events_of(&mut c, &ended.id).await);
    assert_eq!(ended_kinds, ["created", "exited"], "{ended_kinds:?}");
    // Input to a lost session is refused as to an ended one.
    let err = c
        .request(|id| ClientMsg::Kill {
            id,
            session: running.id.clone(),
            signal: None,
        })
        .await;
    println!("kill of a lost session: {err:?}");
}

/// Returns once everything `session` printed before the call is durable:
/// two store flushes begun after it (a rename is a record, flushed at once).
async fn durable(node: &BinaryNode, session: &str) -> Result<(), String> {
    const FLUSHES: &str = "termesh_store_flushes_total";
    let before = wire::metric(&node.url, FLUSHES).await;
    let mut c = client(node).await;
    for round in 0..100 {
        c.request(|id| ClientMsg::Rename {
            id,
            session: session.to_string(),
            name: format!("durable-{round}"),
        })
        .await
        .map_err(|e| format!("{e:?}"))?;
        for _ in 0..20 {
            if wire::metric(&node.url, FLUSHES).await >= before + 2.0 {
                return Ok(());
            }
            poll_pause().await;
        }
    }
    Err(format!("{FLUSHES} stayed below {}", before + 2.0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_a_flood_keeps_the_stored_output_intact() {
    const LINES: u64 = 1_500_000;
    let expected = {
        let mut out = b"ready\n".to_vec();
        for i in 1..=LINES {
            out.extend_from_slice(format!("{i}\n").as_bytes());
        }
        out
    };
    let points = drop_points(3, expected.len() * 9 / 10);
    // Without a keeper, so each round's program dies with the node and is
    // revived.
    let no_keeper_big_ring = format!("{}{BIG_RING}", binary::NO_KEEPER);
    let mut node = BinaryNode::start(&no_keeper_big_ring);
    for (round, point) in points.iter().enumerate() {
        // It sleeps after the flood, so it still runs at the kill however
        // far the node read ahead of this client (a slow client on a loaded
        // machine reached its point after the whole flood was read).
        let script =
            format!("stty -onlcr -echo; echo ready; read go; seq 1 {LINES}; exec sleep 100000");
        let session = create(&node, &script).await.id;
        let mut c = client(&node).await;
        let mut s = subscribe_to_ready(&mut c, &session).await;
        // Output is made durable in batches (a kill -9 may lose the last
        // half second): "ready" is made durable first, so every round has
        // something stored to compare however early its crash comes.
        within(PATIENCE, "ready to be durable", durable(&node, &session))
            .await
            .unwrap();
        c.send(&ClientMsg::Input {
            session: session.clone(),
            data: b"\n".to_vec(),
        })
        .await
        .unwrap();
        within(
            PATIENCE,
            "the flood up to the crash point",
            pump_until(&mut c, &session, &mut s, true, |s| s.data.len() >= *point),
        )
        .await
        .unwrap();
        node = node.crash_and_restart(&no_keeper_big_ring);
        let lost = info(&node, &session).await;
        assert_eq!(
            lost.status,
            SessionStatus::Lost,
            "the killed node's log:\n{}\nthe new one's:\n{}",
            node.previous_log(),
            node.log()
        );
        let (stored, stored_last, holes) = stored_output(&node, &session).await;
        println!(
            "round {round}: killed at {} bytes received (seq {}); stored {} bytes (seq {}); \
             seqs continue after {}",
            s.data.len(),
            s.last_seq,
            stored.len(),
            stored_last,
            lost.last_seq
        );
        assert_eq!(holes, 0, "no hole in what was stored");
        assert!(
            expected.starts_with(&stored),
            "the stored output is a prefix of the generator's"
        );
        let common = stored.len().min(s.data.len());
        assert!(
            stored[..common] == s.data[..common],
            "stored and received output agree"
        );
        assert!(stored_last > 0, "something was stored");
        // The journal had every frame before it was sent: all of it is
        // stored now, what the store had not written at the kill too.
        assert!(
            stored.len() >= s.data.len() && stored_last >= s.last_seq,
            "received {} bytes (seq {}), stored {} (seq {stored_last})",
            s.data.len(),
            s.last_seq,
            stored.len()
        );
        // Seqs continue above anything that may have been sent.
        assert!(
            lost.last_seq >= s.last_seq,
            "after a crash the seqs go on at {}, below {} sent before it",
            lost.last_seq,
            s.last_seq
        );

        // Revived, it runs again with seqs above the old last one; a
        // subscriber resuming there sees the new run right after.
        let mut c = client(&node).await;
        let mut again = Stream::new(1 << 20);
        again.last_seq = lost.last_seq;
        subscribe(&mut c, &session, Some(lost.last_seq), 1 << 20)
            .await
            .unwrap();
        c.request(|id| ClientMsg::Revive {
            id,
            session: session.clone(),
        })
        .await
        .unwrap();
        within(
            PATIENCE,
            "the revived run's first output",
            pump_until(&mut c, &session, &mut again, true, |s| {
                s.data.starts_with(b"ready\n")
            }),
        )
        .await
        .unwrap();
        assert!(again.last_seq > lost.last_seq);
        assert_eq!(info(&node, &session).await.status, SessionStatus::Running);
        c.request(|id| ClientMsg::Remove {
            id,
            session: session.clone(),
            purge: Some(true),
        })
        .await
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_on_the_same_data_dir_is_refused() {
    let node = BinaryNode::start("");
    let out = tokio::task::spawn_blocking({
        let config = node.config_path();
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_termesh"))
                .args(["node", "--listen", "127.0.0.1:0", "--config"])
                .arg(config)
                .output()
                .unwrap()
        }
    });
    let out = within(PATIENCE, "the second node to give up", out)
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("in use by another process"), "{err}");
    assert!(err.contains("store"), "names the path: {err}");
    assert!(err.contains("--no-store"), "says the way out: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_store_stops_the_start_and_no_store_runs_anyway() {
    let node = BinaryNode::start("");
    create(&node, "echo some-output; exec sleep 100000").await;
    let dir = node.stop_keeping_dir();
    let db = BinaryNode::store_path(&dir).join("db");
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
        f.write_all(&[b'X'; 64]).unwrap();
    }
    let config = dir.path().join("termesh.toml");
    let run = |extra: &'static [&'static str]| {
        let config = config.clone();
        tokio::task::spawn_blocking(move || {
            let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_termesh"))
                .args(["node", "--listen", "127.0.0.1:0", "--config"])
                .arg(&config)
                .args(extra)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            // The banner's first line (it serves), or nothing (it stopped).
            let mut first = String::new();
            let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
            let _ = std::io::BufRead::read_line(&mut out, &mut first);
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let status = child.wait().unwrap();
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err);
            (first, status, err)
        })
    };
    let (banner, status, err) = within(PATIENCE, "the node on a corrupt store", run(&[]))
        .await
        .unwrap();
    println!("a node on a corrupt store: {err}");
    assert!(banner.is_empty(), "it did not serve: {banner}");
    assert!(!status.success());
    assert!(!err.contains("panicked"), "a clean refusal: {err}");
    // sled refuses it itself, or it reads back fewer records than the
    // manifest says were written.
    assert!(
        err.contains("cannot be opened") || err.contains("has lost data"),
        "{err}"
    );
    assert!(
        err.contains(&BinaryNode::store_path(&dir).display().to_string()),
        "names the path: {err}"
    );
    assert!(err.contains("--no-store"), "{err}");
    let (banner, _, err) = within(PATIENCE, "the node with --no-store", run(&["--no-store"]))
        .await
        .unwrap();
    assert!(banner.contains("serving on"), "{banner}{err}");
    assert!(err.contains("persistence is OFF"), "said loudly: {err}");
}

#[test]
fn a_store_the_node_may_not_open_stops_the_start() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::fs::PermissionsExt;
    // /proc/self belongs to the process's effective user.
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        println!("SKIPPED: needs root, to run the node as another user");
        return;
    }
    // A data dir of the node's user, holding a store it may not open.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let store = data.join("store");
    std::fs::create_dir_all(&store).unwrap();
    let mode = |path: &std::path::Path, mode| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    mode(dir.path(), 0o755);
    // The data dir is the node's user's own (it refuses any other).
    std::os::unix::fs::chown(&data, Some(65534), Some(65534)).unwrap();
    mode(&data, 0o700);
    mode(&store, 0o700);
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_termesh"))
        .args(["node", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env("HOME", &data)
        .output()
        .expect("setpriv (util-linux) runs");
    let err = String::from_utf8_lossy(&out.stderr);
    println!("a node whose store it may not open: {err}");
    assert!(!out.status.success());
    assert!(err.contains("Permission denied"), "says why: {err}");
    assert!(
        err.contains(&store.display().to_string()),
        "names the path: {err}"
    );
    assert!(err.contains("--no-store"), "says the way out: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_whose_disk_fails_is_told_by_healthz() {
    let mount = common::mount::Mount::new();
    let node = BinaryNode::start_on(&mount.path.join("sub").join("data"), "");
    let health = || async {
        let response = ureq::get(&format!("{}/healthz", node.url)).call();
        match response {
            Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
            Err(e) => panic!("healthz: {e}"),
        }
    };
    assert_eq!(health().await, (200, "ok\n".to_string()));
    // The disk goes away under the store: its daemon is killed, and every
    // read or write of the mount fails from now on.
    nix::sys::signal::kill(mount.pid(), nix::sys::signal::Signal::SIGKILL).unwrap();
    let mut c = client(&node).await;
    let req = CreateRequest {
        command: Some(vec!["sh".into(), "-c".into(), "echo some output".into()]),
        ..Default::default()
    };
    let created = c.request(|id| ClientMsg::Create { id, req }).await;
    println!("create with a dead disk: {created:?}");
    let told = within(PATIENCE, "healthz to say the store fails", async {
        loop {
            let (status, body) = health().await;
            if status == 503 {
                return body;
            }
            poll_pause().await;
        }
    })
    .await;
    assert!(told.starts_with("store failing: "), "{told}");
}
