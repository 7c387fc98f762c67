//! Cluster figures: a forwarded request's round trip (a client of node b
//! renames a session owned by a) beside the same request answered locally
//! (the machine's own limit for a request), the link RTT the nodes measure,
//! and the memory an idle peer link costs; through a mirror: throughput
//! beside the raw PTY, keystroke echo, link bytes per output byte with 1
//! and 10 viewers, and memory per mirror. Three real nodes in release
//! build, from `termesh cluster init`, on 127.0.0.1-3.
//!
//! `TERMESH_BENCH_MIB` changes the 64 MiB throughput payload;
//! `TERMESH_BENCH_CONFIG` is added to every node's config (`\n` for
//! newlines);
//! `TERMESH_BENCH_SLOW_VIEWER=1` adds a viewer on b that acks late beside
//! one that keeps up (does the slow one delay only itself?);
//! `TERMESH_BENCH_ECHO_ROUNDS=N` runs only the throughput rounds and then N
//! (instead of 5) alternating rounds of echo with the nodes quiet, client
//! on a beside client on b.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::{ms, percentile, rss_kib};
use termesh_node::client::{Client, Target};
use termesh_transport::{ClientMsg, ServerMsg};

const REQUESTS: usize = 2000;

async fn rename_round_trips(target: &Target, session: &str) -> Vec<Duration> {
    let mut c = Client::connect(target).await.unwrap();
    let mut times = Vec::with_capacity(REQUESTS);
    for i in 0..REQUESTS {
        let started = Instant::now();
        let reply = c
            .request(|id| ClientMsg::Rename {
                id,
                session: session.to_string(),
                name: format!("n{}", i % 2),
            })
            .await
            .unwrap();
        assert!(matches!(reply, ServerMsg::Ok { .. }));
        times.push(started.elapsed());
    }
    times.sort();
    times
}

/// One `/metrics` series (name with labels) of the node at `http`.
fn metric(http: SocketAddr, series: &str) -> f64 {
    let text = ureq::get(&format!("http://{http}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {series}"))
}

/// Bytes a received from b over their link per byte of a session's
/// output, with `viewers` clients on b (each its own connection, acking
/// per protocol) reading all of it through b's one mirror.
async fn link_bytes_per_output_byte(
    b: &Target,
    (a_http, b_http): (SocketAddr, SocketAddr),
    file: &std::path::Path,
    bytes: usize,
    viewers: usize,
) -> (f64, usize, [f64; 2]) {
    let mut c = Client::connect(b).await.unwrap();
    let command = format!("stty raw -echo; read go; exec cat {}", file.display());
    let session = common::create_on(&mut c, Some("a"), &command).await;
    let mut readers = Vec::new();
    for _ in 0..viewers {
        let mut v = Client::connect(b).await.unwrap();
        common::subscribe(&mut v, &session, Some(0)).await;
        readers.push(tokio::spawn(common::flood::read_all(
            v,
            session.clone(),
            bytes,
        )));
    }
    let counts = Counts::now((a_http, b_http));
    go(&mut c, &session).await;
    let mut resynced = 0;
    for r in readers {
        resynced += usize::from(!r.await.unwrap());
    }
    let (ratio, by) = counts.since(bytes);
    common::remove(&mut c, session).await;
    (ratio, resynced, by)
}

/// b's link bytes from a and both nodes' resyncs, counted from `now`.
struct Counts {
    https: (SocketAddr, SocketAddr),
    bytes: f64,
    resyncs: [f64; 2],
}

impl Counts {
    const LINK: &'static str = "termesh_peer_bytes_in_total{node=\"b\",peer=\"a\"}";

    fn resyncs((a, b): (SocketAddr, SocketAddr)) -> [f64; 2] {
        [a, b].map(|h| metric(h, "termesh_resyncs_total"))
    }

    fn now(https: (SocketAddr, SocketAddr)) -> Counts {
        Counts {
            https,
            bytes: metric(https.1, Self::LINK),
            resyncs: Self::resyncs(https),
        }
    }

    /// Link bytes since, per byte of `output`, and the resyncs a and b sent.
    fn since(&self, output: usize) -> (f64, [f64; 2]) {
        let after = Self::resyncs(self.https);
        (
            (metric(self.https.1, Self::LINK) - self.bytes) / output as f64,
            [0, 1].map(|i| after[i] - self.resyncs[i]),
        )
    }
}

/// Sends the line the session's `read go` waits for.
async fn go(c: &mut Client, session: &str) {
    c.send(&ClientMsg::Input {
        session: session.to_string(),
        data: b"\n".to_vec(),
    })
    .await
    .unwrap();
}

/// One viewer on b that acks 100 ms late each time (it falls behind and is
/// resynced by b's mirror, again and again) beside one that reads and acks
/// per protocol, for `bytes` of `cat` on a: whether the reading viewer was
/// resynced too, the resyncs a sent (to b's mirror) and b sent (to its
/// viewers), and link bytes per output byte. A slow client should delay
/// only itself.
async fn slow_beside_fast(
    b: &Target,
    (a_http, b_http): (SocketAddr, SocketAddr),
    file: &std::path::Path,
    bytes: usize,
) -> (bool, [f64; 2], f64) {
    let mut c = Client::connect(b).await.unwrap();
    let command = format!("stty raw -echo; read go; exec cat {}", file.display());
    let session = common::create_on(&mut c, Some("a"), &command).await;
    let mut slow = Client::connect(b).await.unwrap();
    common::subscribe(&mut slow, &session, Some(0)).await;
    let slow_session = session.clone();
    let slow_reader = tokio::spawn(async move {
        // Reads everything, acks per protocol but 100 ms late each time.
        let mut unacked = 0u64;
        while let Ok(msg) = slow.recv().await {
            if let ServerMsg::Output { seq, data, .. } = msg {
                unacked += data.len() as u64;
                if unacked >= common::WINDOW / 4 {
                    unacked = 0;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let ack = ClientMsg::Ack {
                        session: slow_session.clone(),
                        seq,
                    };
                    if slow.send(&ack).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut fast = Client::connect(b).await.unwrap();
    common::subscribe(&mut fast, &session, Some(0)).await;
    let fast_reader = tokio::spawn(common::flood::read_all(fast, session.clone(), bytes));
    let counts = Counts::now((a_http, b_http));
    go(&mut c, &session).await;
    let fast_resynced = !fast_reader.await.unwrap();
    // The slow viewer is behind by design: it is not waited for.
    tokio::time::sleep(Duration::from_millis(500)).await;
    slow_reader.abort();
    let (ratio, by) = counts.since(bytes);
    common::remove(&mut c, session).await;
    (fast_resynced, by, ratio)
}

fn line(what: &str, times: &[Duration]) {
    println!(
        "  {what:<40} p50 {:>7.3} ms   p99 {:>7.3} ms",
        ms(percentile(times, 0.5)),
        ms(percentile(times, 0.99))
    );
}

/// Echo with the nodes quiet, in alternating rounds of 1,000 keys: a
/// client on a (the session's own node: the limit) beside a client on b
/// (through the mirror), each round after the nodes settle. The p99 of
/// one round is the tenth-slowest key of half a second, which a single
/// hiccup of the host moves; the rounds' keys pooled give the figure,
/// the rounds' own p99s its spread.
async fn echo_rounds(target: &impl Fn(usize) -> Target, cluster: &Cluster, rounds: usize) {
    let pids = cluster.pids();
    let (mut local, mut mirror) = (Vec::new(), Vec::new());
    let (mut local99, mut mirror99) = (Vec::new(), Vec::new());
    println!("  idle: nodes quiet before each round, {rounds} alternating rounds of 1,000 keys");
    for _ in 0..rounds {
        common::settle(&pids).await;
        let here = common::echo_times(&target(0), Some("a"), 1000, false).await;
        common::settle(&pids).await;
        let there = common::echo_times(&target(1), Some("a"), 1000, false).await;
        local99.push(percentile(&here, 0.99));
        mirror99.push(percentile(&there, 0.99));
        local.extend(here);
        mirror.extend(there);
    }
    for v in [&mut local, &mut mirror, &mut local99, &mut mirror99] {
        v.sort();
    }
    let spread = |v: &[Duration]| format!("{:.3}-{:.3}", ms(v[0]), ms(v[v.len() - 1]));
    println!(
        "    client on a (limit)                    p50 {:7.3} ms   p99 {:7.3} ms   (rounds' p99 {} ms)",
        ms(percentile(&local, 0.5)),
        ms(percentile(&local, 0.99)),
        spread(&local99)
    );
    println!(
        "    client on b, through the mirror        p50 {:7.3} ms   p99 {:7.3} ms   (rounds' p99 {} ms; target p99 < 1 ms)",
        ms(percentile(&mirror, 0.5)),
        ms(percentile(&mirror, 0.99)),
        spread(&mirror99)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    // Extra config for every node (`\n` for newlines), e.g. to compare
    // `[store]\nenabled = false`.
    let extra = std::env::var("TERMESH_BENCH_CONFIG")
        .unwrap_or_default()
        .replace("\\n", "\n");
    let (cluster, session) = Cluster::start(&["a", "b", "c"], &extra).await;
    let (https, token) = (cluster.https.clone(), cluster.token.clone());
    let target = |i: usize| cluster.target(i);
    let deadline = Instant::now() + Duration::from_secs(60);

    let echo_only = std::env::var("TERMESH_BENCH_ECHO_ROUNDS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    // Memory per mirror, first (a node that has carried a flood keeps its
    // allocator's free memory, which hides small growth): b's RSS before
    // and after one client on b subscribes to sessions of a that printed
    // a few lines (b keeps one mirror each), at two sizes: 200, then 800
    // more.
    let mut c = Client::connect(&target(1)).await.unwrap();
    let b_pid = cluster.procs[1].id();
    let mut idle = Vec::new();
    for more in [200usize, 800].into_iter().filter(|_| echo_only.is_none()) {
        let mut batch = Vec::new();
        for _ in 0..more {
            batch.push(common::create_on(&mut c, Some("a"), "seq 1 20; exec sleep 100000").await);
        }
        let mirrors_before = metric(https[1], "termesh_mirrors");
        let rss_before = rss_kib(b_pid);
        for id in &batch {
            common::subscribe(&mut c, id, None).await;
        }
        // The mirror count has no event to wait on: poll it, bounded.
        let settle = Instant::now() + Duration::from_secs(60);
        while metric(https[1], "termesh_mirrors") < mirrors_before + more as f64 {
            assert!(Instant::now() < settle, "b did not start {more} mirrors");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let rss_after = rss_kib(b_pid);
        idle.extend(batch);
        println!(
            "memory per mirror: node b RSS {rss_before} KiB, {rss_after} KiB with {more} more mirrors \
             ({} in all, one subscription each, one connection): {:.1} KiB per mirror",
            idle.len(),
            rss_after.saturating_sub(rss_before) as f64 / more as f64
        );
    }
    for id in idle {
        common::remove(&mut c, id).await;
    }

    println!("cluster of 3 nodes on loopback, {REQUESTS} sequential requests each");
    let local = rename_round_trips(&target(0), &session).await;
    let forwarded = rename_round_trips(&target(1), &session).await;
    line("local request (client on the owner)", &local);
    line("forwarded request (client on b, owner a)", &forwarded);
    let nodes = loop {
        let nodes: Vec<serde_json::Value> = ureq::get(&format!("http://{}/api/v1/nodes", https[1]))
            .set("authorization", &format!("Bearer {token}"))
            .call()
            .unwrap()
            .into_json()
            .unwrap();
        let measured = nodes.iter().filter(|n| n["rtt_ms"].is_number()).count();
        if measured == 2 || Instant::now() > deadline {
            break nodes;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for n in nodes.iter().filter(|n| n["self"] == false) {
        println!(
            "  link RTT b -> {} (ping, measured by the node): {} ms",
            n["name"], n["rtt_ms"]
        );
    }

    // Output of a session on a to a client on b (through b's mirror),
    // beside the raw PTY, alternating rounds, medians.
    let mib: usize = std::env::var("TERMESH_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let file = dir.path().join("payload.txt");
    common::flood::payload(&file, mib);
    let (mut raw, mut mirrored, mut behind) = (Vec::new(), Vec::new(), 0);
    for _ in 0..3 {
        let (bytes, time) = common::flood::raw_pty(&file);
        raw.push(bytes as f64 / time.as_secs_f64() / 1e6);
        match common::flood::through_termesh(&target(1), Some("a"), &file, bytes).await {
            Some(t) => mirrored.push(bytes as f64 / t.as_secs_f64() / 1e6),
            None => behind += 1,
        }
    }
    if mirrored.is_empty() {
        mirrored.push(0.0);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (raw_rate, mirror_rate) = (median(&mut raw), median(&mut mirrored));
    println!("\nthroughput, {mib} MiB of cat through a PTY (median of 3 alternating rounds)");
    println!("  raw PTY, local reader (limit)            {raw_rate:8.1} MB/s   rounds {raw:.0?}");
    println!(
        "  session on a, client on b (mirror)       {mirror_rate:8.1} MB/s   rounds {mirrored:.0?}   {:5.1}% of raw (target >= 80%)",
        100.0 * mirror_rate / raw_rate
    );
    if behind > 0 {
        println!(
            "    {behind} round(s) not timed: the client fell a whole ring behind and was resynced"
        );
    }
    println!("\nkeystroke echo round trip, session on a (from b: input forwarded on the control stream, output through the mirror)");
    let rounds = echo_only.unwrap_or(5);
    if echo_only.is_none() {
        let (after50, after99) = common::echo(&target(1), Some("a"), 1000, false).await;
        println!(
            "  client on b right after the floods above p50 {:7.3} ms   p99 {:7.3} ms",
            ms(after50),
            ms(after99)
        );
    }
    echo_rounds(&target, &cluster, rounds).await;
    if echo_only.is_some() {
        return;
    }
    let (flood50, flood99) = common::echo(&target(1), Some("a"), 1000, true).await;
    println!(
        "  client on b while another session on a floods to b p50 {:7.3} ms   p99 {:7.3} ms",
        ms(flood50),
        ms(flood99)
    );

    // One copy per link: what crosses the a-b link per output byte.
    let link_file = dir.path().join("link.txt");
    common::flood::payload(&link_file, 16);
    let link_bytes = std::fs::metadata(&link_file).unwrap().len() as usize;
    println!(
        "\nlink bytes (UDP, a to b) per byte of output, 16 MiB of cat on a read through b's mirror"
    );
    for viewers in [1, 10] {
        let (ratio, resynced, [by_a, by_b]) = link_bytes_per_output_byte(
            &target(1),
            (https[0], https[1]),
            &link_file,
            link_bytes,
            viewers,
        )
        .await;
        println!(
            "  {viewers:>2} viewer(s) on b                            {ratio:6.3} (1 copy = 1.0; {resynced} viewer(s) resynced; resyncs sent by a {by_a}, by b {by_b})"
        );
    }

    if std::env::var_os("TERMESH_BENCH_SLOW_VIEWER").is_some() {
        for _ in 0..3 {
            let (fast_resynced, [by_a, by_b], ratio) =
                slow_beside_fast(&target(1), (https[0], https[1]), &file, mib << 20).await;
            println!(
                "  a viewer acking 100 ms late beside one that keeps up, {mib} MiB: the reading viewer resynced: {fast_resynced}; resyncs sent by a {by_a}, by b {by_b}; link bytes per output byte {ratio:.3}"
            );
        }
    }

    // An idle link's traffic: b and c share no session.
    let idle_series = "termesh_peer_bytes_in_total{node=\"b\",peer=\"c\"}";
    let idle_before = metric(https[1], idle_series);
    tokio::time::sleep(Duration::from_secs(10)).await;
    println!(
        "  idle link b-c: {:.0} bytes/s received by b from c (pings, QUIC acks)",
        (metric(https[1], idle_series) - idle_before) / 10.0
    );

    // An idle peer link's memory: a node with two links beside a node
    // alone (same binary, no sessions).
    let single = common::Node::start("");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let alone = single.rss_kib();
    let clustered = rss_kib(cluster.procs[2].id());
    println!(
        "  RSS: node c (2 idle peer links, no sessions) {clustered} KiB, a node alone {alone} KiB: \
         about {} KiB per idle link",
        clustered.saturating_sub(alone) / 2
    );
}
