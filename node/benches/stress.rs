//! A node under synthetic host load (a program, not assertions). It starts
//! the real `termesh` binary, drives a realistic mix of clients, and runs
//! `stress-ng --cpu $(nproc) --vm 2 --vm-bytes <size>` on the same host:
//!
//! - a typist on an echo session (a keystroke every 20 ms, echo timed);
//! - a viewer of a flood (a shell loop writing 256 KiB of text, pausing
//!   10 ms, again: 7 to 10 MB/s here, which the viewer keeps up with),
//!   acking as the protocol says;
//! - a slow viewer (16 KiB window, a pause after every message) of a
//!   build-log-like session;
//! - 50 idle viewers of a quiet session.
//!
//! It prints disconnects (must be 0), resyncs per viewer (at most 1),
//! stale episodes (allowed, each recovered), reaps (must be 0: every
//! connection holds a subscription), echo p50/p99 and flood throughput idle
//! and under stress, and the host stall the node credited.
//!
//!     cargo bench -p termesh-node --bench stress
//!
//! `TERMESH_STRESS_SECONDS` (default 120), `TERMESH_STRESS_IDLE_SECONDS`
//! (20), `TERMESH_STRESS_VM_BYTES` (50%). Installs stress-ng if missing.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, ServerMsg};

// Phase 0 (the default) is the run without load.
const STRESS: u8 = 1;
const DONE: u8 = 2;
const IDLE_VIEWERS: usize = 50;

/// Liveness bounds shorter than the defaults, so a two-minute run would
/// show wrongly stale or reaped connections if stalls were not discounted.
const CONFIG: &str = "[ws]\nping_interval = \"2s\"\nstale_after = \"6s\"\nreap_after = \"12s\"\n";

/// What the clients saw, per phase where it matters.
#[derive(Default)]
struct Seen {
    phase: AtomicU8,
    echo: Mutex<[Vec<Duration>; 2]>,
    flood_bytes: [AtomicU64; 2],
    disconnects: AtomicU64,
    resyncs: Mutex<HashMap<&'static str, u64>>,
}

impl Seen {
    fn phase(&self) -> usize {
        (self.phase.load(Ordering::Relaxed) as usize).min(1)
    }

    fn running(&self) -> bool {
        self.phase.load(Ordering::Relaxed) != DONE
    }

    fn lost(&self, who: &str, why: anyhow::Error) {
        if self.running() {
            eprintln!("  ! {who} disconnected: {why:#}");
            self.disconnects.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn resync(&self, who: &'static str) {
        *self.resyncs.lock().unwrap().entry(who).or_default() += 1;
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ensure_stress_ng() {
    if Command::new("stress-ng").arg("--version").output().is_ok() {
        return;
    }
    println!("installing stress-ng (apt-get)");
    let ok = Command::new("sh")
        .args([
            "-c",
            "apt-get update -qq && apt-get install -y -qq stress-ng >/dev/null",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("stress-ng is missing and could not be installed; install it and run again");
        std::process::exit(1);
    }
}

/// Reads and acks one subscription until the run ends; `pause` after each
/// message makes a slow reader.
async fn view(
    mut c: Client,
    session: String,
    window: u64,
    pause: Option<Duration>,
    who: &'static str,
    seen: Arc<Seen>,
    count_flood: bool,
) {
    let mut unacked = 0u64;
    let mut last = 0u64;
    while seen.running() {
        let msg = match tokio::time::timeout(Duration::from_millis(500), c.recv()).await {
            Err(_) => continue,
            Ok(Err(e)) => return seen.lost(who, e),
            Ok(Ok(msg)) => msg,
        };
        match msg {
            ServerMsg::Output { seq, data, .. } => {
                assert_eq!(seq, last + 1, "{who}: hole after {last}");
                last = seq;
                unacked += data.len() as u64;
                if count_flood {
                    seen.flood_bytes[seen.phase()].fetch_add(data.len() as u64, Ordering::Relaxed);
                }
                if unacked >= window / 4 {
                    unacked = 0;
                    let ack = ClientMsg::Ack {
                        session: session.clone(),
                        seq,
                    };
                    if let Err(e) = c.send(&ack).await {
                        return seen.lost(who, e);
                    }
                }
            }
            ServerMsg::Snapshot { seq, .. } => last = seq,
            ServerMsg::ResyncRequired { .. } => seen.resync(who),
            _ => {}
        }
        if let Some(pause) = pause {
            tokio::time::sleep(pause).await;
        }
    }
}

/// A keystroke every 20 ms, each timed until its echo comes back.
async fn type_keys(mut c: Client, session: String, seen: Arc<Seen>) {
    let mut i = 0u64;
    while seen.running() {
        i += 1;
        let key = format!("<{i}>");
        let sent = Instant::now();
        let phase = seen.phase();
        let input = ClientMsg::Input {
            session: session.clone(),
            data: key.clone().into_bytes(),
        };
        if let Err(e) = c.send(&input).await {
            return seen.lost("typist", e);
        }
        let mut echoed = String::new();
        while !echoed.contains(&key) {
            match c.recv().await {
                Ok(ServerMsg::Output { data, .. }) => {
                    echoed.push_str(&String::from_utf8_lossy(&data))
                }
                Ok(ServerMsg::ResyncRequired { .. }) => seen.resync("typist"),
                Ok(_) => {}
                Err(e) => return seen.lost("typist", e),
            }
        }
        if i > 10 && phase == seen.phase() {
            seen.echo.lock().unwrap()[phase].push(sent.elapsed());
        }
        let ack = ClientMsg::Ack {
            session: session.clone(),
            seq: u64::MAX,
        };
        if let Err(e) = c.send(&ack).await {
            return seen.lost("typist", e);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn metrics(url: &str) -> HashMap<String, f64> {
    let url = format!("{url}/metrics");
    let text = tokio::task::spawn_blocking(move || {
        ureq::get(&url)
            .call()
            .ok()
            .and_then(|r| r.into_string().ok())
    })
    .await
    .unwrap()
    .unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.split('{').next()?.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn used_memory_gib() -> f64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| -> f64 {
        info.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0.0)
    };
    (field("MemTotal:") - field("MemAvailable:")) / (1 << 20) as f64
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let seconds: u64 = env_or("TERMESH_STRESS_SECONDS", 120);
    let idle_seconds: u64 = env_or("TERMESH_STRESS_IDLE_SECONDS", 20);
    let vm_bytes: String = env_or("TERMESH_STRESS_VM_BYTES", "50%".to_string());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    ensure_stress_ng();
    let node = Node::start(CONFIG);
    let url = node.target.url.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let seen = Arc::new(Seen::default());
    let stress_cmd = format!(
        "stress-ng --cpu {cores} --vm 2 --vm-bytes {vm_bytes} --timeout {seconds}s --quiet"
    );
    println!("termesh under synthetic host load, {cores} cores");
    println!("  load: {stress_cmd}");
    println!("  clients: a typist, a flood viewer, a slow viewer, {IDLE_VIEWERS} idle viewers");
    println!("  node liveness: ping 2 s, stale after 6 s, reap after 12 s");

    let dir = tempfile::tempdir().unwrap();
    let chunk = dir.path().join("chunk.txt");
    let line = "flood: the quick brown fox jumps over the lazy dog 0123456789 abcdefghij\n";
    std::fs::write(&chunk, line.repeat((256 << 10) / line.len())).unwrap();
    let (peak_mem, stall_before) = rt.block_on(async {
        let mut admin = Client::connect(&node.target).await.unwrap();
        let echo = create(&mut admin, "stty raw -echo; exec cat").await;
        let flood_cmd = format!("while :; do cat {}; sleep 0.01; done", chunk.display());
        let flood = create(&mut admin, &flood_cmd).await;
        let chatty = create(&mut admin, "while :; do seq 1 1000; sleep 0.1; done").await;
        let quiet = create(&mut admin, "exec sleep 100000").await;
        // Every connection from here on holds a subscription.
        admin.close().await;
        let mut tasks = Vec::new();
        // The typist has a thread and runtime of its own, so what it
        // measures is the node, not this process's other clients.
        let typist = std::thread::spawn({
            let (target, seen) = (node.target.clone(), seen.clone());
            move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let mut typist = Client::connect(&target).await.unwrap();
                    subscribe(&mut typist, &echo, Some(0)).await;
                    type_keys(typist, echo, seen).await;
                })
            }
        });
        let mut viewer = Client::connect(&node.target).await.unwrap();
        subscribe(&mut viewer, &flood, None).await;
        tasks.push(tokio::spawn(view(
            viewer,
            flood.clone(),
            WINDOW,
            None,
            "flood viewer",
            seen.clone(),
            true,
        )));
        let mut slow = Client::connect(&node.target).await.unwrap();
        let reply = slow
            .request(|id| ClientMsg::Subscribe {
                id,
                session: chatty.clone(),
                from_seq: None,
                window: Some(16 << 10),
                scrollback: None,
            })
            .await
            .unwrap();
        assert!(matches!(reply, ServerMsg::Subscribed { .. }));
        tasks.push(tokio::spawn(view(
            slow,
            chatty,
            16 << 10,
            Some(Duration::from_millis(25)),
            "slow viewer",
            seen.clone(),
            false,
        )));
        for _ in 0..IDLE_VIEWERS {
            let mut c = Client::connect(&node.target).await.unwrap();
            subscribe(&mut c, &quiet, None).await;
            tasks.push(tokio::spawn(view(
                c,
                quiet.clone(),
                WINDOW,
                None,
                "idle viewer",
                seen.clone(),
                false,
            )));
        }

        println!("\nphase 1: {idle_seconds} s without load");
        tokio::time::sleep(Duration::from_secs(idle_seconds)).await;
        let stall_before = metrics(&url).await["termesh_host_stall_seconds_total"];
        seen.phase.store(STRESS, Ordering::Relaxed);
        println!("phase 2: {seconds} s under stress-ng");
        let mut stress = Command::new("sh")
            .args(["-c", &stress_cmd])
            .spawn()
            .expect("stress-ng starts");
        let started = Instant::now();
        let mut peak_mem = 0f64;
        while stress.try_wait().unwrap().is_none() {
            peak_mem = peak_mem.max(used_memory_gib());
            tokio::time::sleep(Duration::from_millis(500)).await;
            if started.elapsed() > Duration::from_secs(seconds + 60) {
                let _ = stress.kill();
            }
        }
        // Let every stale connection answer again before judging.
        tokio::time::sleep(Duration::from_secs(8)).await;
        seen.phase.store(DONE, Ordering::Relaxed);
        for task in tasks {
            let _ = task.await;
        }
        let _ = typist.join();
        (peak_mem, stall_before)
    });
    let m = rt.block_on(metrics(&url));
    let echo = seen.echo.lock().unwrap();
    let stats = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        if v.is_empty() {
            return (0.0, 0.0, 0);
        }
        (ms(percentile(&v, 0.5)), ms(percentile(&v, 0.99)), v.len())
    };
    let (i50, i99, in_) = stats(&echo[0]);
    let (s50, s99, sn) = stats(&echo[1]);
    let rate = |phase: usize, secs: u64| {
        seen.flood_bytes[phase].load(Ordering::Relaxed) as f64 / secs as f64 / 1e6
    };
    let resyncs = seen.resyncs.lock().unwrap().clone();
    let resync = |who: &str| resyncs.get(who).copied().unwrap_or(0);
    println!("\nresults                         without load       under stress");
    println!(
        "  echo p50 / p99 (ms)         {i50:6.2} / {i99:6.2}   {s50:7.2} / {s99:7.2}   ({in_} and {sn} keys; target p99 < 50 ms under stress)"
    );
    println!(
        "  flood to its viewer          {:8.1} MB/s   {:8.1} MB/s",
        rate(0, idle_seconds),
        rate(1, seconds)
    );
    println!(
        "  disconnects                 {} (must be 0)",
        seen.disconnects.load(Ordering::Relaxed)
    );
    println!(
        "  resyncs                     typist {}, flood viewer {}, slow viewer {}, idle viewers {} (at most 1 each)",
        resync("typist"),
        resync("flood viewer"),
        resync("slow viewer"),
        resync("idle viewer")
    );
    println!(
        "  stale episodes              {} (allowed), stale now {} (each recovered: 0)",
        m.get("termesh_stale_episodes_total").unwrap_or(&f64::NAN),
        m.get("termesh_stale_connections").unwrap_or(&f64::NAN)
    );
    println!(
        "  reaps                       {} (must be 0: every connection holds a subscription)",
        m.get("termesh_reaps_total").unwrap_or(&f64::NAN)
    );
    println!(
        "  host stall credited         {:.2} s during the stress phase",
        m.get("termesh_host_stall_seconds_total").unwrap_or(&0.0) - stall_before
    );
    println!("  peak memory in use          {peak_mem:.1} GiB");
    println!(
        "  node RSS at the end         {} KiB",
        rss_kib(node.child.id())
    );
    let metric = |name: &str| m.get(name).copied().unwrap_or(f64::NAN);
    let failures: Vec<&str> = [
        (seen.disconnects.load(Ordering::Relaxed) > 0, "disconnects"),
        (resyncs.values().any(|n| *n > 1), "more than one resync"),
        (metric("termesh_reaps_total") != 0.0, "reaps"),
        (
            metric("termesh_stale_connections") != 0.0,
            "stale connections not recovered",
        ),
    ]
    .into_iter()
    .filter_map(|(failed, what)| failed.then_some(what))
    .collect();
    if !failures.is_empty() {
        println!("\nFAILED: {}", failures.join(", "));
        // `exit` runs no destructors: stop the node (and its sessions) first.
        drop(node);
        std::process::exit(1);
    }
    println!("\npassed: no disconnects, no reaps, at most one resync each, every stale episode recovered");
}
