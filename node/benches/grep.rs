//! grep's scan speed (a program, not assertions): one node's sessions hold
//! `TERMESH_BENCH_GREP_MB` MiB of log-like output (default 256: coloured
//! lines, a few spinner redraws) in its output log; a `grep` for a pattern
//! that matches once is timed over alternating rounds, beside `grep -c`
//! over the same bytes in a file (this machine's limit for a line search;
//! grep does not strip escapes), and beside `cat` of the file to
//! /dev/null (reading alone). Target: at least 300 MB/s.
//!
//!     cargo bench -p termesh-node --bench grep

use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::*;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, ServerMsg};

const ROUNDS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// MB/s of `f` over `bytes`, each round.
fn rounds(bytes: u64, mut f: impl FnMut()) -> Vec<f64> {
    (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            f();
            bytes as f64 / 1e6 / t.elapsed().as_secs_f64()
        })
        .collect()
}

fn main() {
    let mb: u64 = std::env::var("TERMESH_BENCH_GREP_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let sessions = 4u64;
    let per = mb / sessions;
    let config = format!("[store]\noutput_bytes = \"{}MiB\"\n", per * 2);
    let node = Node::start(&config);
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Log-like lines: a timestamp in colour, a level, a request; one line in
    // the whole output says "needle".
    let files: Vec<_> = (0..sessions)
        .map(|i| dir.path().join(format!("out{i}")))
        .collect();
    let ids = rt.block_on(async {
        let mut c = Client::connect(&node.target).await.unwrap();
        let mut ids = Vec::new();
        for (i, file) in files.iter().enumerate() {
            let lines = per * 1_000_000 / 90;
            let needle = if i == 1 { lines / 2 } else { 0 };
            let script = format!(
                "awk 'BEGIN {{ for (n = 1; n <= {lines}; n++) {{ \
                   if (n == {needle}) print \"needle in the haystack\"; \
                   else if (n % 1000 == 0) printf \"\\r- working\\r\\\\ working\\r\\033[Kdone %d\\n\", n; \
                   else printf \"\\033[32m2026-11-27T17:%02d:%02d\\033[0m INFO request %d served in %d ms\\n\", n % 60, n % 59, n, n % 97 }} }}' \
                 | tee {}; echo all-written; exec sleep 100000",
                file.display()
            );
            ids.push(create(&mut c, &script).await);
        }
        // Written once every session's output is (read pages through).
        for id in &ids {
            let mut since = 0;
            loop {
                let reply = c
                    .request(|rid| ClientMsg::Read {
                        id: rid,
                        session: id.clone(),
                        since_seq: Some(since),
                        max_bytes: None,
                    })
                    .await
                    .unwrap();
                let ServerMsg::Text { seq, text, .. } = reply else {
                    panic!()
                };
                if text.contains("all-written") {
                    break;
                }
                if seq == since {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                since = seq;
            }
        }
        c.close().await;
        ids
    });
    let bytes: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    let mut c = rt.block_on(Client::connect(&node.target)).unwrap();
    let mut scanned = 0;
    let mut grep_round = || {
        rt.block_on(async {
            let id = c.next_id();
            c.send(&ClientMsg::Grep {
                id,
                pattern: "needle in the".into(),
                sessions: Some(ids.clone()),
                since_ms: None,
                state: None,
                context: None,
                max_hits: None,
                timeout_ms: Some(6_000),
                node: None,
            })
            .await
            .unwrap();
            loop {
                match c.next_for(id).await.unwrap() {
                    ServerMsg::GrepDone {
                        hits,
                        scanned_bytes,
                        truncated,
                        ..
                    } => {
                        assert_eq!((hits, truncated), (1, false), "one hit, all scanned");
                        scanned = scanned_bytes;
                        return;
                    }
                    ServerMsg::GrepHits { .. } => {}
                    other => panic!("{other:?}"),
                }
            }
        })
    };
    let (mut ours, mut grep_c, mut cat) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..2 {
        ours.extend(rounds(bytes, &mut grep_round));
        grep_c.extend(rounds(bytes, || {
            let out = Command::new("grep")
                .args(["-c", "needle in the"])
                .args(&files)
                .output()
                .unwrap();
            assert!(out.status.success());
        }));
        cat.extend(rounds(bytes, || {
            let out = Command::new("sh")
                .arg("-c")
                .arg(format!("cat {}/out* > /dev/null", dir.path().display()))
                .status()
                .unwrap();
            assert!(out.success());
        }));
    }
    println!(
        "grep over {:.0} MB of stored output in {sessions} sessions (scanned {:.0} MB), {} rounds each, alternating",
        bytes as f64 / 1e6,
        scanned as f64 / 1e6,
        2 * ROUNDS
    );
    println!(
        "  termesh grep (escapes stripped, redraws collapsed)  {:7.0} MB/s  (target >= 300)",
        median(ours)
    );
    println!(
        "  grep -c on the same bytes (limit)                   {:7.0} MB/s",
        median(grep_c)
    );
    println!(
        "  cat of the same bytes to /dev/null (reading alone)  {:7.0} MB/s",
        median(cat)
    );
}
