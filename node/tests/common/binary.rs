//! The real `termesh node` binary as its own process (tests that stop the
//! whole node with SIGSTOP), configured from a file the test writes, with
//! the harness's tokens; killed (by its pid) on drop.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use termesh_config::hash_token;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg, SessionInfo};

use super::{poll_pause, within, ADMIN, OPERATOR, PATIENCE, VIEWER};

pub struct BinaryNode {
    pub child: Child,
    pub url: String,
    pub addr: std::net::SocketAddr,
    pub dir: tempfile::TempDir,
    /// Its data dir (the PTY keeper it started serves it).
    pub data: std::path::PathBuf,
    /// The `cgroup.procs` file it was started into, as a systemd unit
    /// starts it (`start_as_unit`); its restarts go there too.
    unit: Option<std::path::PathBuf>,
}

/// The `termesh` binary this test crate was built with.
fn this_binary() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_BIN_EXE_termesh"))
}

/// `extra` for a node whose programs are its own children (no PTY keeper):
/// they end with it, and its sessions are `lost` after a restart.
pub const NO_KEEPER: &str = "keeper = false\n";

impl BinaryNode {
    /// Starts a node whose config is the harness's tokens plus `extra`
    /// (TOML sections other than `[node]`, `[http]` listen and `[auth]`;
    /// keys before its first section go in `[node]`, such as `NO_KEEPER`).
    pub fn start(extra: &str) -> BinaryNode {
        BinaryNode::start_in(tempfile::tempdir().unwrap(), "127.0.0.1:0", extra)
    }

    /// Starts a node as `deploy/termesh.service` places it: in the cgroup
    /// whose `cgroup.procs` is `procs` before it runs, at nice -10 and
    /// (where this process may lower it) `oom_score_adj` -900, as this
    /// test's user (not the unit's, nor with its hardening). The nodes
    /// that follow it (`restart` and the like) start there too, as the
    /// unit's do.
    pub fn start_as_unit(extra: &str, procs: &std::path::Path) -> BinaryNode {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        BinaryNode::start_with(this_binary(), dir, &data, "127.0.0.1:0", extra, Some(procs))
    }

    /// Stops this node (cleanly, bounded) and starts a new one on the same
    /// address and data dir: a node restart.
    pub fn restart(mut self, extra: &str) -> BinaryNode {
        self.stop();
        self.successor(this_binary(), extra)
    }

    /// Stops this node cleanly, runs `between` while it is down, then
    /// starts a node on the same address and data dir.
    pub fn restart_after(mut self, extra: &str, between: impl FnOnce()) -> BinaryNode {
        self.stop();
        between();
        self.successor(this_binary(), extra)
    }

    /// SIGKILL (a crash: nothing flushed, nothing said), then a node on
    /// the same address and data dir.
    pub fn crash_and_restart(mut self, extra: &str) -> BinaryNode {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.successor(this_binary(), extra)
    }

    /// SIGKILL, then `between` while it is down (damage its files), then
    /// a node on the same address and data dir.
    pub fn crash_and_restart_after(mut self, extra: &str, between: impl FnOnce()) -> BinaryNode {
        let _ = self.child.kill();
        let _ = self.child.wait();
        between();
        self.successor(this_binary(), extra)
    }

    /// Stops this node cleanly and starts `bin` (another build of the
    /// binary: an upgrade) on the same address and data dir.
    pub fn upgrade(mut self, bin: &std::path::Path, extra: &str) -> BinaryNode {
        self.stop();
        self.successor(bin, extra)
    }

    /// `bin` on this stopped node's address, dir and data dir (in its
    /// unit's cgroup, if it had one).
    fn successor(&mut self, bin: &std::path::Path, extra: &str) -> BinaryNode {
        let old = self.hand_over();
        let data = old.path().join("data");
        let unit = self.unit.clone();
        BinaryNode::start_with(
            bin,
            old,
            &data,
            &self.addr.to_string(),
            extra,
            unit.as_deref(),
        )
    }

    /// The config file this node was started with.
    pub fn config_path(&self) -> std::path::PathBuf {
        self.dir.path().join("termesh.toml")
    }

    /// As `start`, with its data dir at `data`.
    pub fn start_on(data: &std::path::Path, extra: &str) -> BinaryNode {
        BinaryNode::start_at(tempfile::tempdir().unwrap(), data, "127.0.0.1:0", extra)
    }

    /// A node on `dir` (config, data, log) listening on `listen`.
    pub fn start_in(dir: tempfile::TempDir, listen: &str, extra: &str) -> BinaryNode {
        let data = dir.path().join("data");
        BinaryNode::start_at(dir, &data, listen, extra)
    }

    fn start_at(
        dir: tempfile::TempDir,
        data: &std::path::Path,
        listen: &str,
        extra: &str,
    ) -> BinaryNode {
        BinaryNode::start_with(this_binary(), dir, data, listen, extra, None)
    }

    fn start_with(
        bin: &std::path::Path,
        dir: tempfile::TempDir,
        data: &std::path::Path,
        listen: &str,
        extra: &str,
        unit: Option<&std::path::Path>,
    ) -> BinaryNode {
        let mut config = format!("[node]\nname = \"bin\"\ndata_dir = {data:?}\n\n{extra}\n");
        for (token, role) in [(ADMIN, "admin"), (OPERATOR, "operator"), (VIEWER, "viewer")] {
            config.push_str(&format!(
                "[[auth.tokens]]\nhash = \"{}\"\nrole = \"{role}\"\n",
                hash_token(token)
            ));
        }
        let path = dir.path().join("termesh.toml");
        std::fs::write(&path, config).unwrap();
        // A restarted node's log starts afresh; the last one's is kept.
        let log = dir.path().join("node.log");
        let _ = std::fs::rename(&log, dir.path().join("node.previous.log"));
        let mut command = match unit {
            None => Command::new(bin),
            Some(procs) => {
                // What systemd does before it runs the unit's ExecStart.
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(
                        "echo $$ > \"$1\" && renice -n -10 -p $$ >/dev/null || exit 1; \
                         echo -900 2>/dev/null > /proc/$$/oom_score_adj; shift; exec \"$@\"",
                    )
                    .arg("sh")
                    .arg(procs)
                    .arg(bin);
                sh
            }
        };
        let mut child = command
            .args(["node", "--listen", listen, "--config"])
            .arg(&path)
            .env("NO_COLOR", "1")
            // Its runtime record in its own dir, not in this user's.
            .env("XDG_RUNTIME_DIR", dir.path().join("run"))
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("the node prints its URL").unwrap();
        // Keep reading the banner so the node never writes to a closed pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://") || w.starts_with("https://"))
            .expect("the URL is printed")
            .to_string();
        let addr = url
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .parse()
            .unwrap();
        BinaryNode {
            child,
            url,
            addr,
            dir,
            data: data.to_path_buf(),
            unit: unit.map(std::path::Path::to_path_buf),
        }
    }

    pub fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.child.id() as i32)
    }

    /// The log of the node this one restarted (for failure messages).
    pub fn previous_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("node.previous.log")).unwrap_or_default()
    }

    /// The node's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("node.log")).unwrap_or_default()
    }

    pub fn target(&self, token: &str) -> termesh_node::client::Target {
        termesh_node::client::Target {
            url: self.url.clone(),
            token: Some(token.to_string()),
            token_source: "the test".into(),
            ca: None,
            looked: Vec::new(),
        }
    }
}

impl BinaryNode {
    /// Hands its dir over to the node that follows it on the same data
    /// dir (this one's drop then leaves the keeper alone).
    fn hand_over(&mut self) -> tempfile::TempDir {
        self.data = std::path::PathBuf::new();
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }

    /// Stops the node cleanly and hands over its dir, leaving its PTY keeper
    /// (and its programs) running: the caller ends it (`kill_keeper`).
    pub fn stop_leaving_keeper(mut self) -> tempfile::TempDir {
        self.stop();
        self.hand_over()
    }

    /// Stops the node cleanly, and its PTY keeper, and hands over its dir
    /// (config, data, log).
    pub fn stop_keeping_dir(mut self) -> tempfile::TempDir {
        self.stop();
        super::kill_keeper(&self.data);
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }

    /// The store's directory in the node's data dir.
    pub fn store_path(dir: &tempfile::TempDir) -> std::path::PathBuf {
        dir.path().join("data").join("store")
    }
}

impl Drop for BinaryNode {
    fn drop(&mut self) {
        self.stop();
        super::kill_keeper(&self.data);
    }
}

impl BinaryNode {
    /// A clean stop (SIGTERM: the node ends its sessions), bounded; then
    /// SIGKILL if it did not stop.
    fn stop(&mut self) {
        use nix::sys::signal::{kill, Signal};
        let _ = kill(self.pid(), Signal::SIGCONT);
        let _ = kill(self.pid(), Signal::SIGTERM);
        let deadline = std::time::Instant::now() + super::PATIENCE;
        while std::time::Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            super::poll_pause_blocking();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An operator's connection to `node`.
pub async fn client(node: &BinaryNode) -> Client {
    Client::connect(&node.target(OPERATOR))
        .await
        .expect("connects")
}

/// Starts `sh -c script` on `node`.
pub async fn create(node: &BinaryNode, script: &str) -> SessionInfo {
    let mut c = client(node).await;
    let req = CreateRequest {
        command: Some(vec!["sh".into(), "-c".into(), script.into()]),
        ..Default::default()
    };
    match c.request(|id| ClientMsg::Create { id, req }).await.unwrap() {
        ServerMsg::Created { session, .. } => session,
        other => panic!("{other:?}"),
    }
}

/// Every session `node` lists.
pub async fn list(node: &BinaryNode) -> Vec<SessionInfo> {
    let mut c = client(node).await;
    match c.request(ClientMsg::list).await.unwrap() {
        ServerMsg::Sessions { sessions, .. } => sessions,
        other => panic!("{other:?}"),
    }
}

/// Session `id` as `node` lists it.
pub async fn info(node: &BinaryNode, id: &str) -> SessionInfo {
    list(node)
        .await
        .into_iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("no session {id}; log:\n{}", node.log()))
}

/// Waits (bounded) until the session `id` has exited.
pub async fn wait_exited(node: &BinaryNode, id: &str) {
    within(PATIENCE, "the session to end", async {
        while info(node, id).await.status != termesh_transport::SessionStatus::Exited {
            poll_pause().await;
        }
    })
    .await;
}

/// Every stored frame of `session` through `read_output`, page by page:
/// (the bytes, the last seq, how many holes in the seqs).
pub async fn stored_output(node: &BinaryNode, session: &str) -> (Vec<u8>, u64, u32) {
    let mut c = client(node).await;
    let (mut data, mut last, mut holes) = (Vec::new(), 0u64, 0);
    loop {
        let reply = c
            .request(|id| ClientMsg::ReadOutput {
                id,
                session: session.to_string(),
                after: Some(last),
                max_bytes: None,
            })
            .await
            .unwrap();
        let ServerMsg::StoredOutput { frames, .. } = reply else {
            panic!("{reply:?}");
        };
        if frames.is_empty() {
            return (data, last, holes);
        }
        for f in frames {
            if last != 0 && f.seq != last + 1 {
                holes += 1;
            }
            last = f.seq;
            data.extend_from_slice(&f.data);
        }
    }
}
