//! A cluster's directory at scale (issue 19): 8 real nodes on
//! 127.0.0.1-8, from `termesh cluster init`, holding 100,000 idle sessions
//! between them (`exec sleep`, one process each). It prints how fast the
//! sessions were created, how long every node takes to list them all, the
//! memory one directory entry of another node's session costs, `list`
//! latency and size (one page of 10,000, a walk of every page, and an
//! unpaged `list`), how long a restarted node takes to have the whole
//! directory again, and the mesh's idle traffic per link. Beside them, the
//! machine's limits: where they allow fewer running programs than the
//! count, the rest are sessions whose program has exited (`true`), which
//! stay in the directory without a process or a PTY (said so).
//!
//!     cargo bench -p termesh-node --bench directory
//!
//! `TERMESH_DIR_SESSIONS` (default 100,000) and `TERMESH_DIR_NODES`
//! (default 8) change the sizes. 100,000 sessions need
//! `sysctl -w kernel.pty.max=110000 kernel.pid_max=4194304` (run as root;
//! the bench does not change kernel settings), about 330 KiB of memory per
//! running session for the `sleep` and its PTY (so about 33 GiB), and
//! 12,500 descriptors per node.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{ms, percentile, rss_kib};
use termesh_node::client::{Client, Target};
use termesh_transport::{ClientMsg, ServerMsg};

const BIN: &str = env!("CARGO_BIN_EXE_termesh");
const PROGRAM: &str = "exec sleep 1000000";
const PAGE: u32 = 10_000;
/// Parallel creators per node while its share is created.
const CREATORS: usize = 8;

fn read_num(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn mem_available_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// The nodes, stopped with SIGTERM on drop.
struct Cluster {
    dir: std::path::PathBuf,
    names: Vec<String>,
    https: Vec<SocketAddr>,
    procs: Vec<Option<Child>>,
    token: String,
}

impl Cluster {
    fn start(n: usize, root: &std::path::Path, per_node: usize) -> Cluster {
        let dir = root.join("cluster");
        let names: Vec<String> = (1..=n).map(|i| format!("n{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let extra = format!(
            "[session]\nmax_sessions = {}",
            (per_node + 1000).min(100_000)
        );
        let (https, token) = common::cluster_init(&dir, &refs, &extra);
        let mut cluster = Cluster {
            dir,
            names,
            https,
            procs: Vec::new(),
            token,
        };
        for i in 0..n {
            let child = cluster.spawn(i);
            cluster.procs.push(Some(child));
        }
        cluster
    }

    fn spawn(&self, i: usize) -> Child {
        Command::new(BIN)
            .args(["node", "--config"])
            .arg(self.dir.join(&self.names[i]).join("termesh.toml"))
            .env("TERMESH_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }

    fn target(&self, i: usize) -> Target {
        Target {
            url: format!("http://{}", self.https[i]),
            token: Some(self.token.clone()),
            token_source: "the benchmark".into(),
            ca: None,
            looked: Vec::new(),
        }
    }

    fn pid(&self, i: usize) -> u32 {
        self.procs[i].as_ref().map_or(0, |c| c.id())
    }

    fn stop(&mut self, i: usize) {
        if let Some(mut child) = self.procs[i].take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = child.wait();
        }
    }

    /// One `/metrics` value of node `i` summed over its series named `name`.
    fn metric_sum(&self, i: usize, name: &str) -> f64 {
        let text = ureq::get(&format!("http://{}/metrics", self.https[i]))
            .call()
            .ok()
            .and_then(|r| r.into_string().ok())
            .unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.procs.len() {
            self.stop(i);
        }
        for name in &self.names {
            common::stop_keeper(&self.dir.join(name).join("data"));
        }
    }
}

/// Connects to node `i`, retrying while it starts (bounded).
async fn connect(target: &Target) -> Client {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match Client::connect(target).await {
            Ok(c) => return c,
            Err(e) => {
                assert!(Instant::now() < deadline, "no node at {}: {e}", target.url);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Creates `n` sessions on the node of `target` with `CREATORS` clients:
/// each create's latency, and the wall time.
async fn create_share(
    target: &Target,
    n: usize,
    command: &'static str,
) -> (Vec<Duration>, Duration) {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CREATORS {
        let (target, next) = (target.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = connect(&target).await;
            let mut times = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let t = Instant::now();
                common::create(&mut c, command).await;
                times.push(t.elapsed());
            }
            times
        }));
    }
    let mut times = Vec::with_capacity(n);
    for t in tasks {
        times.extend(t.await.unwrap());
    }
    (times, start.elapsed())
}

/// Every page of the directory as node `c` lists it: (sessions, bytes,
/// pages, time of the walk).
async fn walk(c: &mut Client) -> (usize, usize, usize, Duration) {
    let start = Instant::now();
    let (mut count, mut bytes, mut pages) = (0, 0, 0);
    let mut after = None;
    loop {
        let reply = c
            .request(|id| ClientMsg::List {
                id,
                after: after.clone(),
                limit: Some(PAGE),
            })
            .await
            .unwrap();
        bytes += rmp_serde::to_vec_named(&reply).map_or(0, |v| v.len());
        pages += 1;
        let ServerMsg::Sessions { sessions, next, .. } = reply else {
            panic!("{reply:?}");
        };
        count += sessions.len();
        match next {
            Some(n) => after = Some(n),
            None => return (count, bytes, pages, start.elapsed()),
        }
    }
}

/// Waits (bounded) until node `i` lists at least `want` sessions: the
/// time it took.
async fn until_listed(cluster: &Cluster, i: usize, want: usize, bound: Duration) -> Duration {
    let start = Instant::now();
    let mut c = connect(&cluster.target(i)).await;
    loop {
        let (count, ..) = walk(&mut c).await;
        if count >= want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < bound,
            "node {} lists {count} of {want} sessions after {bound:?}",
            cluster.names[i]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn line(label: &str, value: String) {
    println!("  {label:52} {value}");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let env = |name: &str, default: usize| -> usize {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let nodes = env("TERMESH_DIR_NODES", 8).clamp(2, 16);
    let asked = env("TERMESH_DIR_SESSIONS", 100_000).max(nodes);
    // The limits, and the count they allow.
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
    let files = getrlimit(Resource::RLIMIT_NOFILE).map_or(0, |(soft, _)| soft as usize);
    let pty_room = read_num("/proc/sys/kernel/pty/max")
        .saturating_sub(read_num("/proc/sys/kernel/pty/nr")) as usize;
    let procs_now = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            })
            .count()
        })
        .unwrap_or(0);
    let pid_room =
        (read_num("/proc/sys/kernel/pid_max") as usize).saturating_sub(procs_now + 2_000);
    // A running session costs the machine about 330 KiB beside the nodes
    // (the program's pages and page tables, its kernel stack, the PTY's
    // buffers: measured at 29,000 sleeps here); 6 GiB stay free for the
    // nodes and their directories.
    let mem_room = (mem_available_kib() as usize).saturating_sub(6 << 20) / 330;
    let fd_room = files.saturating_sub(500) * nodes;
    let running = [
        asked,
        pty_room.saturating_sub(100),
        pid_room,
        mem_room,
        fd_room,
    ]
    .into_iter()
    .min()
    .unwrap()
        / nodes
        * nodes;
    let ended = (asked - running) / nodes * nodes;
    let sessions = running + ended;
    println!(
        "termesh directory at scale: {nodes} nodes, {} cores; limits: kernel.pty.max room {pty_room}, pid room {pid_room}, memory room {mem_room} running sessions (at 330 KiB each), open files {files} per node",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    if running < asked {
        println!(
            "  asked for {asked} sessions: the machine's limits allow {running} running programs; the other {ended} are sessions whose program has exited (`true`), which stay in the directory without a process or a PTY"
        );
    }
    let (per_node, running_per_node) = (sessions / nodes, running / nodes);
    let root = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(nodes, root.path(), per_node);
    // Every node up, every link up: each lists a session of the first.
    let mut first = connect(&cluster.target(0)).await;
    let probe = common::create(&mut first, PROGRAM).await;
    for i in 0..nodes {
        until_listed(&cluster, i, 1, Duration::from_secs(120)).await;
    }
    common::remove(&mut first, probe).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss0 = rss_kib(cluster.pid(0));
    let mem0 = mem_available_kib();

    // The other nodes' shares first, so node 1's RSS growth is directory
    // entries only; then its own.
    println!("\n{sessions} sessions, {per_node} per node ({running_per_node} running `sh -c '{PROGRAM}'`, the rest `true`), created on each node by {CREATORS} clients");
    let mut all_times = Vec::new();
    let start = Instant::now();
    for i in (0..nodes).rev() {
        if i == 0 {
            // Node 1 has every other node's entries now.
            until_listed(
                &cluster,
                0,
                per_node * (nodes - 1),
                Duration::from_secs(600),
            )
            .await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            let rss1 = rss_kib(cluster.pid(0));
            line(
                "memory per directory entry (another node's session)",
                format!(
                    "{:.2} KiB  (node n1 RSS {} -> {} MiB for {} entries)",
                    rss1.saturating_sub(rss0) as f64 / (per_node * (nodes - 1)) as f64,
                    rss0 / 1024,
                    rss1 / 1024,
                    per_node * (nodes - 1)
                ),
            );
        }
        let (mut times, wall) = create_share(&cluster.target(i), running_per_node, PROGRAM).await;
        let (more, more_wall) =
            create_share(&cluster.target(i), per_node - running_per_node, "true").await;
        times.extend(more);
        let wall = wall + more_wall;
        times.sort();
        println!(
            "    {}: {per_node} creates in {:.1} s ({:.0}/s), {}",
            cluster.names[i],
            wall.as_secs_f64(),
            per_node as f64 / wall.as_secs_f64(),
            common::p50_p99(&times),
        );
        all_times.extend(times);
    }
    let created = start.elapsed();
    all_times.sort();
    line(
        "create, all nodes",
        format!(
            "{:.0} creates/s overall, p50 {:.1} ms, p99 {:.1} ms",
            sessions as f64 / created.as_secs_f64(),
            ms(percentile(&all_times, 0.5)),
            ms(percentile(&all_times, 0.99))
        ),
    );
    let mut settled = Duration::ZERO;
    for i in 0..nodes {
        settled = settled.max(until_listed(&cluster, i, sessions, Duration::from_secs(600)).await);
    }
    line(
        "every node lists every session, after the last create",
        format!("{:.2} s", settled.as_secs_f64()),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss: Vec<u64> = (0..nodes).map(|i| rss_kib(cluster.pid(i))).collect();
    line(
        "node RSS (own sessions + the whole directory)",
        format!(
            "{} - {} MiB; machine memory used by the running sessions' programs and PTYs: {:.0} KiB each",
            rss.iter().min().unwrap() / 1024,
            rss.iter().max().unwrap() / 1024,
            mem0.saturating_sub(mem_available_kib())
                .saturating_sub(rss.iter().sum::<u64>()) as f64
                / running.max(1) as f64
        ),
    );

    // list: one page, every page, unpaged.
    let mut c = connect(&cluster.target(0)).await;
    let mut page_times = Vec::new();
    let mut page_bytes = 0;
    for _ in 0..11 {
        let t = Instant::now();
        let reply = c
            .request(|id| ClientMsg::List {
                id,
                after: None,
                limit: Some(PAGE),
            })
            .await
            .unwrap();
        page_times.push(t.elapsed());
        page_bytes = rmp_serde::to_vec_named(&reply).map_or(0, |v| v.len());
    }
    page_times.sort();
    line(
        &format!("list, one page of {PAGE}"),
        format!(
            "median {:.1} ms, {} KiB",
            ms(percentile(&page_times, 0.5)),
            page_bytes / 1024
        ),
    );
    let (count, bytes, pages, took) = walk(&mut c).await;
    line(
        "list, every page",
        format!(
            "{:.1} ms for {count} sessions in {pages} pages, {} KiB",
            ms(took),
            bytes / 1024
        ),
    );
    let t = Instant::now();
    let unpaged = c.request(ClientMsg::list).await;
    line(
        "list, unpaged",
        match unpaged {
            Ok(ServerMsg::Sessions { sessions, next, .. }) => format!(
                "{:.1} ms, {} sessions, next page {}",
                ms(t.elapsed()),
                sessions.len(),
                next.map_or("none".into(), |_| "named".to_string())
            ),
            other => format!("{:.1} ms: {other:?}", ms(t.elapsed())),
        },
    );

    // Idle mesh traffic: every node's link bytes over 20 s.
    let links = nodes * (nodes - 1);
    let sum = |c: &Cluster| -> f64 {
        (0..nodes)
            .map(|i| c.metric_sum(i, "termesh_peer_bytes_out_total"))
            .sum()
    };
    let (b0, t0) = (sum(&cluster), Instant::now());
    tokio::time::sleep(Duration::from_secs(20)).await;
    let per_link = (sum(&cluster) - b0) / t0.elapsed().as_secs_f64() / links as f64;
    let cpu: f64 = (0..nodes)
        .map(|i| common::cpu_ms(cluster.pid(i)))
        .sum::<f64>();
    line(
        "mesh idle traffic per link and direction",
        format!("{per_link:.0} bytes/s ({links} directions)"),
    );
    let t1 = Instant::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let cpu_after: f64 = (0..nodes).map(|i| common::cpu_ms(cluster.pid(i))).sum();
    line(
        "node CPU, idle, all nodes together",
        format!("{:.1} ms/s", (cpu_after - cpu) / t1.elapsed().as_secs_f64()),
    );

    // A restarted node: the last one, SIGTERM (its sessions' programs end
    // with it and come back `lost` from its store), then started again.
    let last = nodes - 1;
    cluster.stop(last);
    let t = Instant::now();
    let child = cluster.spawn(last);
    cluster.procs[last] = Some(child);
    let took = until_listed(&cluster, last, sessions, Duration::from_secs(600)).await;
    line(
        "a restarted node lists the whole directory",
        format!(
            "{:.2} s after its start ({:.2} s with the stop)",
            took.as_secs_f64(),
            t.elapsed().as_secs_f64()
        ),
    );
}
