//! Clients find a local node started with `--data-dir` through its
//! runtime record (`$XDG_RUNTIME_DIR/termesh/`, else the default data
//! dir's `nodes/`), ignore a crashed node's record, refuse to guess
//! between several, and say where they looked when none runs.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_termesh");

/// The environment of one user of the machine: a home and, or not, a
/// runtime dir; nothing else that would name a node.
struct User {
    home: PathBuf,
    run: Option<PathBuf>,
}

impl User {
    fn command(&self) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.env("HOME", &self.home)
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_STATE_HOME")
            .env_remove("TERMESH_URL")
            .env_remove("TERMESH_TOKEN")
            .env_remove("TERMESH_DATA_DIR")
            .env_remove("TERMESH_CA");
        match &self.run {
            Some(run) => cmd.env("XDG_RUNTIME_DIR", run),
            None => cmd.env_remove("XDG_RUNTIME_DIR"),
        };
        cmd
    }

    /// `termesh ARGS` as this user: (success, stdout, stderr).
    fn termesh(&self, args: &[&str]) -> (bool, String, String) {
        let out = self.command().args(args).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into(),
            String::from_utf8_lossy(&out.stderr).into(),
        )
    }

    /// `termesh node --data-dir DATA` as this user, serving once this
    /// returns.
    fn node(&self, data: &Path) -> Node {
        let mut child = self
            .command()
            .args(["node", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("the banner").unwrap();
        std::thread::spawn(move || lines.for_each(drop));
        assert!(first.contains("serving on http://"), "{first}");
        Node { child }
    }
}

/// A node process, stopped (SIGTERM, waited for) on drop.
struct Node {
    child: Child,
}

impl Node {
    fn signal(&mut self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, signal);
        // Bounded: a node that does not stop fails the test.
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the node did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
    }
}

fn records(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn a_node_started_with_data_dir_is_found_through_its_runtime_record() {
    let tmp = tempfile::tempdir().unwrap();
    let user = User {
        home: tmp.path().join("home"),
        run: Some(tmp.path().join("run")),
    };
    let (x, y) = (tmp.path().join("x"), tmp.path().join("y"));
    let run = tmp.path().join("run/termesh");

    let mut a = user.node(&x);
    assert_eq!(records(&run).len(), 1, "{:?}", records(&run));
    let (ok, out, err) = user.termesh(&["new", "--name", "found", "--", "sleep", "1000"]);
    assert!(ok, "{err}");
    let id = out.trim().to_string();
    let (ok, out, err) = user.termesh(&["ls"]);
    assert!(
        ok && out.contains(&id) && out.contains("found"),
        "{out}{err}"
    );

    // Two local nodes: no guess, both named, and how to choose.
    let mut b = user.node(&y);
    let (ok, _, err) = user.termesh(&["ls"]);
    assert!(
        !ok && err.contains("2 local nodes run")
            && err.contains(&x.display().to_string())
            && err.contains(&y.display().to_string())
            && err.contains("--data-dir"),
        "{err}"
    );
    let (ok, out, err) = user.termesh(&["ls", "--data-dir", y.to_str().unwrap()]);
    assert!(ok && !out.contains(&id), "{out}{err}");

    // A crashed node's record stays, and is not taken for a node.
    b.signal(nix::sys::signal::Signal::SIGKILL);
    assert_eq!(records(&run).len(), 2);
    let (ok, out, err) = user.termesh(&["ls"]);
    assert!(ok && out.contains(&id), "{out}{err}");

    // A clean stop removes the record; with none left, the error says
    // where the client looked and what to pass.
    a.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(records(&run).len(), 1, "only the crashed node's is left");
    let default = std::net::TcpStream::connect("127.0.0.1:7420").is_ok();
    let (ok, _, err) = user.termesh(&["ls"]);
    assert!(!ok);
    if default {
        eprintln!("a node listens on the default address here: its error is not checked");
    } else {
        for part in [
            "no termesh node at http://127.0.0.1:7420",
            "home/.local/share/termesh/node.url (absent)",
            "run/termesh (no running node recorded)",
            "the default address",
            "--data-dir DIR",
            "TERMESH_DATA_DIR",
            "--url",
        ] {
            assert!(err.contains(part), "{part:?} in {err}");
        }
    }
}

#[test]
fn without_a_runtime_dir_the_record_is_in_the_default_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let user = User {
        home: tmp.path().join("home"),
        run: None,
    };
    let data = tmp.path().join("elsewhere");
    let node = user.node(&data);
    let nodes = tmp.path().join("home/.local/share/termesh/nodes");
    assert_eq!(records(&nodes).len(), 1, "{:?}", records(&nodes));
    let (ok, out, err) = user.termesh(&["ls", "--all"]);
    assert!(ok && out.starts_with("ID"), "{out}{err}");
    drop(node);
    assert!(records(&nodes).is_empty(), "{:?}", records(&nodes));
}
