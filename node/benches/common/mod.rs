//! What the benchmark programs share: the real `termesh` binary as its own
//! process, and the client calls they all make.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use termesh_node::client::{Client, Target};
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg};

pub const WINDOW: u64 = 1 << 20;

pub struct Node {
    pub child: Child,
    pub target: Target,
    _dir: tempfile::TempDir,
}

impl Node {
    /// Starts a node with the config text `config` (may be empty).
    pub fn start(config: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let config_file = dir.path().join("termesh.toml");
        std::fs::write(&config_file, config).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_termesh"))
            .args(["node", "--listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(dir.path())
            .arg("--config")
            .arg(&config_file)
            .env("TERMESH_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the termesh binary");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap()
            .to_string();
        std::thread::spawn(move || for _ in lines {});
        let token = std::fs::read_to_string(dir.path().join("admin.token"))
            .unwrap()
            .trim()
            .to_string();
        Node {
            child,
            target: Target {
                url,
                token: Some(token),
                token_source: "the benchmark".into(),
            },
            _dir: dir,
        }
    }

    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.child.id())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

pub async fn create(c: &mut Client, command: &str) -> String {
    let req = CreateRequest {
        command: Some(vec!["sh".into(), "-c".into(), command.into()]),
        ..Default::default()
    };
    match c.request(|id| ClientMsg::Create { id, req }).await.unwrap() {
        ServerMsg::Created { session, .. } => session.id,
        other => panic!("{other:?}"),
    }
}

pub async fn subscribe(c: &mut Client, session: &str, from_seq: Option<u64>) {
    let reply = c
        .request(|id| ClientMsg::Subscribe {
            id,
            session: session.into(),
            from_seq,
            window: Some(WINDOW),
            scrollback: None,
        })
        .await
        .unwrap();
    assert!(matches!(reply, ServerMsg::Subscribed { .. }));
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
