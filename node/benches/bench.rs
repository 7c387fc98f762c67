//! termesh benchmarks (a program, not assertions): each figure is printed
//! beside the limit this machine shows in the same run. The node is the real
//! `termesh` binary in its own process; the client is this process.
//!
//!     cargo bench -p termesh-node --bench bench
//!
//! `TERMESH_BENCH_MB` changes the 64 MiB throughput payload;
//! `TERMESH_BENCH_SESSIONS` the 1,000 idle sessions and clients;
//! `TERMESH_BENCH_CONFIG` is the node's config file text (default: the
//! defaults, store on, with `http.max_connections_per_address` raised for
//! the idle clients), e.g. `[store]\nenabled = false` for an A/B;
//! `TERMESH_BENCH_BIN` runs another build of the node (before/after);
//! `TERMESH_BENCH_THROUGHPUT_ONLY` (set to anything) stops after the
//! throughput rounds.

use std::time::Duration;

mod common;

use common::flood::{payload, raw_pty, through_termesh};
use common::*;
use termesh_node::client::Client;
use termesh_transport::ClientMsg;

/// A full 4 MiB ring of coloured text, then `screen`: cold (first ever),
/// warm (nothing new), and after 1 MiB more output and a quiet moment (the
/// reconnect case, served by the idle catch-up).
async fn snapshot(node: &Node) -> (Duration, Duration, Duration, usize) {
    let mut c = Client::connect(&node.target).await.unwrap();
    let fill = |n: u32| {
        format!(
            r#"i=0; while [ $i -lt {n} ]; do printf '\033[3%dm%06d\033[0m some text to fill the ring with, line after line after line\n' $((i % 8)) $i; i=$((i+1)); done"#
        )
    };
    let script = format!(
        "stty -echo; {}; echo ring-full; read x; {}; echo more-done; exec sleep 100000",
        fill(60000),
        fill(15000)
    );
    let session = create(&mut c, &script).await;
    wait_tail(&mut c, &session, b"ring-full\r\n").await;
    let (cold, len) = timed_screen(&mut c, &session).await;
    let (warm, _) = timed_screen(&mut c, &session).await;
    c.send(&ClientMsg::Input {
        session: session.clone(),
        data: b"\n".to_vec(),
    })
    .await
    .unwrap();
    wait_tail(&mut c, &session, b"more-done\r\n").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (after_idle, _) = timed_screen(&mut c, &session).await;
    (cold, warm, after_idle, len)
}

async fn idle_memory(node: &Node, n: usize) -> (u64, u64, u64) {
    let before = node.rss_kib();
    let mut c = Client::connect(&node.target).await.unwrap();
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(create(&mut c, "exec sleep 100000").await);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let with_sessions = node.rss_kib();
    let mut clients = Vec::with_capacity(n);
    for id in &ids {
        let mut viewer = Client::connect(&node.target).await.unwrap();
        subscribe(&mut viewer, id, None).await;
        clients.push(viewer);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let with_clients = node.rss_kib();
    for viewer in clients {
        drop(viewer);
    }
    for id in ids {
        remove(&mut c, id).await;
    }
    (before, with_sessions, with_clients)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let mib: usize = std::env::var("TERMESH_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let sessions: usize = std::env::var("TERMESH_BENCH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("payload.txt");
    payload(&file, mib);
    println!(
        "termesh benchmarks on {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // Alternating rounds, medians: the two share the machine's noise.
    // The idle-memory run opens `sessions` clients from one address: past
    // the default per-address bound (256) they would be refused.
    let config = std::env::var("TERMESH_BENCH_CONFIG")
        .unwrap_or_else(|_| format!("[http]\nmax_connections_per_address = {}", sessions + 64));
    let node = Node::start(&config.replace("\\n", "\n"));
    // The node has printed its URL; let its start settle, then read it.
    std::thread::sleep(Duration::from_millis(500));
    let fresh = node.rss_kib();
    let (mut raw_rates, mut ws_rates, mut behind) = (Vec::new(), Vec::new(), 0);
    for _ in 0..5 {
        let (raw_bytes, raw_time) = raw_pty(&file);
        raw_rates.push(raw_bytes as f64 / raw_time.as_secs_f64() / 1e6);
        match rt.block_on(through_termesh(&node.target, None, &file, raw_bytes)) {
            Some(ws_time) => ws_rates.push(raw_bytes as f64 / ws_time.as_secs_f64() / 1e6),
            None => behind += 1,
        }
    }
    if ws_rates.is_empty() {
        println!("\nthroughput: the client fell a ring behind `cat` in every round");
        ws_rates.push(0.0);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (raw_rate, ws_rate) = (median(&mut raw_rates), median(&mut ws_rates));
    println!("\nthroughput, {mib} MiB of cat through a PTY (median of 5 alternating rounds)");
    println!("  raw PTY, local reader (limit)   {raw_rate:8.1} MB/s   rounds {raw_rates:.0?}");
    println!("  termesh to a WebSocket client   {ws_rate:8.1} MB/s   rounds {ws_rates:.0?}   {:5.1}% of raw (target >= 90%)", 100.0 * ws_rate / raw_rate);
    if behind > 0 {
        println!("    {behind} round(s) not timed: the client fell a whole ring (4 MiB) behind `cat` and was resynced");
    }
    if std::env::var_os("TERMESH_BENCH_THROUGHPUT_ONLY").is_some() {
        return;
    }

    let (idle50, idle99) = rt.block_on(echo(&node.target, None, 2000, false));
    let (flood50, flood99) = rt.block_on(echo(&node.target, None, 2000, true));
    println!("\nkeystroke echo round trip (client -> node -> cat -> node -> client)");
    println!(
        "  idle           p50 {:7.3} ms   p99 {:7.3} ms   (target p99 < 2 ms)",
        ms(idle50),
        ms(idle99)
    );
    println!(
        "  during flood   p50 {:7.3} ms   p99 {:7.3} ms   (target p99 < 10 ms)",
        ms(flood50),
        ms(flood99)
    );

    let (cold, warm, after_idle, len) = rt.block_on(snapshot(&node));
    let (feed, plain, model_rate) = (avt_feed_rate(true), avt_feed_rate(false), model_feed_rate());
    println!("\nsnapshot of a full 4 MiB ring of coloured lines ({len} bytes of snapshot), request to reply");
    println!(
        "  cold, first ever          {:8.2} ms   (target < 100 ms)",
        ms(cold)
    );
    println!("    limit: avt alone parses this text at {feed:.0} MB/s here ({:.0} ms for 4 MiB; plain text {plain:.0} MB/s)", 4.194 / feed * 1000.0);
    println!("    termesh's screen model, same text as line-sized frames: {model_rate:.0} MB/s");
    println!(
        "  warm, nothing new         {:8.2} ms   (target < 5 ms)",
        ms(warm)
    );
    println!(
        "  after 1 MiB more + quiet  {:8.2} ms   (idle catch-up kept it warm)",
        ms(after_idle)
    );

    let (before, with_sessions, with_clients) = rt.block_on(idle_memory(&node, sessions));
    println!("\nmemory of the node process (RSS)");
    println!("  at start (fresh node)            {:8} KiB", fresh);
    println!(
        "  after the runs above             {:8} KiB   (printed as \"at start\" before 2026-11-25)",
        before
    );
    println!(
        "  with {sessions} idle sessions        {:8} KiB   {:6.1} KiB per session (target < 100)",
        with_sessions,
        (with_sessions - before) as f64 / sessions as f64
    );
    println!(
        "  and {sessions} subscribed clients   {:8} KiB   {:6.1} KiB per client",
        with_clients,
        (with_clients.saturating_sub(with_sessions)) as f64 / sessions as f64
    );
}
