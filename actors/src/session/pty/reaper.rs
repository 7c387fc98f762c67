//! Learns of every session program's exit for the whole process from one
//! SIGCHLD stream, so a session costs no descriptor (a pidfd) and no
//! thread for it. A SIGCHLD wakes one thread of the process's (`pty-reaper`),
//! which makes one pass over the programs still running, a
//! `waitid(WNOHANG | WNOWAIT)` each (about a microsecond): the exit is
//! seen without reaping, so the pid (and with it the process group id)
//! stays reserved by the zombie until the session lets go
//! (`io::wait_task`). Passes start at most every `PASS_GAP`, so a burst of
//! exits shares one: with 10,000 programs running (a pass of about 10 ms)
//! and others ending all the time, that bounds the cost to a fifth of a
//! core; an exit after a quiet spell is seen at once, in a burst within
//! `PASS_GAP`. Only pids the nodes started are looked at, so children
//! started any other way (tokio, std) are never reaped from under their
//! owners.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

use super::ExitInfo;

/// The least time between the starts of two passes.
const PASS_GAP: std::time::Duration = std::time::Duration::from_millis(50);

/// Programs whose exit is awaited, by pid.
static WAITING: Mutex<BTreeMap<i32, oneshot::Sender<ExitInfo>>> = Mutex::new(BTreeMap::new());
/// Programs whose waiter is gone before it reaped them (its node's
/// session threads stopped): reaped here once they exit.
static ORPHANS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Starts the process's SIGCHLD listener (once; a failure is returned,
/// and tried again by the next create). It runs on a thread of its own,
/// made here so that a node out of threads fails this create rather than
/// losing exits later, and not on a node's threads: the process's children
/// are the process's, whichever node started them and whichever stopped.
pub fn start() -> std::io::Result<()> {
    static STARTED: Mutex<bool> = Mutex::new(false);
    let mut started = STARTED.lock().unwrap_or_else(|p| p.into_inner());
    if *started {
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let children = {
        let _in_runtime = rt.enter();
        signal(SignalKind::child())?
    };
    std::thread::Builder::new()
        .name("pty-reaper".into())
        .spawn(move || rt.block_on(passes(children)))?;
    *started = true;
    Ok(())
}

/// One pass per SIGCHLD, at most one every `PASS_GAP`: SIGCHLDs meanwhile
/// wait as one for the next pass.
async fn passes(mut children: tokio::signal::unix::Signal) {
    while children.recv().await.is_some() {
        let began = std::time::Instant::now();
        look_all();
        tokio::time::sleep(PASS_GAP.saturating_sub(began.elapsed())).await;
    }
}

/// Answers once `pid` (a child of this process) has exited, leaving it a
/// zombie. `start` must have run.
pub fn exited(pid: i32) -> oneshot::Receiver<ExitInfo> {
    let (tx, rx) = oneshot::channel();
    lock().insert(pid, tx);
    // An exit before the insert sent its SIGCHLD to a pass that did not
    // know the pid yet.
    look(pid);
    rx
}

/// Reaps `pid` (a child of this process whose waiter is gone) once it
/// has exited: now, or at a later pass. Its session is gone with its
/// waiter, so nothing signals its group any more.
pub fn orphan(pid: i32) {
    lock().remove(&pid);
    if !reap(pid) {
        orphans().insert(pid);
        // An exit between the look and the insert was seen by a pass that
        // did not know the pid yet.
        if reap(pid) {
            orphans().remove(&pid);
        }
    }
}

fn orphans() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    ORPHANS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reaps `pid` if it has exited (or is no child of ours any more).
fn reap(pid: i32) -> bool {
    loop {
        match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
            Err(nix::errno::Errno::EINTR) => continue,
            Ok(WaitStatus::StillAlive) => return false,
            _ => return true,
        }
    }
}

fn lock() -> std::sync::MutexGuard<'static, BTreeMap<i32, oneshot::Sender<ExitInfo>>> {
    WAITING.lock().unwrap_or_else(|p| p.into_inner())
}

fn look_all() {
    let pids: Vec<i32> = lock().keys().copied().collect();
    for pid in pids {
        look(pid);
    }
    let gone: Vec<i32> = orphans().iter().copied().collect();
    for pid in gone {
        if reap(pid) {
            orphans().remove(&pid);
        }
    }
}

/// Tells `pid`'s waiter if it has exited.
fn look(pid: i32) {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
    let result = loop {
        match waitid(Id::Pid(Pid::from_raw(pid)), flags) {
            Err(nix::errno::Errno::EINTR) => continue,
            result => break result,
        }
    };
    if let Some(info) = exit_info(result) {
        if let Some(tx) = lock().remove(&pid) {
            let _ = tx.send(info);
        }
    }
}

/// How the program ended, from `waitid`; `None` while it has not (a
/// `WNOHANG` look too early).
pub fn exit_info(result: nix::Result<WaitStatus>) -> Option<ExitInfo> {
    match result {
        Ok(WaitStatus::Exited(_, code)) => Some(ExitInfo {
            code: code as u32,
            signal: None,
        }),
        Ok(WaitStatus::Signaled(_, signal, _)) => Some(ExitInfo {
            code: 128 + signal as u32,
            signal: Some(signal),
        }),
        Ok(_) => None,
        Err(nix::errno::Errno::EINTR) => None,
        // The child is gone some other way: an exit the session can report.
        Err(_) => Some(ExitInfo {
            code: 1,
            signal: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_whose_waiter_is_gone_is_reaped_once_it_exits() {
        start().unwrap();
        // Its `Child` is forgotten: the reaper, not std, reaps it.
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        std::mem::forget(child);
        let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
        orphan(pid);
        assert!(proc_dir.exists(), "running: not reaped yet");
        nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
        // The reaper's pass on its SIGCHLD reaps it: polled, bounded above.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while proc_dir.exists() {
            assert!(std::time::Instant::now() < deadline, "still a zombie");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!orphans().contains(&pid));
    }
}
