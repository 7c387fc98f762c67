//! Shared test harness: a real node on 127.0.0.1:0 (its own thread, real
//! PTYs, real sockets) with one token per role, torn down on drop; a
//! protocol client; and waits bounded by generous timeouts.
#![allow(dead_code)]

pub mod binary;
pub mod boot_parts;
pub mod browser;
pub mod cluster;
pub mod container;
pub mod mount;
pub mod netns;
pub mod proxy;
pub mod sse;
pub mod stream;
pub mod tmux;
pub mod unit_cli;
pub mod vm;
pub mod wire;

pub use stream::*;

use std::time::Duration;

use termesh_config::{hash_token, parse_token_hash, Config, Role, TokenEntry};
use termesh_node::client::{Client, Target};
use termesh_node::server::NodeThread;
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg, SessionInfo};

pub const ADMIN: &str = "admin-token-for-tests-0123456789";
pub const OPERATOR: &str = "operator-token-for-tests-012345";
pub const VIEWER: &str = "viewer-token-for-tests-01234567";

/// Generous bound for anything a test waits on.
pub const PATIENCE: Duration = Duration::from_secs(60);

pub struct TestNode {
    pub node: NodeThread,
    pub data_dir: tempfile::TempDir,
}

impl TestNode {
    pub fn start() -> TestNode {
        Self::start_with(|_| {})
    }

    pub fn start_with(tweak: impl FnOnce(&mut Config)) -> TestNode {
        let data_dir = tempfile::tempdir().expect("temp dir");
        let mut config = Config::default();
        config.node.name = "t1".into();
        config.node.data_dir = data_dir.path().to_path_buf();
        config.http.listen = "127.0.0.1:0".parse().unwrap();
        config.session.command = vec!["/bin/sh".into()];
        config.session.kill_grace = Duration::from_millis(500);
        config.auth.tokens = [
            (ADMIN, Role::Admin),
            (OPERATOR, Role::Operator),
            (VIEWER, Role::Viewer),
        ]
        .iter()
        .map(|(t, role)| TokenEntry {
            name: None,
            hash: parse_token_hash(&hash_token(t)).unwrap(),
            role: *role,
        })
        .collect();
        tweak(&mut config);
        let node = NodeThread::start(config).expect("node starts");
        TestNode { node, data_dir }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.node.addr())
    }

    pub fn target(&self, token: Option<&str>) -> Target {
        Target {
            url: self.url(),
            token: token.map(str::to_string),
            token_source: "the test".into(),
            ca: None,
            looked: Vec::new(),
        }
    }

    pub async fn client(&self, token: &str) -> Client {
        Client::connect(&self.target(Some(token)))
            .await
            .expect("client connects")
    }

    /// Creates a session running `command` (via the operator token).
    pub async fn create(&self, command: &[&str]) -> SessionInfo {
        self.create_with(CreateRequest {
            command: Some(command.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        })
        .await
    }

    pub async fn create_with(&self, req: CreateRequest) -> SessionInfo {
        let mut c = self.client(OPERATOR).await;
        // Bounded: a node that never answers fails the test, it does not
        // hang the suite.
        let reply = within(
            PATIENCE,
            "the node to answer a create",
            c.request(|id| ClientMsg::Create { id, req }),
        )
        .await
        .expect("create");
        c.close().await;
        match reply {
            ServerMsg::Created { session, .. } => session,
            other => panic!("unexpected reply {other:?}"),
        }
    }

    pub async fn info(&self, session: &str) -> Option<SessionInfo> {
        let mut c = self.client(VIEWER).await;
        let reply = c.request(ClientMsg::list).await.expect("list");
        c.close().await;
        match reply {
            ServerMsg::Sessions { sessions, .. } => sessions.into_iter().find(|s| s.id == session),
            _ => None,
        }
    }

    /// Waits until the session's info satisfies `cond`.
    pub async fn wait_info(
        &self,
        session: &str,
        what: &str,
        cond: impl Fn(&SessionInfo) -> bool,
    ) -> SessionInfo {
        within(PATIENCE, what, async {
            loop {
                if let Some(info) = self.info(session).await {
                    if cond(&info) {
                        return info;
                    }
                }
                poll_pause().await;
            }
        })
        .await
    }
}

/// The pause between polls of a condition that has no event to wait on:
/// the process table, a file, another process's output read back through
/// `history`. Every poll loop runs inside `within`, which bounds it.
pub async fn poll_pause() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// The pid of the PTY keeper serving `data_dir`, if one runs (it writes
/// its pid in `keeper.lock`).
pub fn keeper_pid(data_dir: &std::path::Path) -> Option<i32> {
    if data_dir.as_os_str().is_empty() {
        return None;
    }
    let pid: i32 = std::fs::read_to_string(data_dir.join("keeper.lock"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let ours = cmdline.split(|b| *b == 0).any(|arg| arg == b"keeper");
    ours.then_some(pid)
}

/// Kills the PTY keeper a test's node started on `data_dir` (its programs'
/// terminals hang up with it) and waits until it is gone.
pub fn kill_keeper(data_dir: &std::path::Path) {
    let Some(pid) = keeper_pid(data_dir) else {
        return;
    };
    let pid = nix::unistd::Pid::from_raw(pid);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    let deadline = std::time::Instant::now() + PATIENCE;
    while keeper_pid(data_dir).is_some() && std::time::Instant::now() < deadline {
        poll_pause_blocking();
    }
}

/// Sends SIGSTOP to `pid` and waits until every thread of it is stopped
/// (state `T`): `kill` returns before a thread running on another core
/// has stopped, and that thread may still answer a message sent next.
pub async fn stop_process(pid: i32) {
    use nix::sys::signal::{kill, Signal};
    kill(nix::unistd::Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
    let stopped = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks.flatten().all(|t| {
                    std::fs::read_to_string(t.path().join("stat"))
                        .ok()
                        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.starts_with('T')))
                        .unwrap_or(true)
                })
            })
            .unwrap_or(true)
    };
    within(PATIENCE, "every thread stopped", async {
        while !stopped() {
            poll_pause().await;
        }
    })
    .await;
}

/// `poll_pause` for blocking tests (REST via ureq).
pub fn poll_pause_blocking() {
    std::thread::sleep(Duration::from_millis(20));
}

/// Polls `f` on test machine `m` (common/container.rs, common/vm.rs)
/// until it answers, within `limit` (nothing there tells of a change but
/// the machine's answers, so each try is a poll); panics naming `what`
/// with the machine's console (`log`).
pub fn poll_machine<M, T>(
    m: &mut M,
    limit: Duration,
    what: &str,
    log: fn(&M) -> String,
    mut f: impl FnMut(&mut M) -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = f(m) {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}; console:\n{}",
            log(m)
        );
        poll_pause_blocking();
    }
}

/// Waits until the session's recent raw output contains `needle`; returns it.
pub async fn wait_output(node: &TestNode, session: &str, needle: &str) -> String {
    let mut c = node.client(VIEWER).await;
    let text = within(PATIENCE, needle, async {
        loop {
            let reply = c
                .request(|id| ClientMsg::History {
                    id,
                    session: session.into(),
                    limit: Some(1 << 20),
                    before_seq: None,
                    rows: None,
                })
                .await
                .unwrap();
            if let ServerMsg::History {
                data: Some(data), ..
            } = reply
            {
                let text = String::from_utf8_lossy(&data).into_owned();
                if text.contains(needle) {
                    return text;
                }
            }
            poll_pause().await;
        }
    })
    .await;
    c.close().await;
    text
}

/// GET `url` with a bearer token (off the async threads); the body as text.
pub async fn http_get(url: &str, token: &str) -> String {
    let (url, auth) = (url.to_string(), format!("Bearer {token}"));
    tokio::task::spawn_blocking(move || {
        let resp = ureq::get(&url).set("authorization", &auth).call();
        let resp = resp.unwrap_or_else(|e| panic!("GET {url}: {e}"));
        resp.into_string().expect("a text body")
    })
    .await
    .unwrap()
}

/// Runs `fut`, failing the test with `what` if it takes longer than `limit`.
pub async fn within<T>(
    limit: Duration,
    what: &str,
    fut: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {limit:?} waiting for: {what}"),
    }
}

/// The `cpu` cgroup v1 path of `pid` (empty if none).
pub fn cpu_cgroup_of(pid: i32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    text.lines()
        .find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "cpu")
                .then(|| path.to_string())
        })
        .unwrap_or_default()
}

/// Every pid whose environment names this session.
pub fn session_pids(session: &str) -> Vec<i32> {
    let needle = format!("TERMESH_SESSION_ID={session}");
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
                // A zombie still listed is dead for our purposes.
                let state =
                    std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let zombie = state
                    .rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z'));
                if !zombie {
                    pids.push(pid);
                }
            }
        }
    }
    pids
}

/// The session's stored events after event `after` (REST, viewer).
pub async fn stored_events(node: &TestNode, session: &str, after: u64) -> Vec<serde_json::Value> {
    let (url, path) = (
        node.url(),
        format!("/sessions/{session}/events?after={after}"),
    );
    tokio::task::spawn_blocking(move || {
        ureq::get(&format!("{url}/api/v1{path}"))
            .set("authorization", &format!("Bearer {VIEWER}"))
            .call()
            .unwrap()
            .into_json::<Vec<serde_json::Value>>()
            .unwrap()
    })
    .await
    .unwrap()
}

/// Someone typing on a node: a key into `session` every second (at most
/// `TYPIST_KEYS`), until dropped. The node's bulk cgroup is for floods
/// beside someone typing on the node (`session::bulk`).
pub struct Typist(tokio::task::JoinHandle<()>);

/// The most keys a `Typist` sends (ten minutes of them).
const TYPIST_KEYS: usize = 600;

impl Typist {
    /// Types into `session` through `client` from now on.
    pub fn start(mut client: Client, session: &str) -> Typist {
        let session = session.to_string();
        Typist(tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            for _ in 0..TYPIST_KEYS {
                every.tick().await;
                let key = ClientMsg::Input {
                    session: session.clone(),
                    data: b"k".to_vec(),
                };
                if client.send(&key).await.is_err() {
                    return;
                }
            }
        }))
    }
}

impl Drop for Typist {
    fn drop(&mut self) {
        self.0.abort();
    }
}
