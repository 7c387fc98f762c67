//! The output log's figures (a program, not assertions; docs/benchmarks.md
//! "Output on disk"), each beside this machine's own limit:
//!
//!     cargo bench -p termesh-node --bench output_log
//!
//! - node RSS against the output it keeps: `TERMESH_BENCH_LOG_SESSIONS`
//!   (24) sessions each printing `TERMESH_BENCH_LOG_MB` (100) MB with
//!   nobody watching, first with the default 64 MiB kept per session (the
//!   issue's scenario), then rounds of the same with everything kept, a
//!   point per round (`TERMESH_BENCH_LOG_ROUNDS`, 4), beside the data
//!   dir's size on disk and what it keeps (space amplification);
//! - the rate output is stored at, beside the raw PTY and `dd`;
//! - recovery after kill -9: start to serving, against the GB kept;
//! - reading one session's 64 MiB: the newest page, and every page
//!   through the store's read request (what history and search page
//!   through), beside `cat` of the segment files. Each reading pass
//!   starts with the session's segments out of the page cache, as a
//!   client meets older output (the node drops sealed segments from it
//!   once synced); `TERMESH_BENCH_LOG_WARM=1` leaves them cached. On a
//!   slow disk: run the bench in a blkio cgroup that throttles reads
//!   (docs/benchmarks.md, issue 32, twenty-first stop).

use std::path::Path;
use std::time::{Duration, Instant};

mod common;

use common::flood::{payload, raw_pty};
use common::*;
use termesh_node::client::{Client, Target};
use termesh_transport::{ClientMsg, ServerMsg, SessionStatus};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Allocated bytes of the files under `dir`.
fn disk_use(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut blocks = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        blocks += if meta.is_dir() {
            disk_use(&entry.path())
        } else {
            meta.blocks() * 512
        };
    }
    blocks
}

fn metric(target: &Target, name: &str) -> u64 {
    let text = ureq::get(&format!("{}/metrics", target.url))
        .call()
        .ok()
        .and_then(|r| r.into_string().ok())
        .unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .unwrap_or(0)
}

/// Starts `n` sessions printing `file` `repeats` times each, with
/// nobody watching, and waits until all have exited and their output is
/// stored. Answers the seconds it took.
async fn print_all(target: &Target, file: &Path, n: usize, repeats: usize) -> f64 {
    let mut c = Client::connect(target).await.unwrap();
    let script = format!(
        "stty raw -echo; for i in $(seq {repeats}); do cat {}; done",
        file.display()
    );
    let start = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(create(&mut c, &script).await);
    }
    for id in &ids {
        loop {
            let done = match c.request(ClientMsg::list).await.unwrap() {
                ServerMsg::Sessions { sessions, .. } => sessions
                    .iter()
                    .any(|s| &s.id == id && s.status == SessionStatus::Exited),
                _ => false,
            };
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    start.elapsed().as_secs_f64()
}

/// Every stored byte of `session` through the read request, in pages of
/// 1 MiB: (bytes, seconds, the seconds of the first page).
async fn read_all(target: &Target, session: &str) -> (u64, f64, f64) {
    let mut c = Client::connect(target).await.unwrap();
    let (mut after, mut bytes, mut first) = (0, 0u64, 0.0);
    let start = Instant::now();
    loop {
        let reply = c
            .request(|id| ClientMsg::ReadOutput {
                id,
                session: session.into(),
                after: Some(after),
                max_bytes: Some(1 << 20),
            })
            .await
            .unwrap();
        let ServerMsg::StoredOutput { frames, .. } = reply else {
            panic!("{reply:?}")
        };
        if first == 0.0 {
            first = start.elapsed().as_secs_f64();
        }
        let Some(last) = frames.last() else { break };
        after = last.seq;
        bytes += frames.iter().map(|f| f.data.len() as u64).sum::<u64>();
    }
    (bytes, start.elapsed().as_secs_f64(), first)
}

/// Walks `session`'s history back in pages of `rows`: (lines, pages,
/// seconds of the first page, seconds of all).
async fn walk_history(target: &Target, session: &str, rows: u32) -> (usize, usize, f64, f64) {
    let mut c = Client::connect(target).await.unwrap();
    let (mut before, mut lines, mut pages, mut first) = (None, 0, 0, 0.0);
    let start = Instant::now();
    loop {
        let reply = c
            .request(|id| ClientMsg::History {
                id,
                session: session.into(),
                limit: None,
                before_seq: before,
                rows: Some(rows),
            })
            .await
            .unwrap();
        let ServerMsg::History {
            lines: Some(got),
            first_seq: Some(first_seq),
            more: Some(more),
            ..
        } = reply
        else {
            panic!("{reply:?}")
        };
        if pages == 0 {
            first = start.elapsed().as_secs_f64();
        }
        pages += 1;
        lines += got.len();
        if !more {
            break;
        }
        before = Some(first_seq);
    }
    (lines, pages, first, start.elapsed().as_secs_f64())
}

/// The attach's search through everything `session` retains, for a text
/// that is not there (any search costs at most this): raw pages of
/// `SCAN_PAGE` read newest first and looked through. (seconds, pages,
/// seconds to render the oldest page, as a hit's page is rendered).
async fn search_all(target: &Target, session: &str) -> (f64, usize, f64) {
    use termesh_node::client::attach::scan::{self, RawPage, SCAN_PAGE};
    let mut c = Client::connect(target).await.unwrap();
    let start = Instant::now();
    let (mut before, mut pages) = (u64::MAX, 0);
    let oldest = loop {
        let reply = c
            .request(|id| ClientMsg::History {
                id,
                session: session.into(),
                limit: Some(SCAN_PAGE),
                before_seq: Some(before),
                rows: None,
            })
            .await
            .unwrap();
        let ServerMsg::History {
            data: Some(data),
            first_seq: Some(first_seq),
            more: Some(more),
            seq,
            ..
        } = reply
        else {
            panic!("{reply:?}")
        };
        pages += 1;
        let page = RawPage {
            data,
            first_seq,
            end_seq: seq,
            more,
        };
        assert!(!scan::may_contain(&page.data, "no such text"));
        if !more {
            break page;
        }
        before = first_seq;
    };
    let all = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let lines = scan::render(&oldest, 120, 30);
    assert!(!lines.is_empty());
    (all, pages, start.elapsed().as_secs_f64())
}

/// Drops a session's segment files (`dir`) from the page cache: each is
/// synced first, since the kernel keeps dirty pages.
fn uncache(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let file = std::fs::File::open(entry.path()).unwrap();
        file.sync_data().unwrap();
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    }
}

async fn first_session(target: &Target) -> String {
    let mut c = Client::connect(target).await.unwrap();
    match c.request(ClientMsg::list).await.unwrap() {
        ServerMsg::Sessions { sessions, .. } => sessions[0].id.clone(),
        other => panic!("{other:?}"),
    }
}

fn point(label: &str, node: &Node) -> (f64, f64) {
    let kept = metric(&node.target, "termesh_store_output_bytes") as f64;
    let disk = disk_use(node.dir.path()) as f64;
    let rss = node.rss_kib() as f64 / 1024.0;
    let ratio = if kept > 0.0 {
        format!("{:.3}x", disk / kept)
    } else {
        "-".into()
    };
    println!(
        "  {label:<34} kept {:7.2} GB   data dir {:7.2} GB ({ratio})   node RSS {rss:6.1} MiB",
        kept / 1e9,
        disk / 1e9,
    );
    (kept, rss)
}

fn kill9_restart(node: Node, config: &str) -> (Node, f64) {
    let mut node = node;
    let _ = node.child.kill();
    let _ = node.child.wait();
    let dir = std::mem::replace(&mut node.dir, tempfile::tempdir().unwrap());
    drop(node);
    let start = Instant::now();
    let node = Node::start_in(dir, config);
    (node, start.elapsed().as_secs_f64() * 1000.0)
}

/// A data dir of the previous release (output in sled and its journal)
/// holding `mb` MB over 8 sessions, and the first start of this one on
/// it: the start moves it all into the log before it serves.
fn migration(file: &Path, mb: usize) {
    use termesh_actors::store::legacy::{write_data_dir, OldSession};
    use termesh_actors::store::log::Frame;
    if mb == 0 {
        return;
    }
    let chunk: bytes::Bytes = std::fs::read(file).unwrap()[..64 << 10].to_vec().into();
    let per = (mb << 20) / 8 / chunk.len();
    let sessions: Vec<OldSession> = (0..8)
        .map(|i| {
            let id = format!("{i:012x}");
            let info = termesh_transport::SessionInfo {
                id: id.clone(),
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
                last_seq: per as u64,
                viewers: 0,
                idle_ms: 0,
                at_prompt: false,
                tags: Vec::new(),
                state: None,
                state_since: None,
                waiting_for: None,
            };
            OldSession {
                id,
                record: rmp_serde::to_vec_named(&info).unwrap(),
                stored: (1..=per as u64)
                    .map(|seq| Frame {
                        seq,
                        at_ms: seq,
                        data: chunk.clone(),
                    })
                    .collect(),
                journaled: Vec::new(),
                mark: per as u64,
            }
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    write_data_dir(&dir.path().join("store"), &sessions).unwrap();
    let bytes = (8 * per * chunk.len()) as f64;
    let start = Instant::now();
    let node = Node::start_in(dir, "");
    let secs = start.elapsed().as_secs_f64();
    println!(
        "
migration of the previous release's store: {:.0} MB in 8 sessions, start to serving {:.1} s: {:.0} MB/s",
        bytes / 1e6,
        secs,
        bytes / secs / 1e6
    );
    drop(node);
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let sessions = env_or("TERMESH_BENCH_LOG_SESSIONS", 24);
    let mb = env_or("TERMESH_BENCH_LOG_MB", 100);
    let rounds = env_or("TERMESH_BENCH_LOG_ROUNDS", 4);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("payload.txt");
    payload(&file, 4);
    let repeats = (mb << 20).div_ceil(4 << 20);
    let printed = (sessions * repeats * (4 << 20)) as f64;
    println!(
        "termesh output log benchmarks on {} cores: {sessions} sessions x {} MiB each per round",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        repeats * 4
    );
    let (raw_bytes, raw_time) = raw_pty(&file);
    let raw = raw_bytes as f64 / raw_time.as_secs_f64() / 1e6;

    // The scenario: the default 64 MiB kept per session.
    println!("\nRSS against output kept, default store.output_bytes (64 MiB per session)");
    let node = Node::start("");
    point("started", &node);
    let secs = rt.block_on(print_all(&node.target, &file, sessions, repeats));
    point(&format!("{:.1} GB printed", printed / 1e9), &node);
    println!(
        "  stored at {:.1} MB/s of output, {sessions} at once (raw PTY, one reader: {raw:.1} MB/s)",
        printed / secs / 1e6
    );
    let (node, ms) = kill9_restart(node, "");
    point(&format!("after kill -9 ({ms:.0} ms to serve)"), &node);
    let id = rt.block_on(first_session(&node.target));
    let seg_dir = std::fs::read_dir(node.dir.path().join("output"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy() == id)
        .map(|e| e.path())
        .unwrap();
    let warm = std::env::var_os("TERMESH_BENCH_LOG_WARM").is_some();
    let cold = || {
        if !warm {
            uncache(&seg_dir)
        }
    };
    println!(
        "  reading passes {}",
        if warm {
            "with the segments as cached"
        } else {
            "from the disk (segments out of the page cache before each)"
        }
    );
    cold();
    let (bytes, all, first) = rt.block_on(read_all(&node.target, &id));
    cold();
    let cat_start = Instant::now();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("cat {}/*.log > /dev/null", seg_dir.display()))
        .status()
        .unwrap();
    assert!(status.success());
    let cat = cat_start.elapsed().as_secs_f64();
    println!(
        "  one session's {:.1} MiB through the read request: first page {:.1} ms, every page {:.0} ms ({:.0} MB/s; cat of its segments {:.0} ms)",
        bytes as f64 / (1 << 20) as f64,
        first * 1000.0,
        all * 1000.0,
        bytes as f64 / all / 1e6,
        cat * 1000.0
    );
    for rows in [1_000, 10_000] {
        cold();
        let (lines, pages, first, all) = rt.block_on(walk_history(&node.target, &id, rows));
        println!(
            "  its history in pages of {rows} rows: first page {:.1} ms; all {lines} lines in {pages} pages {:.0} ms",
            first * 1000.0,
            all * 1000.0
        );
    }
    cold();
    let (all, pages, render) = rt.block_on(search_all(&node.target, &id));
    println!(
        "  a search through all of it (the attach's /, a text not there): {pages} raw pages of 1 MiB in {:.0} ms; a hit's page rendered in {:.0} ms",
        all * 1000.0,
        render * 1000.0
    );
    drop(node);
    migration(&file, env_or("TERMESH_BENCH_MIGRATE_MB", 512));
    if rounds == 0 {
        return;
    }

    // Everything kept: the curve.
    println!("\nRSS against output kept, everything kept (store.output_bytes = 1000 GiB)");
    let config = "[store]\noutput_bytes = \"1000GiB\"\n";
    let mut node = Node::start(config);
    let mut curve = vec![point("started", &node)];
    for round in 1..=rounds {
        let secs = rt.block_on(print_all(&node.target, &file, sessions, repeats));
        curve.push(point(
            &format!("round {round} ({:.0} MB/s)", printed / secs / 1e6),
            &node,
        ));
        let (n, ms) = kill9_restart(node, config);
        node = n;
        point(&format!("  after kill -9 ({ms:.0} ms to serve)"), &node);
    }
    let dd = dd_rate(scratch.path(), 1 << 30);
    println!("  (limit: dd with fsync {dd:.0} MB/s; raw PTY, one reader {raw:.0} MB/s)");
    // The slope between the first round and the last: what keeping more
    // costs, apart from what the rounds' live sessions hold (their rings).
    let (k0, r0) = curve[1];
    let (k1, r1) = *curve.last().unwrap();
    println!(
        "  RSS from round 1 to round {rounds}: {:+.1} MiB over {:.2} GB more kept ({:+.2} MiB per GB)",
        r1 - r0,
        (k1 - k0) / 1e9,
        (r1 - r0) / ((k1 - k0) / 1e9).max(1e-9)
    );
    drop(node);
}
