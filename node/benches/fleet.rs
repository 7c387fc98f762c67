//! A node keeping the output of many ended sessions (a program, not
//! assertions; docs/benchmarks.md "Output on disk"):
//!
//!     cargo bench -p termesh-node --bench fleet
//!
//! writes `TERMESH_BENCH_FLEET_SESSIONS` (10,000) ended sessions holding
//! `TERMESH_BENCH_FLEET_GB` (20) GB of output between them straight into a
//! data dir, as fast as the disk takes it (the store's own types, the
//! rate beside `dd`'s), then starts a node on it and prints its start
//! time and RSS, the RSS after a screen of 500 of them, and the time to
//! list them all.

use std::sync::Arc;
use std::time::Instant;

mod common;

use common::*;
use termesh_actors::store::log::OutputLog;
use termesh_actors::store::{log_dir, Store, Write};
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, ServerMsg, SessionInfo, SessionStatus};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn record(id: &str, last_seq: u64) -> Vec<u8> {
    let info = SessionInfo {
        id: id.into(),
        name: None,
        node: "local".into(),
        command: vec!["sh".into()],
        cwd: None,
        status: SessionStatus::Exited,
        exit_code: Some(0),
        phase: None,
        created_at: 1_700_000_000_000,
        cols: 120,
        rows: 30,
        last_seq,
        viewers: 0,
        idle_ms: 0,
        at_prompt: false,
        tags: Vec::new(),
        state: None,
        state_since: None,
        waiting_for: None,
    };
    rmp_serde::to_vec_named(&info).unwrap()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let sessions = env_or("TERMESH_BENCH_FLEET_SESSIONS", 10_000);
    let gb = env_or("TERMESH_BENCH_FLEET_GB", 20);
    let per_session = (gb as u64 * 1_000_000_000) / sessions as u64;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    println!(
        "termesh fleet benchmark: {sessions} ended sessions, {gb} GB of output ({:.1} MB each)",
        per_session as f64 / 1e6
    );

    // Written as a node would have: records in sled, output in the log.
    let start = Instant::now();
    let frame: Vec<u8> = {
        let line =
            b"termesh fleet payload: the quick brown fox jumps over the lazy dog 0123456789\r\n";
        line.iter().copied().cycle().take(64 << 10).collect()
    };
    {
        let store_dir = data.join("store");
        let mut store = Store::open(&store_dir).unwrap();
        let (log, _) =
            OutputLog::open(&log_dir(&store_dir), 8 << 20, u64::MAX, Arc::default()).unwrap();
        let frames = per_session.div_ceil(frame.len() as u64);
        let mut batch = Vec::new();
        for i in 0..sessions {
            let id = format!("{i:012x}");
            for seq in 1..=frames {
                log.append(&id, seq, 1_700_000_000_000 + seq, &frame)
                    .unwrap();
            }
            log.seal(&id);
            batch.push(Write::Record {
                session: id.as_str().into(),
                data: record(&id, frames).into(),
            });
            if batch.len() == 1000 {
                store.apply(std::mem::take(&mut batch)).unwrap();
                log.sync().unwrap();
                println!("  written {} of {sessions} sessions", i + 1);
            }
        }
        store.apply(batch).unwrap();
        log.sync().unwrap();
        log.declare_whole().unwrap();
        store.flush().unwrap();
        store.write_manifest().unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    let written = (per_session.div_ceil(64 << 10) * (64 << 10)) as f64 * sessions as f64;
    let dd = dd_rate(dir.path(), 2 << 30);
    println!(
        "  written in {secs:.1} s: {:.0} MB/s (dd with fsync: {dd:.0} MB/s)",
        written / secs / 1e6
    );

    // The node on it.
    let config = "[store]\noutput_bytes = \"1000GiB\"\nmax_bytes = \"100%\"\n";
    let start = Instant::now();
    let node = Node::start_in(dir, config);
    let serve = start.elapsed();
    println!(
        "  node start to serving: {:.0} ms; RSS {:.1} MiB",
        ms(serve),
        node.rss_kib() as f64 / 1024.0
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = Client::connect(&node.target).await.unwrap();
        let start = Instant::now();
        let mut after = None;
        let mut listed = 0;
        loop {
            let reply = c
                .request(|id| ClientMsg::List {
                    id,
                    after: after.clone(),
                    limit: Some(10_000),
                })
                .await
                .unwrap();
            let ServerMsg::Sessions { sessions, next, .. } = reply else {
                panic!("{reply:?}")
            };
            listed += sessions.len();
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        println!(
            "  listed {listed} sessions in {:.0} ms",
            ms(start.elapsed())
        );
        let start = Instant::now();
        for i in 0..500.min(sessions) {
            if i % 50 == 0 {
                let rss = node.rss_kib();
                println!(
                    "    screen {i}: RSS {:.1} MiB, {} ended sessions warm",
                    rss as f64 / 1024.0,
                    node.metric("termesh_sessions_ended_warm")
                );
            }
            let reply = c
                .request(|id| ClientMsg::Screen {
                    id,
                    session: format!("{:012x}", i * (sessions / 500).max(1)),
                    scrollback: None,
                })
                .await
                .unwrap();
            assert!(matches!(reply, ServerMsg::Snapshot { .. }), "{reply:?}");
        }
        println!(
            "  a screen of 500 of them (their rings read from the log): {:.1} ms each; RSS {:.1} MiB",
            ms(start.elapsed()) / 500.0,
            node.rss_kib() as f64 / 1024.0
        );
        // Unwatched, they go cold again.
        let cool = termesh_actors::session::COOL_AFTER + std::time::Duration::from_secs(10);
        tokio::time::sleep(cool).await;
        println!(
            "  {} s later, cold again: RSS {:.1} MiB",
            cool.as_secs(),
            node.rss_kib() as f64 / 1024.0
        );
    });
}
