//! The nemesis's world: three real nodes (a, b, c on 127.0.0.1-3) whose
//! mesh links each run through a UDP relay in this process (so a link can
//! be cut), three sessions printing numbered lines at different rates, and
//! what every task records while the run goes on.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::check::{At, Fault, Frames, Request, Sub};
use crate::common::cluster::{create, loopback_specs, Cluster, NodeSpec};
use crate::common::netns::UdpImpair;
use termesh_node::client::Target;

pub const NAMES: [&str; 3] = ["a", "b", "c"];

/// A session the run follows: its id and its owner.
pub struct Session {
    pub id: String,
    pub owner: usize,
}

/// The programs: a steady ticker, a bursty flood (large replies come from
/// it) and a slow ticker that echoes what is typed. Each prints
/// `\nstart PID` first (so a run cut mid-line is told apart), then
/// `PID N .` lines and `PID echo TOKEN .` for typed lines (check.rs).
const PROGRAMS: [(&str, &str); 3] = [
    (
        "ticker",
        "stty -echo; printf '\\nstart %s\\n' $$; i=0; while :; do i=$((i+1)); echo \"$$ $i .\"; sleep 0.02; done",
    ),
    (
        "flood",
        "stty -echo; printf '\\nstart %s\\n' $$; i=0; while :; do i=$((i+1)); echo \"$$ $i . xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"; [ $((i % 300)) -eq 0 ] && sleep 0.4; done",
    ),
    (
        "echo",
        "stty -echo; printf '\\nstart %s\\n' $$; i=0; while :; do if read -r -t 0.2 l; then echo \"$$ echo $l .\"; fi; i=$((i+1)); echo \"$$ $i .\"; done",
    ),
];

/// What the run records, shared by every task.
#[derive(Default)]
pub struct Record {
    pub frames: Frames,
    pub violations: Vec<String>,
    pub faults: Vec<Fault>,
    pub subs: Vec<Sub>,
    pub requests: Vec<Request>,
    pub resyncs: u64,
    pub subscriptions: u64,
    pub typed: u64,
    pub echoed: u64,
    pub connect_failures: u64,
    pub lines: u64,
    /// Error replies by code.
    pub errors: std::collections::BTreeMap<String, u64>,
    /// Faults applied by kind.
    pub applied: std::collections::BTreeMap<&'static str, u64>,
}

pub struct World {
    pub cluster: Mutex<Cluster>,
    /// The relay of each dialling pair (lower name dials): (x, y, relay).
    pub relays: Vec<(usize, usize, UdpImpair)>,
    pub targets: Vec<Target>,
    pub http: Vec<SocketAddr>,
    pub token: String,
    pub sessions: Vec<Session>,
    pub record: Mutex<Record>,
    pub started: Instant,
}

impl World {
    /// Seconds since the run started.
    pub fn now(&self) -> At {
        self.started.elapsed().as_secs_f64()
    }

    pub fn violation(&self, what: String) {
        println!("VIOLATION at {:.1} s: {what}", self.now());
        self.record.lock().unwrap().violations.push(what);
    }

    /// Cuts (or heals) the mesh link between `x` and `y`.
    pub fn partition(&self, x: usize, y: usize, on: bool) {
        for (a, b, relay) in &self.relays {
            if (*a, *b) == (x.min(y), x.max(y)) {
                relay.partition(on);
            }
        }
    }

    /// Starts the cluster and the sessions (one per node).
    pub async fn start() -> Arc<World> {
        let specs = loopback_specs(&NAMES);
        let mut relays = Vec::new();
        for x in 0..NAMES.len() {
            for y in x + 1..NAMES.len() {
                let ip = |s: &NodeSpec| match s.http.ip() {
                    std::net::IpAddr::V4(v4) => v4,
                    _ => unreachable!(),
                };
                let relay = UdpImpair::start(
                    ip(&specs[x]),
                    ip(&specs[x]),
                    specs[y].quic,
                    Duration::ZERO,
                    0.0,
                )
                .await;
                relays.push((x, y, relay));
            }
        }
        // The dialler of each pair reaches its peer through the relay.
        let swaps: Vec<(String, String, String)> = relays
            .iter()
            .map(|(x, y, r)| {
                (
                    NAMES[*x].to_string(),
                    format!("quic = \"{}\"", specs[*y].quic),
                    format!("quic = \"{}\"", r.addr),
                )
            })
            .collect();
        let cluster = tokio::task::block_in_place(|| {
            Cluster::start_specs(&specs, |name, text| {
                let mut text = text.to_string();
                for (dialler, from, to) in &swaps {
                    if dialler == name {
                        assert_eq!(text.matches(from.as_str()).count(), 1, "{text}");
                        text = text.replace(from.as_str(), to);
                    }
                }
                // Rings past the reply bound, so a big reply can be over it.
                text + "\n[session]\nring_bytes = \"12MiB\"\n"
            })
        });
        mesh_up(&cluster).await;
        let targets = (0..NAMES.len()).map(|i| cluster.target(i)).collect();
        let http = cluster.nodes.iter().map(|n| n.http).collect();
        let token = cluster.token.clone();
        let mut sessions = Vec::new();
        for (owner, (what, script)) in PROGRAMS.iter().enumerate() {
            let script = format!("exec bash -c '{}'", script.replace('\'', "'\\''"));
            let id = create(&cluster, (owner + 1) % NAMES.len(), NAMES[owner], &script).await;
            println!(
                "session {} ({what}) on {}: {id}",
                sessions.len(),
                NAMES[owner]
            );
            sessions.push(Session { id, owner });
        }
        Arc::new(World {
            cluster: Mutex::new(cluster),
            relays,
            targets,
            http,
            token,
            sessions,
            record: Mutex::default(),
            started: Instant::now(),
        })
    }
}

/// Waits (bounded) until every node has every link up; panics with the
/// nodes' logs if not.
async fn mesh_up(cluster: &Cluster) {
    let started = Instant::now();
    for (i, name) in NAMES.iter().enumerate() {
        loop {
            let url = format!("http://{}/api/v1/nodes", cluster.nodes[i].http);
            let auth = format!("Bearer {}", cluster.token);
            let nodes: Option<Vec<serde_json::Value>> = tokio::task::block_in_place(|| {
                ureq::get(&url)
                    .set("authorization", &auth)
                    .timeout(Duration::from_secs(10))
                    .call()
                    .ok()?
                    .into_json()
                    .ok()
            });
            let up = nodes
                .as_ref()
                .is_some_and(|n| n.len() == NAMES.len() && n.iter().all(|n| n["state"] == "up"));
            if up {
                break;
            }
            if started.elapsed() > crate::common::PATIENCE {
                let logs: Vec<String> = NAMES
                    .iter()
                    .enumerate()
                    .map(|(j, n)| format!("--- node {n}:\n{}", cluster.log(j)))
                    .collect();
                panic!("node {name} has links down: {nodes:?}\n{}", logs.join("\n"));
            }
            crate::common::poll_pause().await;
        }
    }
    println!("mesh up in {:.1} s", started.elapsed().as_secs_f64());
}
