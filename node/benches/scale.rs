//! One node at scale (issue 19): thousands of idle sessions and as many
//! subscribed clients, at two sizes so growth shows. For each size it
//! prints create latency (sequential on an idle node, and under 16
//! parallel creators) and creates per second, the node's memory, threads
//! and file descriptors per session and per client, `list` latency and
//! size, and how long a `watch`er waits to hear of a new session. Beside
//! them, the machine's limit: a bare PTY spawn of the same program from
//! this process. It also prints the kernel limits that bound the count
//! (`kernel.pty.max`, `kernel.pid_max`, open files) and which one a size
//! would meet first. Last, the node's CPU per viewer of a session that
//! prints steadily, with 1 and 50 viewers.
//!
//!     cargo bench -p termesh-node --bench scale
//!
//! `TERMESH_SCALE_SIZES` (default `1000,3000`): session counts to run;
//! `TERMESH_SCALE_CONFIG`: the node's config text (`\n` for newlines),
//! e.g. `[store]\nenabled = false` to see what the store costs.
//! The bench raises its open-file limit (to 262,144 where it may, else to
//! the hard limit: a session takes one descriptor and a client one, so
//! 10,000 of each need about 20,100 in the node); it does not change
//! kernel settings: past 4,000 sessions run `sysctl -w
//! kernel.pty.max=20000` and give the node `[session] max_sessions` above
//! the size yourself (`TERMESH_SCALE_CONFIG`).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use portable_pty::CommandBuilder;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, ServerMsg};

const PROGRAM: &str = "exec sleep 100000";
const CREATORS: usize = 16;

fn read_num(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Threads and open descriptors of process `pid`.
fn threads_fds(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let threads = status
        .lines()
        .find(|l| l.starts_with("Threads:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    (threads, fds)
}

/// The limit: `n` bare PTY spawns of the same program, one after another.
fn bare_spawns(n: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(n);
    let mut children = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let pair = common::pty::open(120, 30);
        let mut cmd = CommandBuilder::new("sh");
        cmd.args(["-c", PROGRAM]);
        let child = pair.slave.spawn_command(cmd).unwrap();
        times.push(start.elapsed());
        children.push((child, pair.master));
    }
    for (mut child, _) in children {
        let _ = child.kill();
        let _ = child.wait();
    }
    times.sort();
    times
}

async fn timed_create(c: &mut Client) -> (Duration, String) {
    let start = Instant::now();
    let id = create(c, PROGRAM).await;
    (start.elapsed(), id)
}

/// Creates `n` sessions with `CREATORS` clients in parallel: each
/// create's latency, and the wall time of all.
async fn create_many(node: &Node, n: usize) -> (Vec<Duration>, Duration, Vec<String>) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CREATORS {
        let target = node.target.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect(&target).await.unwrap();
            let mut out = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                out.push(timed_create(&mut c).await);
            }
            out
        }));
    }
    let mut times = Vec::with_capacity(n);
    let mut ids = Vec::with_capacity(n);
    for t in tasks {
        for (d, id) in t.await.unwrap() {
            times.push(d);
            ids.push(id);
        }
    }
    let wall = start.elapsed();
    times.sort();
    (times, wall, ids)
}

/// `list` round trips (median of 21) and the reply's size in bytes.
async fn list(c: &mut Client) -> (Duration, usize, usize) {
    let mut times = Vec::new();
    let (mut size, mut count) = (0, 0);
    for _ in 0..21 {
        let start = Instant::now();
        let reply = c.request(ClientMsg::list).await.unwrap();
        times.push(start.elapsed());
        if let ServerMsg::Sessions { sessions, .. } = &reply {
            count = sessions.len();
            size = rmp_serde::to_vec_named(&reply).map_or(0, |v| v.len());
        }
    }
    times.sort();
    (times[times.len() / 2], size, count)
}

/// How long a watcher waits to hear of a session created by another
/// client (median and p99 of `k`).
async fn watch_latency(node: &Node, k: usize) -> (Duration, Duration, Vec<String>) {
    let mut watcher = Client::connect(&node.target).await.unwrap();
    let reply = watcher.request(|id| ClientMsg::Watch { id }).await.unwrap();
    assert!(matches!(reply, ServerMsg::Ok { .. }), "{reply:?}");
    let mut c = Client::connect(&node.target).await.unwrap();
    let mut times = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..k {
        let start = Instant::now();
        let id = create(&mut c, PROGRAM).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let msg = tokio::time::timeout_at(deadline.into(), watcher.recv())
                .await
                .expect("no notification in 30 s")
                .unwrap();
            if matches!(&msg, ServerMsg::SessionChanged { session } if session.id == id) {
                break;
            }
        }
        times.push(start.elapsed());
        ids.push(id);
    }
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99), ids)
}

/// Subscribes one client per session: the node's memory, threads and
/// descriptors with them, and the clients (kept open until dropped).
async fn subscribe_all(node: &Node, ids: &[String]) -> Vec<Client> {
    let mut clients = Vec::with_capacity(ids.len());
    for id in ids {
        let mut c = Client::connect(&node.target).await.unwrap();
        // `TERMESH_SCALE_RESUME=1`: resume from seq 0 (no snapshot, so no
        // screen model), to tell a client's cost from its session's model.
        let from = std::env::var_os("TERMESH_SCALE_RESUME").map(|_| 0);
        subscribe(&mut c, id, from).await;
        clients.push(c);
    }
    clients
}

fn line(label: &str, value: String) {
    println!("  {label:46} {value}");
}

fn run(rt: &tokio::runtime::Runtime, n: usize) {
    // Idle sessions drop their screen models after `model_idle`: 3 s here
    // so the bench sees it (60 s by default).
    let config = std::env::var("TERMESH_SCALE_CONFIG")
        .unwrap_or_else(|_| "[session]\\nmodel_idle = \"3s\"".into())
        .replace("\\n", "\n");
    let store = if config.contains("enabled = false") {
        "store off"
    } else {
        "store on"
    };
    println!(
        "\n{n} idle sessions (`sh -c '{PROGRAM}'`) and {n} subscribed clients, one node, {store}"
    );
    let node = Node::start(&config);
    std::thread::sleep(Duration::from_millis(300));
    let pid = node.child.id();
    let rss0 = node.rss_kib();
    let (threads0, fds0) = threads_fds(pid);
    // The PTY keeper that holds the programs (none with `keeper = false`).
    let keeper = std::fs::read_to_string(node.dir.path().join("keeper.lock"))
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok());
    let keeper0 = keeper.map(|k| (rss_kib(k), threads_fds(k).1));
    let bare = bare_spawns(200);
    let mut c = rt.block_on(Client::connect(&node.target)).unwrap();
    let mut seq: Vec<Duration> = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..200 {
        let (d, id) = rt.block_on(timed_create(&mut c));
        seq.push(d);
        ids.push(id);
    }
    seq.sort();
    line(
        "create, one client, idle node",
        format!("{}  (target p50 < 10 ms)", p50_p99(&seq)),
    );
    line("  limit: bare PTY spawn from this process", p50_p99(&bare));
    let (times, wall, more) = rt.block_on(create_many(&node, n - ids.len()));
    ids.extend(more);
    line(
        &format!("create, {CREATORS} clients in parallel"),
        format!(
            "{}  {:.0} creates/s  (target > 300/s)",
            p50_p99(&times),
            times.len() as f64 / wall.as_secs_f64()
        ),
    );
    std::thread::sleep(Duration::from_secs(2));
    let rss1 = node.rss_kib();
    let (threads1, fds1) = threads_fds(pid);
    let per = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / n as f64;
    line(
        "per session: node RSS, threads, descriptors",
        format!(
            "{:.1} KiB, {:.2} threads, {:.2} fds  (node {} MiB, {threads1} threads, {fds1} fds)",
            per(rss0, rss1),
            per(threads0, threads1),
            per(fds0, fds1),
            rss1 / 1024
        ),
    );
    if let (Some(k), Some((krss0, kfds0))) = (keeper, keeper0) {
        let (krss1, kfds1) = (rss_kib(k), threads_fds(k).1);
        line(
            "per session: PTY keeper RSS, descriptors",
            format!(
                "{:.2} KiB, {:.2} fds  (keeper {} KiB, {kfds1} fds, {:.1} s CPU for {n} spawns)",
                per(krss0, krss1),
                per(kfds0, kfds1),
                krss1,
                cpu_ms(k) / 1000.0
            ),
        );
    }
    let idle_cpu = |what: &str| {
        let (cpu0, t0) = (cpu_ms(pid), Instant::now());
        std::thread::sleep(Duration::from_secs(10));
        let per_s = (cpu_ms(pid) - cpu0) / t0.elapsed().as_secs_f64();
        line(
            &format!("node CPU, idle, with the {what}"),
            format!(
                "{per_s:.1} ms/s ({:.1} us/s per session)",
                per_s * 1000.0 / n as f64
            ),
        );
    };
    idle_cpu("sessions");
    let (l50, size, count) = rt.block_on(list(&mut c));
    line(
        "list",
        format!(
            "median {:6.2} ms, {count} sessions, {} KiB",
            ms(l50),
            size / 1024
        ),
    );
    let (w50, w99, wids) = rt.block_on(watch_latency(&node, 50));
    line(
        "create to `session_changed` at a watcher",
        format!("p50 {:6.2} ms  p99 {:6.2} ms", ms(w50), ms(w99)),
    );
    ids.extend(wids);
    let clients = rt.block_on(subscribe_all(&node, &ids[..n]));
    std::thread::sleep(Duration::from_secs(2));
    let rss2 = node.rss_kib();
    let (threads2, fds2) = threads_fds(pid);
    line(
        "per subscribed client: node RSS, threads, fds",
        format!(
            "{:.1} KiB, {:.2} threads, {:.2} fds  (node {} MiB, {threads2} threads, {fds2} fds)",
            per(rss1, rss2),
            per(threads1, threads2),
            per(fds1, fds2),
            rss2 / 1024
        ),
    );
    let (l50, _, _) = rt.block_on(list(&mut c));
    line(
        "list, with the clients",
        format!("median {:6.2} ms", ms(l50)),
    );
    idle_cpu("sessions and their clients");
    let rss3 = node.rss_kib();
    let dropped = metric(&node, "termesh_screen_models_dropped_total");
    line(
        "per subscribed client, idle models dropped",
        format!(
            "{:.1} KiB  (node {} MiB; {dropped:.0} models dropped)",
            per(rss1, rss3),
            rss3 / 1024
        ),
    );
    drop(clients);
    let removed = ids.len();
    let start = Instant::now();
    rt.block_on(async {
        for id in ids {
            remove(&mut c, id).await;
        }
    });
    line(
        "remove, one client, sequential",
        format!(
            "{:.0} removes/s",
            removed as f64 / start.elapsed().as_secs_f64()
        ),
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // Ten thousand sessions and their clients need about 20,100
    // descriptors in the node and 10,000 here (the node inherits the
    // limit): as root the hard limit is raised too, else the soft one to it.
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let want = hard.max(262_144);
        if setrlimit(Resource::RLIMIT_NOFILE, want, want).is_err() {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
    let sizes: Vec<usize> = std::env::var("TERMESH_SCALE_SIZES")
        .unwrap_or_else(|_| "1000,3000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&n| n >= 200)
        .collect();
    let files = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(0, |(soft, _)| soft);
    println!(
        "termesh at scale, {} cores; limits: kernel.pty.max {} ({} in use), kernel.pid_max {}, threads-max {}, open files {files}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        read_num("/proc/sys/kernel/pty/max"),
        read_num("/proc/sys/kernel/pty/nr"),
        read_num("/proc/sys/kernel/pid_max"),
        read_num("/proc/sys/kernel/threads-max"),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for n in sizes {
        run(&rt, n);
    }
    viewers_under_output(&rt);
}

/// A viewer of `session` until `until`: reads and acks per protocol; the
/// bytes it received.
async fn view_until(
    target: termesh_node::client::Target,
    session: String,
    until: tokio::time::Instant,
) -> u64 {
    let mut c = Client::connect(&target).await.unwrap();
    subscribe(&mut c, &session, None).await;
    let (mut got, mut unacked) = (0u64, 0u64);
    while let Ok(Ok(msg)) = tokio::time::timeout_at(until, c.recv()).await {
        if let ServerMsg::Output { seq, data, .. } = msg {
            got += data.len() as u64;
            unacked += data.len() as u64;
            if unacked >= WINDOW / 4 {
                unacked = 0;
                let ack = ClientMsg::Ack {
                    session: session.clone(),
                    seq,
                };
                if c.send(&ack).await.is_err() {
                    break;
                }
            }
        }
    }
    got
}

/// Node CPU per viewer of a session printing steadily (short lines, about
/// 2 MB/s): with 1 viewer and with 50, 10 s each.
fn viewers_under_output(rt: &tokio::runtime::Runtime) {
    println!("\nviewers of a session printing steadily (`seq 1 20000` every 50 ms), one node");
    let node = Node::start("");
    let pid = node.child.id();
    let mut c = rt.block_on(Client::connect(&node.target)).unwrap();
    let session = rt.block_on(create(&mut c, "while :; do seq 1 20000; sleep 0.05; done"));
    let mut per_count = Vec::new();
    for viewers in [1usize, 50] {
        let until = tokio::time::Instant::now() + Duration::from_secs(12);
        let tasks: Vec<_> = (0..viewers)
            .map(|_| rt.spawn(view_until(node.target.clone(), session.clone(), until)))
            .collect();
        std::thread::sleep(Duration::from_secs(1));
        let (cpu0, t0) = (cpu_ms(pid), Instant::now());
        std::thread::sleep(Duration::from_secs(10));
        let cpu = (cpu_ms(pid) - cpu0) / t0.elapsed().as_secs_f64();
        let got: u64 = rt.block_on(async {
            let mut sum = 0;
            for t in tasks {
                sum += t.await.unwrap();
            }
            sum
        });
        let mb_per_viewer = got as f64 / 1e6 / viewers as f64 / 12.0;
        line(
            &format!("{viewers} viewer(s)"),
            format!("node CPU {cpu:.0} ms/s, each viewer received {mb_per_viewer:.2} MB/s"),
        );
        per_count.push((viewers as f64, cpu, mb_per_viewer));
    }
    let [(v1, c1, _), (v2, c2, mb)] = [per_count[0], per_count[1]];
    let per_viewer = (c2 - c1) / (v2 - v1);
    line(
        "CPU per viewer under output",
        format!(
            "{per_viewer:.2} ms/s each ({:.2} ms per MB delivered)",
            per_viewer / mb.max(1e-9)
        ),
    );
    rt.block_on(remove(&mut c, session));
}

/// One `/metrics` value of the node (0 when absent).
fn metric(node: &Node, name: &str) -> f64 {
    let url = format!("{}/metrics", node.target.url);
    let text = ureq::get(&url)
        .call()
        .ok()
        .and_then(|r| r.into_string().ok())
        .unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0.0)
}
