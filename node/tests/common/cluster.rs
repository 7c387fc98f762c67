//! A real cluster on this machine: `termesh cluster init` for nodes on
//! 127.0.0.1, .2, .3 (free ports picked at start), each a `termesh node`
//! process with its own data dir, killed (by pid) on drop.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use termesh_node::client::{Client, Target};
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg};

const BIN: &str = env!("CARGO_BIN_EXE_termesh");

/// The binary the nodes run: this build's, or `TERMESH_TEST_BIN` (an older
/// build, to show a test catching what it was written for).
fn bin() -> String {
    std::env::var("TERMESH_TEST_BIN").unwrap_or_else(|_| BIN.to_string())
}

pub struct ClusterNode {
    pub name: String,
    pub http: SocketAddr,
    pub config: PathBuf,
    /// A command the node runs under (`ip netns exec NS`), or empty.
    wrap: Vec<String>,
    child: Option<Child>,
}

/// One node of a cluster a test lays out itself.
pub struct NodeSpec {
    pub name: String,
    pub http: SocketAddr,
    pub quic: SocketAddr,
    /// A command the node runs under (`ip netns exec NS`), or empty.
    pub wrap: Vec<String>,
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub token: String,
    pub nodes: Vec<ClusterNode>,
}

/// A `start_edited` edit: the node runs its programs as its own children
/// (no PTY keeper), so they end with it.
pub fn no_keeper(config: &str) -> String {
    config.replacen("[node]\n", "[node]\nkeeper = false\n", 1)
}

/// A port free for both TCP and UDP on `ip` now (the node binds it soon).
pub fn free_port(ip: &str) -> u16 {
    loop {
        let tcp = TcpListener::bind(format!("{ip}:0")).unwrap();
        let port = tcp.local_addr().unwrap().port();
        if UdpSocket::bind(format!("{ip}:{port}")).is_ok() {
            return port;
        }
    }
}

/// Nodes `names` on 127.0.0.1, .2, ... with free HTTP and QUIC ports.
pub fn loopback_specs(names: &[&str]) -> Vec<NodeSpec> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let ip = format!("127.0.0.{}", i + 1);
            NodeSpec {
                name: name.to_string(),
                http: format!("{ip}:{}", free_port(&ip)).parse().unwrap(),
                quic: format!("{ip}:{}", free_port(&ip)).parse().unwrap(),
                wrap: Vec::new(),
            }
        })
        .collect()
}

impl Cluster {
    /// Writes the cluster of `names` (one loopback address each) and
    /// starts every node.
    pub fn start(names: &[&str]) -> Cluster {
        Self::start_with(names, "")
    }

    /// As `start`, with `extra` appended to every node's config (sections
    /// the generated configs do not have, such as `[session]`).
    pub fn start_with(names: &[&str], extra: &str) -> Cluster {
        Self::start_edited(names, |text| format!("{text}{extra}"))
    }

    /// As `start`, with every node's config text passed through `edit`.
    pub fn start_edited(names: &[&str], edit: impl Fn(&str) -> String) -> Cluster {
        Self::start_specs(&loopback_specs(names), |_, text| edit(text))
    }

    /// The cluster of `specs` from `termesh cluster init`, each node's
    /// config text passed through `edit(name, text)`, every node started.
    pub fn start_specs(specs: &[NodeSpec], edit: impl Fn(&str, &str) -> String) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("cluster");
        let mut args = vec!["cluster".to_string(), "init".into(), "--out".into()];
        args.push(out.display().to_string());
        let mut nodes = Vec::new();
        for spec in specs {
            args.push("--node".into());
            args.push(format!(
                "{},quic={},http={}",
                spec.name, spec.quic, spec.http
            ));
            nodes.push(ClusterNode {
                name: spec.name.clone(),
                http: spec.http,
                config: out.join(&spec.name).join("termesh.toml"),
                wrap: spec.wrap.clone(),
                child: None,
            });
        }
        let status = Command::new(bin()).args(&args).output().unwrap();
        assert!(
            status.status.success(),
            "{}",
            String::from_utf8_lossy(&status.stderr)
        );
        let token = std::fs::read_to_string(out.join("admin.token"))
            .unwrap()
            .trim()
            .to_string();
        for node in &nodes {
            let text = std::fs::read_to_string(&node.config).unwrap();
            std::fs::write(&node.config, edit(&node.name, &text)).unwrap();
        }
        let mut cluster = Cluster { dir, token, nodes };
        for i in 0..cluster.nodes.len() {
            cluster.start_node(i);
        }
        cluster
    }

    /// Starts node `i` (again).
    pub fn start_node(&mut self, i: usize) {
        self.start_node_as(i, std::path::Path::new(&bin()));
    }

    /// Starts node `i` from the binary `program` (another build: an
    /// upgrade).
    pub fn start_node_as(&mut self, i: usize, program: &std::path::Path) {
        let node = &mut self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(node.config.with_file_name("node.log"))
            .unwrap();
        let mut command = match node.wrap.split_first() {
            Some((wrapper, args)) => {
                let mut c = Command::new(wrapper);
                c.args(args).arg(program);
                c
            }
            None => Command::new(program),
        };
        let child = command
            .args(["node", "--config"])
            .arg(&node.config)
            // Its runtime record beside its config, not in this user's.
            .env("XDG_RUNTIME_DIR", node.config.with_file_name("run"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        node.child = Some(child);
        // Serving once its HTTP port answers.
        let deadline = std::time::Instant::now() + super::PATIENCE;
        while std::net::TcpStream::connect(node.http).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "node {} did not start",
                node.name
            );
            super::poll_pause_blocking();
        }
    }

    /// SIGTERM for node `i`, waiting (bounded) until it has stopped.
    pub fn stop_node(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = std::time::Instant::now() + super::PATIENCE;
            while matches!(child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                super::poll_pause_blocking();
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL for node `i`: no goodbye to its peers.
    pub fn kill_node(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether node `i`'s process has exited (it is then reaped).
    pub fn reap(&mut self, i: usize) -> bool {
        let node = &mut self.nodes[i];
        match node.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(Some(_))) | None => {
                node.child = None;
                true
            }
            _ => false,
        }
    }

    pub fn pid(&self, i: usize) -> u32 {
        self.nodes[i].child.as_ref().expect("the node runs").id()
    }

    pub fn target(&self, i: usize) -> Target {
        Target {
            url: format!("http://{}", self.nodes[i].http),
            token: Some(self.token.clone()),
            token_source: "the cluster's admin.token".into(),
            ca: None,
            looked: Vec::new(),
        }
    }

    /// The value of one `/metrics` series (name with labels) of node `i`.
    pub fn metric(&self, i: usize, series: &str) -> f64 {
        let url = format!("http://{}/metrics", self.nodes[i].http);
        let text = ureq::get(&url).call().unwrap().into_string().unwrap();
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    }

    /// The folder `cluster init` wrote (CA, admin token, one folder per
    /// node).
    pub fn folder(&self) -> PathBuf {
        self.dir.path().join("cluster")
    }

    /// Runs the `termesh` binary with `args`; its stdout, or a panic with
    /// its stderr.
    pub fn termesh(&self, args: &[&str]) -> String {
        let out = Command::new(bin()).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "termesh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A node `cluster add-node` wrote (`config`), started as node `i`
    /// (the index it answers).
    pub fn add_member(&mut self, name: &str, http: SocketAddr, config: PathBuf) -> usize {
        self.nodes.push(ClusterNode {
            name: name.to_string(),
            http,
            config,
            wrap: Vec::new(),
            child: None,
        });
        let i = self.nodes.len() - 1;
        self.start_node(i);
        i
    }

    /// `termesh config reload` against node `i` (its config file read
    /// again: tokens and peers); answers what it printed.
    pub fn reload(&self, i: usize) -> String {
        let url = format!("http://{}", self.nodes[i].http);
        self.termesh(&["config", "reload", "--url", &url, "--token", &self.token])
    }

    /// Node `i`'s `GET /api/v1/nodes`.
    pub fn nodes_api(&self, i: usize) -> Vec<serde_json::Value> {
        ureq::get(&format!("http://{}/api/v1/nodes", self.nodes[i].http))
            .set("authorization", &format!("Bearer {}", self.token))
            .timeout(std::time::Duration::from_secs(20))
            .call()
            .unwrap()
            .into_json()
            .unwrap()
    }

    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.nodes[i].config.with_file_name("node.log")).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.stop_node(i);
        }
        for node in &self.nodes {
            let data = termesh_config::Config::load(&node.config).map(|c| c.node.data_dir);
            if let Ok(data) = data {
                super::kill_keeper(&data);
            }
        }
    }
}

pub async fn connect(cluster: &Cluster, i: usize) -> Client {
    super::within(super::PATIENCE, "a connection", async {
        loop {
            if let Ok(c) = Client::connect(&cluster.target(i)).await {
                return c;
            }
            super::poll_pause().await;
        }
    })
    .await
}

/// Creates `script` (sh -c) on node `on`, asked through node `via` once
/// every node knows every other.
pub async fn create(cluster: &Cluster, via: usize, on: &str, script: &str) -> String {
    let req = CreateRequest {
        command: Some(vec!["sh".into(), "-c".into(), script.into()]),
        node: Some(on.into()),
        ..Default::default()
    };
    let id = super::within(super::PATIENCE, "the session to be created", async {
        loop {
            let mut c = connect(cluster, via).await;
            let reply = c
                .request(|id| ClientMsg::Create {
                    id,
                    req: req.clone(),
                })
                .await;
            if let Ok(ServerMsg::Created { session, .. }) = reply {
                return session.id;
            }
            super::poll_pause().await;
        }
    })
    .await;
    // Every node lists it (its owner's directory reached them).
    for i in 0..cluster.nodes.len() {
        super::within(super::PATIENCE, "every node to know the session", async {
            loop {
                let mut c = connect(cluster, i).await;
                if let Ok(ServerMsg::Sessions { sessions, .. }) = c.request(ClientMsg::list).await {
                    if sessions.iter().any(|s| s.id == id) {
                        return;
                    }
                }
                super::poll_pause().await;
            }
        })
        .await;
    }
    id
}

/// Types a line into the session through node `via`.
pub async fn type_line(cluster: &Cluster, via: usize, session: &str, line: &str) {
    let mut c = connect(cluster, via).await;
    c.send(&ClientMsg::Input {
        session: session.into(),
        data: format!("{line}\n").into_bytes(),
    })
    .await
    .unwrap();
    // Answered after the input was handled here (queued to the owner's
    // link when the session is remote), so closing then loses nothing.
    let _ = c.request(ClientMsg::list).await;
    c.close().await;
}

/// A session on node a that prints `ready`, waits for a line, then `seq 1
/// lines`, read from the start by a client that drops its connection
/// without a close at `drops` random points and resumes with `from_seq`
/// on `nodes[0]`, `nodes[1]`, ... in turn (created and typed into through
/// `nodes[0]`). Asserts the assembled output is exactly what the program
/// printed, with no resync; returns the (node, from seq) of every
/// subscription.
pub async fn numbered_lines_with_drops(
    cluster: &Cluster,
    lines: u64,
    drops: usize,
    nodes: &[usize],
    window: u64,
) -> Vec<(usize, u64)> {
    use super::{drop_points, numbered_lines, pump_until, subscribe, within, Stream, PATIENCE};
    let mut expected = b"ready\n".to_vec();
    expected.extend_from_slice(&numbered_lines(lines));
    let script = format!("stty -onlcr -echo; echo ready; read go; exec seq 1 {lines}");
    let session = create(cluster, nodes[0], "a", &script).await;
    let drops = drop_points(drops, expected.len());
    let mut stream = Stream::new(window);
    let mut hops = Vec::new();
    let started = std::time::Instant::now();
    within(PATIENCE * 5, "the whole output, resuming", async {
        loop {
            let on = nodes[hops.len() % nodes.len()];
            let mut c = connect(cluster, on).await;
            subscribe(&mut c, &session, Some(stream.last_seq), window)
                .await
                .expect("subscribe");
            hops.push((on, stream.last_seq));
            if hops.len() == 1 {
                pump_until(&mut c, &session, &mut stream, true, |s| {
                    s.data.starts_with(b"ready\n")
                })
                .await
                .expect("ready");
                type_line(cluster, nodes[0], &session, "go").await;
            }
            let next_drop = drops.iter().copied().find(|d| *d > stream.data.len());
            let done = |s: &Stream| {
                s.data.len() >= expected.len() || next_drop.is_some_and(|d| s.data.len() >= d)
            };
            pump_until(&mut c, &session, &mut stream, true, done)
                .await
                .expect("pump");
            if stream.data.len() >= expected.len() {
                break;
            }
            // Dropped without a close, as a lost link does.
            drop(c);
        }
    })
    .await;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} bytes in {secs:.1} s ({:.0} KiB/s); subscribed on (node, from seq): {hops:?}",
        expected.len(),
        expected.len() as f64 / 1024.0 / secs
    );
    assert_eq!(stream.resyncs, 0, "every gap was replayed");
    assert_eq!(stream.data.len(), expected.len());
    assert!(stream.data == expected, "assembled output differs");
    assert!(hops.len() >= 2, "the client dropped and resumed");
    hops
}
