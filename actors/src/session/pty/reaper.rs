//! Learns of every session program's exit for the whole node from one
//! SIGCHLD stream, so a session costs no descriptor (a pidfd) and no
//! thread for it. A SIGCHLD wakes one thread of the node's (`pty-reaper`),
//! which makes one pass over the programs still running, a
//! `waitid(WNOHANG | WNOWAIT)` each (about a microsecond): the exit is
//! seen without reaping, so the pid (and with it the process group id)
//! stays reserved by the zombie until the session lets go
//! (`io::wait_task`). Passes start at most every `PASS_GAP`, so a burst of
//! exits shares one: with 10,000 programs running (a pass of about 10 ms)
//! and others ending all the time, that bounds the cost to a fifth of a
//! core; an exit after a quiet spell is seen at once, in a burst within
//! `PASS_GAP`. Only pids the node started are looked at, so children
//! started any other way (tokio, std) are never reaped from under their
//! owners.

use std::collections::BTreeMap;
use std::sync::Mutex;

use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

use super::ExitInfo;

/// The least time between the starts of two passes.
const PASS_GAP: std::time::Duration = std::time::Duration::from_millis(50);

/// Programs whose exit is awaited, by pid.
static WAITING: Mutex<BTreeMap<i32, oneshot::Sender<ExitInfo>>> = Mutex::new(BTreeMap::new());

/// Starts the node's SIGCHLD listener on `rt` and its pass thread (once;
/// a failure is returned, and tried again by the next create).
pub fn start(rt: &tokio::runtime::Handle) -> std::io::Result<()> {
    static STARTED: Mutex<bool> = Mutex::new(false);
    let mut started = STARTED.lock().unwrap_or_else(|p| p.into_inner());
    if *started {
        return Ok(());
    }
    let _in_runtime = rt.enter();
    let mut children = signal(SignalKind::child())?;
    // The passes run on a thread of their own, made here so that a node
    // out of threads fails this create rather than losing exits later.
    let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
    std::thread::Builder::new()
        .name("pty-reaper".into())
        .spawn(move || passes(woken))?;
    rt.spawn(async move {
        while children.recv().await.is_some() {
            // A wake already waiting covers this SIGCHLD too.
            let _ = wake.try_send(());
        }
    });
    *started = true;
    Ok(())
}

/// One pass per wake, at most one every `PASS_GAP`: SIGCHLDs meanwhile
/// wait as one wake for the next pass.
fn passes(woken: std::sync::mpsc::Receiver<()>) {
    while woken.recv().is_ok() {
        let began = std::time::Instant::now();
        look_all();
        std::thread::sleep(PASS_GAP.saturating_sub(began.elapsed()));
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

fn lock() -> std::sync::MutexGuard<'static, BTreeMap<i32, oneshot::Sender<ExitInfo>>> {
    WAITING.lock().unwrap_or_else(|p| p.into_inner())
}

fn look_all() {
    let pids: Vec<i32> = lock().keys().copied().collect();
    for pid in pids {
        look(pid);
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
