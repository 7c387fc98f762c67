//! `termesh stop`: stops the local node of a data dir (SIGTERM, then waits
//! for its process to end: it closes its clients with 1001 and leaves its
//! programs to the keeper) and, with `--keeper`, that data dir's PTY
//! keeper, which ends the sessions' programs. Idempotent: what does not
//! run is said, not an error.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::server::runtime_file;

/// How long a stopped process may take to end.
const PATIENCE: Duration = Duration::from_secs(30);

/// Stops what runs for `data_dir`; exits 0 once none of it runs.
pub fn stop(data_dir: &Path, keeper: bool) -> anyhow::Result<i32> {
    let dir = canonical(data_dir);
    let nodes: Vec<_> = runtime_file::live(&runtime_file::dir())
        .into_iter()
        .filter(|r| canonical(&r.data_dir) == dir)
        .collect();
    if nodes.is_empty() {
        println!("no node of {} runs", data_dir.display());
    }
    for node in nodes {
        end(node.pid, || {
            runtime_file::live(&runtime_file::dir())
                .iter()
                .any(|r| r.pid == node.pid)
        })
        .with_context(|| format!("node `{}` (pid {})", node.name, node.pid))?;
        println!("stopped node `{}` (pid {})", node.name, node.pid);
    }
    if keeper {
        match keeper_pid(data_dir)? {
            None => {
                println!("no PTY keeper of {} runs", data_dir.display());
                if roots_default(data_dir) {
                    println!(
                        "(that is root's default data dir: a node run as another user, as \
                         deploy/termesh.service runs it, keeps its data in that user's; \
                         name it with --data-dir, or set data_dir in the config)"
                    );
                }
            }
            Some(pid) => {
                end(pid, || keeper_pid(data_dir).ok().flatten() == Some(pid))
                    .with_context(|| format!("the PTY keeper (pid {pid})"))?;
                println!("stopped the PTY keeper (pid {pid}) and the programs it held");
            }
        }
    }
    Ok(0)
}

/// `termesh stopped`, the unit's command once its node stopped: the
/// unit's cgroup given back first (so that a systemd before 254 may start
/// the next node in it, whatever else fails), then at shutdown the keeper
/// of `data_dir` (read only then: a config broken since the start stops
/// nothing else) stopped, its programs ended through their terminals
/// while the system still runs. Exits 1 when the cgroup could not be
/// given back.
pub fn stopped(data_dir: impl FnOnce() -> anyhow::Result<PathBuf>) -> anyhow::Result<i32> {
    let released = termesh_actors::session::release_cpu();
    match &released {
        Ok(Some(unit)) => println!(
            "cpu given back from the children of {} (the next node starts there)",
            unit.display()
        ),
        Ok(None) => {}
        Err(e) => eprintln!("termesh: cannot give the unit's cgroup back: {e}"),
    }
    let state = std::process::Command::new("systemctl")
        .arg("is-system-running")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .unwrap_or_default();
    if state == "stopping" {
        stop(&data_dir()?, true)?;
    }
    Ok(if released.is_ok() { 0 } else { 1 })
}

/// Whether `data_dir` is in root's home while root runs this: likely the
/// default of a config that names no data dir, not the node's.
fn roots_default(data_dir: &Path) -> bool {
    rustix::process::geteuid().is_root()
        && std::env::var_os("HOME").is_some_and(|home| data_dir.starts_with(home))
}

/// SIGTERM to `pid`, then waits while `runs` says it still does.
fn end(pid: u32, runs: impl Fn() -> bool) -> anyhow::Result<()> {
    let target = Pid::from_raw(i32::try_from(pid).context("a pid out of range")?);
    match kill(target, Signal::SIGTERM) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => bail!("cannot signal it: {e}"),
    }
    let deadline = Instant::now() + PATIENCE;
    while runs() {
        if Instant::now() >= deadline {
            bail!("still runs {}s after SIGTERM", PATIENCE.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The pid of the keeper holding `DIR/keeper.lock`, `None` when nobody
/// holds it (a stale pid in a free lock file is not a keeper).
fn keeper_pid(data_dir: &Path) -> anyhow::Result<Option<u32>> {
    let path = data_dir.join("keeper.lock");
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
    };
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock) {
        // Free: no keeper runs (the lock goes with the handle).
        Ok(_free) => Ok(None),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let pid = text
                .trim()
                .parse()
                .with_context(|| format!("{} holds no pid: {text:?}", path.display()))?;
            Ok(Some(pid))
        }
        Err((_, e)) => Err(e).with_context(|| format!("cannot lock {}", path.display())),
    }
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}
