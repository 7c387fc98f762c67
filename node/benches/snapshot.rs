//! Snapshot latency where it used to be cold (issue 19), each figure beside
//! avt parsing the same text alone in the same run:
//! - a full 4 MiB ring filled by a shell loop, asked right after it filled,
//!   with nobody watching the session and with a viewer on it;
//! - during a `yes` flood that never pauses, with a viewer on it;
//! - the first request after the node restarted on the same data dir;
//! - the CPU that warming costs: the same output watched and unwatched.
//!
//!     cargo bench -p termesh-node --bench snapshot
//!
//! `TERMESH_SNAPSHOT_ROUNDS` (default 3) alternating rounds.

use std::time::Duration;

mod common;

use common::*;
use termesh_node::client::Client;

/// 60,000 coloured lines (about 5 MiB: the ring holds its newest 4 MiB),
/// then a marker, then quiet.
const FILL: &str = r#"stty -echo; i=0; while [ $i -lt 60000 ]; do printf '\033[3%dm%06d\033[0m some text to fill the ring with, line after line after line\n' $((i % 8)) $i; i=$((i+1)); done; echo ring-full; exec sleep 100000"#;

/// A viewer that subscribes and never acks: the session is watched, and
/// its output runs on without it.
async fn watch(node: &Node, session: &str) -> Client {
    let mut viewer = Client::connect(&node.target).await.unwrap();
    subscribe(&mut viewer, session, None).await;
    viewer
}

fn metric(node: &Node, name: &str) -> f64 {
    let url = format!("{}/metrics", node.target.url);
    let text = ureq::get(&url).call().unwrap().into_string().unwrap();
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0.0)
}

struct Round {
    /// Output the request for the watched ring emulated (its model's lag).
    caught_up: f64,
    again: Duration,
    unwatched: Duration,
    watched: Duration,
    flood: Vec<Duration>,
}

async fn round(node: &Node, c: &mut Client) -> (Round, [String; 2]) {
    let unwatched_id = create(c, FILL).await;
    wait_tail(c, &unwatched_id, b"ring-full\r\n").await;
    let unwatched = timed_screen(c, &unwatched_id).await.0;
    let again = timed_screen(c, &unwatched_id).await.0;

    let watched_id = create(c, FILL).await;
    let viewer = watch(node, &watched_id).await;
    wait_tail(c, &watched_id, b"ring-full\r\n").await;
    let before = metric(node, "termesh_screen_request_bytes_total");
    let watched = timed_screen(c, &watched_id).await.0;
    let caught_up = metric(node, "termesh_screen_request_bytes_total") - before;
    drop(viewer);

    let flood_id = create(
        c,
        "exec yes '\x1b[32mflood\x1b[0m line after line after line'",
    )
    .await;
    let viewer = watch(node, &flood_id).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut flood = Vec::new();
    for _ in 0..5 {
        flood.push(timed_screen(c, &flood_id).await.0);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    drop(viewer);
    remove(c, flood_id).await;
    (
        Round {
            caught_up,
            again,
            unwatched,
            watched,
            flood,
        },
        [unwatched_id, watched_id],
    )
}

/// Node CPU for a shell loop's 5 MiB of coloured lines (a rate warming
/// keeps up with), watched or not, and the output emulated in the
/// background meanwhile.
async fn warming_cost(node: &Node, c: &mut Client, watched: bool) -> (f64, f64) {
    let script = FILL.replace("echo ring-full", "echo fill-done");
    let warm_before = metric(node, "termesh_screen_warm_bytes_total");
    let cpu_before = cpu_ms(node.child.id());
    let id = create(c, &script).await;
    let viewer = if watched {
        Some(watch(node, &id).await)
    } else {
        None
    };
    wait_tail(c, &id, b"fill-done\r\n").await;
    // The idle catch-up after the output stops is part of the cost.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let cpu = cpu_ms(node.child.id()) - cpu_before;
    let warm = metric(node, "termesh_screen_warm_bytes_total") - warm_before;
    drop(viewer);
    remove(c, id).await;
    (cpu, warm)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: usize = std::env::var("TERMESH_SNAPSHOT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "snapshot latency, {} cores, {rounds} rounds",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let node = Node::start("");
    std::thread::sleep(Duration::from_millis(300));
    let mut c = rt.block_on(Client::connect(&node.target)).unwrap();
    let mut results = Vec::new();
    let mut kept = Vec::new();
    let mut avt = Vec::new();
    for _ in 0..rounds {
        avt.push(avt_feed_rate(true));
        let (r, ids) = rt.block_on(round(&node, &mut c));
        results.push(r);
        kept = ids.to_vec();
    }
    let med = |mut v: Vec<Duration>| {
        v.sort();
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    avt.sort_by(|a, b| a.total_cmp(b));
    let rate = avt[avt.len() / 2];
    println!(
        "  limit: avt alone parses the ring's text at {rate:.0} MB/s here: {:.0} ms for a 4 MiB ring, {:.0} ms for 1 MiB",
        4.194 / rate * 1000.0,
        1.049 / rate * 1000.0
    );
    let show = |label: &str, v: Vec<Duration>| {
        let (m, lo, hi) = med(v);
        println!(
            "  {label:44} median {:7.2} ms  range {:.2}-{:.2} ms  (target < 100 ms)",
            ms(m),
            ms(lo),
            ms(hi)
        );
    };
    show(
        "full ring, nobody watching, just filled",
        results.iter().map(|r| r.unwatched).collect(),
    );
    show(
        "the same again, nothing new",
        results.iter().map(|r| r.again).collect(),
    );
    show(
        "full ring, a viewer on it, just filled",
        results.iter().map(|r| r.watched).collect(),
    );
    let mut lags: Vec<f64> = results.iter().map(|r| r.caught_up / 1024.0).collect();
    lags.sort_by(|a, b| a.total_cmp(b));
    println!(
        "    its model was {lags:.0?} KiB behind when asked (warming kept up with a shell loop)"
    );
    show(
        "during a `yes` flood, a viewer on it",
        results.iter().flat_map(|r| r.flood.clone()).collect(),
    );
    drop(c);

    let dir = node.stop_keeping_dir();
    let node = Node::start_in(dir, "");
    let mut c = rt.block_on(Client::connect(&node.target)).unwrap();
    let after: Vec<Duration> = kept
        .iter()
        .map(|id| rt.block_on(timed_screen(&mut c, id)).0)
        .collect();
    println!(
        "  first request after a restart (store)      {:.2} ms and {:.2} ms (the two full rings of the last round)",
        ms(after[0]),
        ms(after[1])
    );

    let (mut plain, mut warmed, mut emulated) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        plain.push(rt.block_on(warming_cost(&node, &mut c, false)).0);
        let (cpu, warm) = rt.block_on(warming_cost(&node, &mut c, true));
        warmed.push(cpu);
        emulated.push(warm);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (plain, warmed, emulated) = (median(plain), median(warmed), median(emulated));
    let mb = emulated / 1e6;
    println!("\nwarming's CPU, a shell loop's 60,000 coloured lines (median of {rounds} alternating rounds)");
    println!(
        "  node CPU unwatched {plain:.0} ms, watched {warmed:.0} ms; {mb:.1} MB emulated in the background"
    );
    println!(
        "  warming costs {:.1} ms of CPU per MB of output (limit: avt alone {:.1} ms per MB, termesh's model fed line-sized frames {:.1})",
        (warmed - plain) / mb.max(0.001),
        1000.0 / rate,
        1000.0 / model_feed_rate()
    );
}
