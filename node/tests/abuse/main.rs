//! The abuse suite (issue 28): a real node, real sockets, a hostile client
//! doing what its token allows as hard as it can. Each case asserts the
//! node's memory stays within the case's bound (docs/operations.md,
//! "What one client may cost"), that another client's keystrokes still
//! echo, and that programs run on.

#[path = "../common/mod.rs"]
mod common;

mod connections;
mod peer;
mod requests;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::binary::{client, BinaryNode};
use common::*;
use termesh_transport::{ClientMsg, ServerMsg};

/// The node's resident memory, KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Samples the node's RSS every 10 ms until dropped; `peak()` the most.
pub struct RssWatch {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
}

impl RssWatch {
    pub fn start(pid: u32) -> RssWatch {
        let (stop, peak) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (s, p) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss_kib(pid), Ordering::Relaxed);
                // The sampling period, not a wait for an event: RSS has
                // no event to wait on, and the peak is what is measured.
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        });
        RssWatch { stop, peak }
    }

    pub fn peak_mib(&self) -> f64 {
        self.peak.load(Ordering::Relaxed) as f64 / 1024.0
    }
}

impl Drop for RssWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Another client's keystrokes echo in its own session, `rounds` times;
/// if one does not, the failure shows the node's threads and log.
pub async fn echo_works(node: &BinaryNode, session: &str, rounds: usize) {
    if let Err(what) = echo_at(&node.target(OPERATOR), session, rounds).await {
        let mut metrics: Vec<(String, f64)> = wire::metrics(&format!("http://{}", node.addr))
            .await
            .into_iter()
            .filter(|(_, v)| *v != 0.0)
            .collect();
        metrics.sort_by(|a, b| a.0.cmp(&b.0));
        panic!(
            "{what}\nthe node's threads:\n{}\nits metrics: {metrics:?}\nthe node's log ends:\n{}",
            threads(node.child.id()),
            last_lines(&node.log(), 60)
        );
    }
}

/// Keystrokes through the node `target` names echo in `session`, or where
/// they stopped.
pub async fn echo_at(
    target: &termesh_node::client::Target,
    session: &str,
    rounds: usize,
) -> Result<(), String> {
    let mut c = termesh_node::client::Client::connect(target)
        .await
        .expect("connects");
    let mut s = Stream::new(1 << 20);
    within(
        PATIENCE,
        "subscribed",
        subscribe(&mut c, session, None, 1 << 20),
    )
    .await
    .unwrap();
    // Typed only once the snapshot came: a snapshot computed after the key
    // was echoed shows the echo, and only what comes after the snapshot is
    // looked at (under load a key typed at once seemed lost that way: the
    // program had answered, inside the snapshot).
    within(
        PATIENCE,
        "the snapshot",
        pump_until(&mut c, session, &mut s, true, |s| !s.snapshots.is_empty()),
    )
    .await
    .unwrap();
    for k in 0..rounds {
        let key = format!("echo-{k}-");
        c.send(&ClientMsg::Input {
            session: session.to_string(),
            data: format!("{key}\r").into_bytes(),
        })
        .await
        .unwrap();
        let echoed = pump_until(&mut c, session, &mut s, true, |s| {
            String::from_utf8_lossy(&s.data).contains(&key)
        });
        if tokio::time::timeout(PATIENCE, echoed).await.is_err() {
            let tail = String::from_utf8_lossy(&s.data[s.data.len().saturating_sub(200)..]);
            return Err(format!(
                "timed out after {PATIENCE:?} waiting for a keystroke's echo (key {k}): \
                 {} snapshots, {} bytes after them ending {tail:?}, seq {}, errors {:?}",
                s.snapshots.len(),
                s.data.len(),
                s.last_seq,
                s.errors
            ));
        }
    }
    c.close().await;
    Ok(())
}

/// Each thread of process `pid` (name, state, what it waits in), then
/// each process below it (the keeper and the programs): the same, with
/// its CPU cgroup and nice value.
pub fn threads(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return "(gone)".into();
    };
    let mut out: Vec<String> = tasks
        .flatten()
        .map(|t| format!("  {}", task_line(&t.path())))
        .collect();
    let mut parents = vec![pid.to_string()];
    while let Some(parent) = parents.pop() {
        for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let dir = p.path();
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(") ")
                .and_then(|(_, r)| r.split(' ').nth(1));
            if ppid == Some(parent.as_str()) {
                let cgroup = std::fs::read_to_string(dir.join("cgroup")).unwrap_or_default();
                let cpu = cgroup.lines().find(|l| l.contains(":cpu:")).unwrap_or("");
                let nice = stat
                    .rsplit_once(") ")
                    .and_then(|(_, r)| r.split(' ').nth(16));
                let io = std::fs::read_to_string(dir.join("io")).unwrap_or_default();
                let io: Vec<&str> = io.lines().take(2).collect();
                let child: u32 = p.file_name().to_string_lossy().parse().unwrap_or(0);
                out.push(format!(
                    "  process {} {cpu} nice {} io {io:?}; fd 0: {} bytes unread",
                    task_line(&dir),
                    nice.unwrap_or("?"),
                    unread_in(child, 0)
                ));
                parents.push(p.file_name().to_string_lossy().into_owned());
            }
        }
    }
    out.push(descriptors(pid));
    out.push(kernel_tty_work());
    out.join("\n")
}

/// The process's terminals and what each of its epoll sets watches.
fn descriptors(pid: u32) -> String {
    let mut out = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let target = std::fs::read_link(fd.path()).unwrap_or_default();
        let target = target.to_string_lossy();
        let name = fd.file_name().to_string_lossy().into_owned();
        if target.contains("ptmx") {
            let unread = name.parse().map_or(-1, |fd| unread_in(pid, fd));
            out.push(format!("  fd {name} {target}: {unread} bytes unread"));
        } else if target.contains("eventpoll") {
            let info =
                std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{name}")).unwrap_or_default();
            let watched: Vec<&str> = info.lines().filter(|l| l.starts_with("tfd")).collect();
            if watched.len() < 20 {
                out.push(format!("  epoll fd {name}: {}", watched.join(" | ")));
            }
        }
    }
    out.join("\n")
}

/// Kernel threads whose stack is in terminal code (the work that moves
/// a terminal's bytes from one side to the other).
fn kernel_tty_work() -> String {
    let mut out = Vec::new();
    for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let comm = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("kworker") {
            continue;
        }
        let stack = std::fs::read_to_string(p.path().join("stack")).unwrap_or_default();
        if stack.contains("tty") || stack.contains("ldisc") {
            out.push(format!(
                "  {} {}: {}",
                p.file_name().to_string_lossy(),
                comm.trim(),
                stack.replace('\n', " < ")
            ));
        }
    }
    format!(
        "kernel threads in terminal code: {}\n{}",
        out.len(),
        out.join("\n")
    )
}

/// Bytes waiting to be read on descriptor `fd` of process `pid` (a copy
/// taken with `pidfd_getfd`; -1 if it cannot be).
#[allow(unsafe_code)]
fn unread_in(pid: u32, fd: i32) -> i64 {
    // SAFETY: plain syscalls on descriptors this function owns and closes.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        if pidfd < 0 {
            return -1;
        }
        let copy = libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) as i32;
        libc::close(pidfd);
        if copy < 0 {
            return -1;
        }
        let mut n: libc::c_int = 0;
        let rc = libc::ioctl(copy, libc::FIONREAD, &mut n);
        libc::close(copy);
        if rc < 0 {
            -1
        } else {
            n as i64
        }
    }
}

/// A task's id, name, state and what it waits in.
fn task_line(dir: &std::path::Path) -> String {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let stat = read("stat");
    // The fields after the name's closing parenthesis: state first.
    let state = stat.rsplit_once(") ").map_or("?", |(_, r)| &r[..1]);
    let id = dir.file_name().unwrap_or_default().to_string_lossy();
    format!("{id} {} {state} {}", read("comm").trim(), read("wchan"))
}

/// The last `n` lines of `text`.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The session's screen as text.
pub async fn screen_text(node: &BinaryNode, session: &str) -> String {
    let mut c = client(node).await;
    let reply = c
        .request(|id| ClientMsg::Screen {
            id,
            session: session.to_string(),
            scrollback: None,
        })
        .await
        .unwrap();
    c.close().await;
    match reply {
        ServerMsg::Snapshot { data, .. } => String::from_utf8_lossy(&data).into_owned(),
        other => panic!("{other:?}"),
    }
}
