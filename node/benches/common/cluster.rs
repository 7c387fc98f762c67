//! A cluster of real release nodes for a benchmark: `termesh cluster init`
//! on 127.0.0.1, .2, ..., each node its own process, stopped (and its PTY
//! keeper with it) on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use termesh_node::client::{Client, Target};
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg};

pub struct Cluster {
    pub procs: Vec<Child>,
    pub data: Vec<PathBuf>,
    pub https: Vec<std::net::SocketAddr>,
    pub token: String,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts nodes `names` (the first on 127.0.0.1), each config given
    /// `extra` at its end, and waits until the first node's links are up:
    /// a session created on it is listed by every other node. Answers the
    /// cluster and that session (`sleep`, left running).
    pub async fn start(names: &[&str], extra: &str) -> (Cluster, String) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("cluster");
        let (https, token) = super::cluster_init(&out, names, extra);
        let mut cluster = Cluster {
            procs: Vec::new(),
            data: Vec::new(),
            https,
            token,
            _dir: dir,
        };
        for name in names {
            cluster.data.push(out.join(name).join("data"));
            cluster.procs.push(
                Command::new(super::node_binary())
                    .args(["node", "--config"])
                    .arg(out.join(name).join("termesh.toml"))
                    .env("TERMESH_LOG", "warn")
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap(),
            );
        }
        let session = cluster.wait_ready().await;
        (cluster, session)
    }

    pub fn target(&self, i: usize) -> Target {
        Target {
            url: format!("http://{}", self.https[i]),
            token: Some(self.token.clone()),
            token_source: "the benchmark".into(),
            ca: None,
            looked: Vec::new(),
        }
    }

    /// The sum of node `i`'s `/metrics` series `name` (any labels; 0 when
    /// absent).
    pub fn metric(&self, i: usize, name: &str) -> f64 {
        let url = format!("http://{}", self.https[i]);
        super::samples(&url, &self.token, name).iter().sum()
    }

    pub fn pids(&self) -> Vec<u32> {
        self.procs.iter().map(|p| p.id()).collect()
    }

    async fn wait_ready(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        let session = loop {
            assert!(Instant::now() < deadline, "the cluster did not come up");
            if let Ok(mut c) = Client::connect(&self.target(0)).await {
                let req = CreateRequest {
                    command: Some(vec!["sleep".into(), "100000".into()]),
                    ..Default::default()
                };
                if let Ok(ServerMsg::Created { session, .. }) =
                    c.request(|id| ClientMsg::Create { id, req }).await
                {
                    break session.id;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        for i in 1..self.procs.len() {
            loop {
                assert!(
                    Instant::now() < deadline,
                    "node {i} never learned of a's session"
                );
                let mut c = Client::connect(&self.target(i)).await.unwrap();
                if let Ok(ServerMsg::Sessions { sessions, .. }) = c.request(ClientMsg::list).await {
                    if sessions.iter().any(|s| s.id == session) {
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        session
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.procs {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = child.wait();
        }
        for data in &self.data {
            super::stop_keeper(data);
        }
    }
}
