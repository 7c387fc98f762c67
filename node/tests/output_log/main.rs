//! Output on disk, on real nodes and real files: kill -9 at random moments
//! of floods loses nothing that was sent and reuses no seq (a torn segment
//! tail is cut off at the restart); a full file system keeps every live
//! byte flowing to clients and storing resumes when space returns; over
//! the node's budget, ended sessions' output goes first; a data dir of the
//! previous release is migrated at the first start.

#[path = "../common/mod.rs"]
mod common;

mod reading;

use common::binary::{client, create, info, stored_output, wait_exited, BinaryNode};
use common::*;
use termesh_transport::{ClientMsg, ServerMsg, SessionStatus};

/// The newest segment file of `session` under the node's data dir.
fn newest_segment(data: &std::path::Path, session: &str) -> Option<std::path::PathBuf> {
    let dir = data.join("output").join(session);
    let mut segs: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segs.sort();
    segs.pop()
}

/// A flood the client drives: `ready`, then (after a line of input)
/// `seq 1 LINES`.
const LINES: u64 = 200_000;

fn flood_script() -> String {
    format!("stty -onlcr -echo; echo ready; read go; exec seq 1 {LINES}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_moments_of_floods_loses_nothing_sent_and_reuses_no_seq() {
    use rand::{Rng, SeedableRng};
    let rounds: usize = std::env::var("TERMESH_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let seed: u64 = std::env::var("TERMESH_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("kill -9 rounds: {rounds}, seed {seed} (TERMESH_TEST_SEED replays it)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut expected = b"ready\n".to_vec();
    expected.extend_from_slice(&numbered_lines(LINES));
    let config = "";
    let mut node = BinaryNode::start(config);
    let (mut torn, mut total_received, mut total_unsent) = (0, 0usize, 0usize);
    for round in 0..rounds {
        let session = create(&node, &flood_script()).await.id;
        let mut c = client(&node).await;
        let mut s = subscribe_to_ready(&mut c, &session).await;
        c.send(&ClientMsg::Input {
            session: session.clone(),
            data: b"\n".to_vec(),
        })
        .await
        .unwrap();
        // Killed while the flood runs: somewhere in its first 90%.
        let point = rng.gen_range(6..expected.len() * 9 / 10);
        within(
            PATIENCE,
            "the flood up to the kill",
            pump_until(&mut c, &session, &mut s, true, |s| s.data.len() >= point),
        )
        .await
        .unwrap();
        let tear = rng.gen_bool(0.25);
        let data_dir = node.data.clone();
        let id = session.clone();
        node = node.crash_and_restart_after(config, || {
            // A write the kill cut short: garbage after the last record.
            if let Some(seg) = newest_segment(&data_dir, &id).filter(|_| tear) {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new().append(true).open(seg).unwrap();
                f.write_all(&[0x5a; 37]).unwrap();
            }
        });
        if tear {
            torn += 1;
            assert!(
                node.log().contains("torn tail cut off"),
                "round {round}: the torn tail was not repaired:\n{}",
                node.log()
            );
        }
        // The program ran on under the keeper; the client resumes where
        // it was, with no resync, and nothing it was sent is missing.
        let before_kill = s.data.len();
        assert!(
            expected.starts_with(&s.data),
            "round {round}: received before the kill"
        );
        let mut c = client(&node).await;
        subscribe(&mut c, &session, Some(s.last_seq), 1 << 20)
            .await
            .unwrap();
        let rest = tokio::time::timeout(
            PATIENCE,
            pump_until(&mut c, &session, &mut s, true, |s| {
                s.exited.is_some() || s.lost
            }),
        )
        .await;
        assert!(
            matches!(rest, Ok(Ok(()))) && !s.lost,
            "round {round}: the rest of the flood after the restart: {rest:?}, lost {}, \
             {} bytes, seq {}; session {:?}\n{}",
            s.lost,
            s.data.len(),
            s.last_seq,
            info(&node, &session).await,
            node.log()
        );
        assert_eq!(
            (s.resyncs, s.snapshots.len()),
            (0, 0),
            "round {round}: resumed without a resync"
        );
        // The stream is the generator's output less one run of bytes the
        // node had read from the terminal and not yet given a seq when it
        // was killed (never sent to anyone: at most its reader's queue,
        // 2 MiB), after everything received before the kill; a seq given
        // twice would repeat or garble bytes.
        let same = s
            .data
            .iter()
            .zip(&expected)
            .take_while(|(a, b)| a == b)
            .count();
        assert!(same >= before_kill, "round {round}");
        assert!(
            expected.ends_with(&s.data[same..]),
            "round {round}: after {same} bytes, {} that are not the generator's end (a seq reused?)",
            s.data.len() - same
        );
        let unsent = expected.len() - s.data.len();
        assert!(unsent <= 2 << 20, "round {round}: {unsent} bytes gone");
        // The log holds every byte sent, each seq once.
        let (stored, last, holes) = stored_output(&node, &session).await;
        assert_eq!(holes, 0, "round {round}");
        assert_eq!(
            last, s.last_seq,
            "round {round}: the last seq sent is stored"
        );
        assert!(
            stored == s.data,
            "round {round}: the log holds what was sent"
        );
        total_received += s.data.len();
        total_unsent += unsent;
        println!(
            "round {round}: killed at {point} bytes, {} seqs, {unsent} bytes read but unsent at the kill{}",
            s.last_seq,
            if tear { ", torn tail" } else { "" }
        );
        c.request(|id| ClientMsg::Remove {
            id,
            session: session.clone(),
            purge: Some(true),
        })
        .await
        .unwrap();
    }
    println!(
        "{rounds} rounds, {torn} with a torn tail, {total_received} bytes checked, \
         {total_unsent} read but unsent at the kills"
    );
}

/// A tmpfs of `size` this test mounts (as root, as the suite runs);
/// unmounted on drop.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn new(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount a tmpfs (the suite runs as root)");
        SmallDisk { dir }
    }

    fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    fn free(&self) -> u64 {
        let v = nix::sys::statvfs::statvfs(self.dir.path()).unwrap();
        v.blocks_available() as u64 * v.fragment_size() as u64
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

async fn healthz(node: &BinaryNode) -> (u16, String) {
    let url = format!("{}/healthz", node.url);
    tokio::task::spawn_blocking(move || match ureq::get(&url).call() {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => panic!("{e}"),
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_keeps_live_output_and_storing_resumes_when_space_returns() {
    let disk = SmallDisk::new("48m");
    let data = disk.path().join("data");
    let node = BinaryNode::start_on(&data, "[store]\nmax_bytes = \"1GiB\"\n");
    let session = create(&node, &flood_script()).await.id;
    let mut c = client(&node).await;
    let mut s = subscribe_to_ready(&mut c, &session).await;
    // Fill the disk but for 256 KiB: the flood's 1.3 MB cannot all be kept.
    let filler = disk.path().join("filler");
    let room = disk.free().saturating_sub(256 << 10);
    std::fs::write(&filler, vec![0u8; room as usize]).unwrap();
    c.send(&ClientMsg::Input {
        session: session.clone(),
        data: b"\n".to_vec(),
    })
    .await
    .unwrap();
    within(
        PATIENCE,
        "the whole flood, live",
        pump_until(&mut c, &session, &mut s, true, |s| s.exited.is_some()),
    )
    .await
    .unwrap();
    let mut expected = b"ready\n".to_vec();
    expected.extend_from_slice(&numbered_lines(LINES));
    assert!(
        s.data == expected,
        "every live byte reached the client, in order"
    );
    let lost = wire::metric(&node.url, "termesh_store_lost_bytes_total").await;
    assert!(lost > 0.0, "output not stored is counted");
    assert!(
        node.log().contains("output log: a write failed"),
        "said once:\n{}",
        node.log()
    );
    // The disk full to the last byte (space comes and goes as the node's
    // own files change: a torn record cut off frees some, and a small
    // write may fit again), a new session's output cannot be stored:
    // /healthz says the store fails (the log's writes, or sled's).
    let top_up = || {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&filler)
            .unwrap();
        for chunk in [65536, 4096, 512, 1] {
            while std::io::Write::write_all(&mut file, &vec![0u8; chunk]).is_ok() {}
        }
    };
    top_up();
    let full = create(&node, "echo while-full; exec cat").await.id;
    // Until a write meets the full disk: the node's own files may free a
    // little between the top-up and its write (a suite run saw the write
    // fit), so the disk is topped up again and more output written.
    let mut round = 0u64;
    let body = within(PATIENCE, "/healthz to say the store fails", async {
        loop {
            let (code, body) = healthz(&node).await;
            if code == 503 {
                return body;
            }
            top_up();
            round += 1;
            c.send(&ClientMsg::Input {
                session: full.clone(),
                data: format!("still-full-{round}\n").into_bytes(),
            })
            .await
            .unwrap();
            poll_pause().await;
        }
    })
    .await;
    assert!(body.contains("store failing"), "{body}");
    // What was stored is the generator's output, frame for frame.
    let (stored, last, _) = stored_output(&node, &session).await;
    assert!(last <= s.last_seq && stored.len() < expected.len());

    // Space comes back: the next output is stored, /healthz is ok again.
    std::fs::remove_file(&filler).unwrap();
    let after = create(&node, "echo stored-again; exec cat").await.id;
    within(PATIENCE, "storing to resume", async {
        loop {
            let (stored, _, _) = stored_output(&node, &after).await;
            if String::from_utf8_lossy(&stored).contains("stored-again") {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    within(PATIENCE, "/healthz ok again", async {
        while healthz(&node).await.0 != 200 {
            poll_pause().await;
        }
    })
    .await;
    assert!(node.log().contains("writes work again"), "{}", node.log());
    drop(c);
    drop(node);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_node_budget_the_oldest_output_of_ended_sessions_goes_first() {
    let node = BinaryNode::start("[store]\nmax_bytes = \"2MiB\"\n");
    // 1.4 MB from a session that ends, then 1 MB from one that runs on.
    let ended = create(&node, "stty -onlcr; seq 1 200000; exit 0").await.id;
    wait_exited(&node, &ended).await;
    let running = create(&node, "stty -onlcr; seq 1 150000; exec cat")
        .await
        .id;
    within(PATIENCE, "its output stored", async {
        loop {
            let (stored, _, _) = stored_output(&node, &running).await;
            if stored.ends_with(b"\n150000\n") {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    within(PATIENCE, "the budget to be kept", async {
        while !stored_output(&node, &ended).await.0.is_empty() {
            poll_pause().await;
        }
    })
    .await;
    let (stored, _, holes) = stored_output(&node, &running).await;
    assert_eq!(holes, 0);
    assert!(
        stored == numbered_lines(150_000),
        "the running session keeps all its output"
    );
    let dropped = wire::metric(&node.url, "termesh_store_output_dropped_bytes_total").await;
    assert!(dropped >= 1_000_000.0, "{dropped}");
    assert!(
        node.log().contains("over store.max_bytes"),
        "{}",
        node.log()
    );
    // Its log empty, a restart still knows where its seqs stopped (a
    // revive must not give them again).
    let sent = info(&node, &ended).await.last_seq;
    assert!(sent > 0);
    let node = node.restart("[store]\nmax_bytes = \"2MiB\"\n");
    assert!(info(&node, &ended).await.last_seq >= sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_of_the_previous_release_is_migrated_at_the_first_start() {
    use termesh_actors::store::legacy::{journal_path, write_data_dir, OldSession};
    use termesh_actors::store::log::Frame;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let frame = |seq: u64| Frame {
        seq,
        at_ms: 1_700_000_000_000 + seq,
        data: format!("old line {seq}\r\n").into_bytes().into(),
    };
    let id = "0123456789ab";
    let record = termesh_transport::SessionInfo {
        id: id.into(),
        name: Some("old".into()),
        node: "local".into(),
        command: vec!["sh".into()],
        cwd: None,
        status: SessionStatus::Exited,
        exit_code: Some(0),
        phase: None,
        created_at: 1_700_000_000_000,
        cols: 80,
        rows: 24,
        last_seq: 3_100,
        viewers: 0,
        idle_ms: 0,
        at_prompt: false,
        tags: Vec::new(),
        state: None,
        state_since: None,
        waiting_for: None,
    };
    // 3,000 frames in sled's output tree, the last 110 in the journal
    // only (a kill -9 before the old store wrote them).
    let old = OldSession {
        id: id.into(),
        record: rmp_serde::to_vec_named(&record).unwrap(),
        stored: (1..=3_000).map(frame).collect(),
        journaled: (2_990..=3_100).map(frame).collect(),
        mark: 4_096,
    };
    let store = data.join("store");
    write_data_dir(&store, &[old]).unwrap();
    let node = BinaryNode::start_on(&data, "");
    assert!(
        node.log()
            .contains("store: migrating output: 1 of 1 sessions"),
        "a progress line:\n{}",
        node.log()
    );
    let (stored, last, holes) = stored_output(&node, id).await;
    let expected: Vec<u8> = (1..=3_100).flat_map(|s| frame(s).data.to_vec()).collect();
    assert_eq!((last, holes), (3_100, 0));
    assert!(stored == expected, "every frame once, in order");
    // The journal was whole: seqs continue right after its last frame.
    let migrated = info(&node, id).await;
    assert_eq!(migrated.status, SessionStatus::Exited);
    assert_eq!(migrated.last_seq, 3_100);
    assert!(!journal_path(&store).exists(), "the old journal is gone");
    // Ended, it started cold: its screen and a replay read its ring from
    // the log when first asked for.
    let mut c = client(&node).await;
    let reply = c
        .request(|rid| ClientMsg::Screen {
            id: rid,
            session: id.into(),
            scrollback: None,
        })
        .await
        .unwrap();
    let ServerMsg::Snapshot {
        data: screen, seq, ..
    } = reply
    else {
        panic!("{reply:?}")
    };
    assert_eq!(seq, 3_100);
    assert!(
        String::from_utf8_lossy(&screen).contains("old line 3100"),
        "the screen shows the last line"
    );
    let mut s = Stream::new(1 << 20);
    s.last_seq = 3_000;
    subscribe(&mut c, id, Some(3_000), 1 << 20).await.unwrap();
    within(
        PATIENCE,
        "a replay from the log",
        pump_until(&mut c, id, &mut s, true, |s| s.exited.is_some()),
    )
    .await
    .unwrap();
    let tail: Vec<u8> = (3_001..=3_100)
        .flat_map(|s| frame(s).data.to_vec())
        .collect();
    assert!(s.data == tail, "frames 3001-3100, then exited");
    // A second start finds nothing to migrate and the same output.
    drop(node);
    let node = BinaryNode::start_on(&data, "");
    assert!(
        !node.log().contains("store: migrating output"),
        "migrated once:\n{}",
        node.log()
    );
    assert!(stored_output(&node, id).await.0 == expected);
}

/// GET `url` as bytes (no size cap), with the `X-Termesh-Seq` header.
async fn get_bytes(url: String) -> (Vec<u8>, u64) {
    tokio::task::spawn_blocking(move || {
        let resp = ureq::get(&url)
            .set("Authorization", &format!("Bearer {OPERATOR}"))
            .call()
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let seq = resp.header("X-Termesh-Seq").unwrap().parse().unwrap();
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut resp.into_reader(), &mut body).unwrap();
        (body, seq)
    })
    .await
    .unwrap()
}

async fn screen_text(c: &mut termesh_node::client::Client, id: &str) -> String {
    let reply = c
        .request(|rid| ClientMsg::Screen {
            id: rid,
            session: id.to_string(),
            scrollback: None,
        })
        .await
        .unwrap();
    match reply {
        ServerMsg::Snapshot { data, .. } => String::from_utf8_lossy(&data).into_owned(),
        other => panic!("{other:?}"),
    }
}
