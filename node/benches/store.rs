//! Persistence benchmarks (a program, not assertions), each figure beside
//! this machine's own limit measured in the same run:
//!
//!     cargo bench -p termesh-node --bench store
//!
//! - output throughput to a WebSocket client with the store on and off
//!   (alternating rounds, medians; target: on within 5% of off), beside
//!   the raw PTY;
//! - the store's disk use per output byte (the output log and sled) after
//!   `TERMESH_BENCH_STORE_MB` MiB (default 1024) of output, all of it
//!   kept, beside `dd` writing as much;
//! - restart time of a node holding 1,000 stored sessions
//!   (`TERMESH_BENCH_SESSIONS`), beside a node with none.

use std::path::Path;
use std::time::{Duration, Instant};

mod common;

use common::flood::{payload, raw_pty, through_termesh};
use common::*;
use termesh_node::client::{Client, Target};
use termesh_transport::{ClientMsg, ServerMsg, SessionStatus};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Bytes the files under `dir` take on disk (allocated blocks) and their
/// apparent size.
fn disk_use(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut blocks, mut apparent) = (0, 0);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            let (b, a) = disk_use(&entry.path());
            blocks += b;
            apparent += a;
        } else {
            blocks += meta.blocks() * 512;
            apparent += meta.len();
        }
    }
    (blocks, apparent)
}

async fn info(c: &mut Client, session: &str) -> Option<termesh_transport::SessionInfo> {
    match c.request(ClientMsg::list).await.unwrap() {
        ServerMsg::Sessions { sessions, .. } => sessions.into_iter().find(|s| s.id == session),
        _ => None,
    }
}

/// Waits until the session has exited and its last frame is stored.
async fn stored_through_end(c: &mut Client, session: &str) -> u64 {
    loop {
        let s = info(c, session).await.expect("the session");
        if s.status == SessionStatus::Exited && s.last_seq > 0 {
            let reply = c
                .request(|id| ClientMsg::ReadOutput {
                    id,
                    session: session.into(),
                    after: Some(s.last_seq - 1),
                    max_bytes: Some(1),
                })
                .await
                .unwrap();
            if matches!(reply, ServerMsg::StoredOutput { ref frames, .. } if !frames.is_empty()) {
                return s.last_seq;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One session printing `file` `repeats` times; the seconds until its
/// last frame is stored.
async fn store_all(target: &Target, file: &Path, repeats: usize) -> f64 {
    let mut c = Client::connect(target).await.unwrap();
    let script = format!(
        "stty raw -echo; for i in $(seq {repeats}); do cat {}; done",
        file.display()
    );
    let start = Instant::now();
    let session = create(&mut c, &script).await;
    stored_through_end(&mut c, &session).await;
    start.elapsed().as_secs_f64()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mib = env_or("TERMESH_BENCH_MB", 64);
    let store_mib = env_or("TERMESH_BENCH_STORE_MB", 1024);
    let sessions = env_or("TERMESH_BENCH_SESSIONS", 1000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("payload.txt");
    payload(&file, mib);
    println!(
        "termesh persistence benchmarks on {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // Throughput, store on and off, alternating rounds.
    let on = Node::start("");
    let off = Node::start("[store]\nenabled = false\n");
    let (mut raw, mut with, mut without) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        let (bytes, time) = raw_pty(&file);
        raw.push(bytes as f64 / time.as_secs_f64() / 1e6);
        for (node, rates) in [(&on, &mut with), (&off, &mut without)] {
            if let Some(t) = rt.block_on(through_termesh(&node.target, None, &file, bytes)) {
                rates.push(bytes as f64 / t.as_secs_f64() / 1e6);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        if v.is_empty() {
            return 0.0;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (raw_rate, on_rate, off_rate) = (median(&mut raw), median(&mut with), median(&mut without));
    println!(
        "\nthroughput, {mib} MiB of cat to a WebSocket client (median of 5 alternating rounds)"
    );
    println!("  raw PTY, local reader (limit)   {raw_rate:8.1} MB/s   rounds {raw:.0?}");
    println!("  termesh, store off              {off_rate:8.1} MB/s   rounds {without:.0?}");
    println!(
        "  termesh, store on               {on_rate:8.1} MB/s   rounds {with:.0?}   {:5.1}% of off (target >= 95%)",
        100.0 * on_rate / off_rate
    );
    drop(off);

    // Disk use after `gib` GiB, everything kept.
    drop(on);
    let keep_all = format!("[store]\noutput_bytes = \"{}MiB\"\n", store_mib * 2);
    let node = Node::start(&keep_all);
    let repeats = store_mib.div_ceil(mib);
    let output = (repeats * (mib << 20)) as u64;
    let secs = rt.block_on(store_all(&node.target, &file, repeats));
    // Output in the log, records and events in sled: both count.
    let both = |dir: &Path| {
        let (b1, a1) = disk_use(&dir.join("output"));
        let (b2, a2) = disk_use(&dir.join("store"));
        (b1 + b2, a1 + a2)
    };
    let (blocks, apparent) = both(node.dir.path());
    let dir = node.stop_keeping_dir();
    let (blocks_after, apparent_after) = both(dir.path());
    let dd = dd_rate(scratch.path(), output.min(1 << 30));
    println!(
        "\ndisk use after {:.2} GiB of output, all of it kept (the output log and sled)",
        output as f64 / (1u64 << 30) as f64
    );
    println!(
        "  written in {secs:.1} s: {:.1} MB/s of output stored   (limit: dd with fsync {dd:.0} MB/s)",
        output as f64 / secs / 1e6
    );
    println!(
        "  running node: {:.2} disk bytes per output byte ({} MiB allocated, {} MiB apparent)",
        blocks as f64 / output as f64,
        blocks >> 20,
        apparent >> 20
    );
    println!(
        "  after a clean stop: {:.2} per output byte ({} MiB allocated, {} MiB apparent)",
        blocks_after as f64 / output as f64,
        blocks_after >> 20,
        apparent_after >> 20
    );
    drop(dir);

    // Restart with `sessions` stored sessions.
    let empty = Node::start("");
    let empty_dir = empty.stop_keeping_dir();
    let start = Instant::now();
    let empty = Node::start_in(empty_dir, "");
    let empty_start = start.elapsed();
    drop(empty);
    let node = Node::start("");
    rt.block_on(async {
        let mut c = Client::connect(&node.target).await.unwrap();
        for i in 0..sessions {
            create(
                &mut c,
                &format!("for j in $(seq 40); do echo session {i} line $j of its stored output; done; exec sleep 100000"),
            )
            .await;
        }
    });
    let dir = node.stop_keeping_dir();
    let (store_bytes, _) = disk_use(&dir.path().join("store"));
    let start = Instant::now();
    let node = Node::start_in(dir, "");
    let restart = start.elapsed();
    let listed = rt.block_on(async {
        let mut c = Client::connect(&node.target).await.unwrap();
        match c.request(ClientMsg::list).await.unwrap() {
            ServerMsg::Sessions { sessions, .. } => sessions
                .iter()
                .filter(|s| s.status == SessionStatus::Lost)
                .count(),
            _ => 0,
        }
    });
    println!("\nrestart: start to serving (the node prints its URL once it serves)");
    println!(
        "  no stored sessions (limit)      {:8.1} ms",
        ms(empty_start)
    );
    println!(
        "  {sessions} stored sessions          {:8.1} ms   ({listed} listed as lost after it; store {} MiB)",
        ms(restart),
        store_bytes >> 20
    );
}
