//! The PTY of a session and the three plain threads around it: a reader
//! (blocking reads into a bounded channel: when the session falls behind the
//! reader blocks, the kernel buffer fills and the program's writes block),
//! a writer (drains the input channel that connections hold senders of, so
//! keystrokes never wait behind output work), and a waiter (child exit).
//!
//! Reaping: the waiter learns of the exit without reaping (`WNOWAIT`), so
//! the program's pid, and with it its process group id, stays reserved by
//! the zombie; it reaps only when the session drops its `ReapGuard`, after
//! which the session never signals the group again. A late SIGKILL can
//! therefore never hit a recycled process group.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use portable_pty::{native_pty_system, CommandBuilder, MasterPty, PtySize};
use tokio::sync::mpsc;

/// Largest read from the PTY, and so the largest frame.
pub const READ_CHUNK: usize = 64 * 1024;
/// First read size: an idle session touches no more memory than this.
const MIN_CHUNK: usize = 4 * 1024;
/// Frames queued between the reader thread and the session actor.
const OUTPUT_QUEUE: usize = 32;
/// Input messages queued for the writer thread (each at most 64 KiB).
pub const INPUT_QUEUE: usize = 256;

/// What is needed to start a session's program.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    pub command: Vec<String>,
    pub cwd: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub cols: u16,
    pub rows: u16,
}

/// How the program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    /// The exit code, or 128 + the signal number.
    pub code: u32,
    pub signal: Option<Signal>,
}

impl ExitInfo {
    /// The signal's name without `SIG` (`"TERM"`).
    pub fn signal_name(&self) -> Option<String> {
        self.signal
            .map(|s| s.as_str().trim_start_matches("SIG").to_string())
    }
}

/// Events from the reader and waiter threads, in one stream.
#[derive(Debug)]
pub enum PtyEvent {
    Output(Bytes),
    Eof,
    Exited(ExitInfo),
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The node's fault (no PTY, no descriptors, no threads): `internal`.
    #[error("cannot open a pty: {0}")]
    Pty(String),
    /// The request's fault (no such program, not executable): `bad_request`.
    #[error("cannot start {program:?}: {reason}")]
    Program { program: String, reason: String },
    /// Starting the program failed for a reason of the node's (EMFILE,
    /// EAGAIN, ENOMEM): `internal`.
    #[error("cannot start {program:?}: {reason}")]
    Resources { program: String, reason: String },
}

impl SpawnError {
    /// Whether the node, not the request, is at fault.
    pub fn is_internal(&self) -> bool {
        !matches!(self, SpawnError::Program { .. })
    }
}

/// Held by the session while it may still signal the program's group;
/// dropping it lets the waiter reap the exited program.
#[derive(Debug)]
pub struct ReapGuard(#[allow(dead_code)] std::sync::mpsc::Sender<()>);

/// A running PTY program; the threads are started by `spawn`.
pub struct Pty {
    /// Process id of the program, which is also its process group id
    /// (portable-pty makes it a session leader).
    pub pid: i32,
    pub master: Arc<Mutex<Box<dyn MasterPty + Send>>>,
    pub input: mpsc::Sender<Bytes>,
    pub events: mpsc::Receiver<PtyEvent>,
    pub reap_guard: ReapGuard,
}

impl std::fmt::Debug for Pty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pty").field("pid", &self.pid).finish()
    }
}

/// Opens a PTY, starts the program in it and the three threads.
pub fn spawn(spec: &SpawnSpec, thread_name: &str) -> Result<Pty, SpawnError> {
    let pair = native_pty_system()
        .openpty(PtySize {
            rows: spec.rows,
            cols: spec.cols,
            pixel_width: 0,
            pixel_height: 0,
        })
        .map_err(|e| SpawnError::Pty(e.to_string()))?;
    let mut cmd = CommandBuilder::new(&spec.command[0]);
    cmd.args(&spec.command[1..]);
    if let Some(cwd) = &spec.cwd {
        cmd.cwd(cwd);
    }
    cmd.env("TERM", "xterm-256color");
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    let child = pair
        .slave
        .spawn_command(cmd)
        .map_err(|e| program_error(&spec.command[0], e))?;
    // The slave must go, or the reader never sees EOF.
    drop(pair.slave);
    let pid = child
        .process_id()
        .ok_or_else(|| SpawnError::Pty("the child has no pid".into()))? as i32;
    // We reap the child ourselves (waitpid) to learn the signal number;
    // dropping portable-pty's handle does not wait or kill.
    drop(child);
    crate::priority::reset_for_child(pid);

    let master = pair.master;
    let master_fd = master.as_raw_fd();
    let reader = master
        .try_clone_reader()
        .map_err(|e| SpawnError::Pty(e.to_string()))?;
    // Keep the writer for the session's life: dropping it sends ^D.
    let writer = master
        .take_writer()
        .map_err(|e| SpawnError::Pty(e.to_string()))?;
    let (event_tx, events) = mpsc::channel(OUTPUT_QUEUE);
    let (input, input_rx) = mpsc::channel(INPUT_QUEUE);
    let (guard_tx, guard_rx) = std::sync::mpsc::channel();

    let tx = event_tx.clone();
    std::thread::Builder::new()
        .name(format!("{thread_name}-read"))
        .spawn(move || read_loop(reader, master_fd, tx))
        .map_err(|e| SpawnError::Pty(e.to_string()))?;
    std::thread::Builder::new()
        .name(format!("{thread_name}-write"))
        .spawn(move || write_loop(writer, input_rx))
        .map_err(|e| SpawnError::Pty(e.to_string()))?;
    std::thread::Builder::new()
        .name(format!("{thread_name}-wait"))
        .spawn(move || wait_loop(pid, event_tx, guard_rx))
        .map_err(|e| SpawnError::Pty(e.to_string()))?;

    Ok(Pty {
        pid,
        master: Arc::new(Mutex::new(master)),
        input,
        events,
        reap_guard: ReapGuard(guard_tx),
    })
}

/// Sorts a failed program start: missing or not executable is the
/// request's fault; running out of descriptors, processes or memory is the
/// node's.
fn program_error(program: &str, e: anyhow::Error) -> SpawnError {
    // The OS error may sit anywhere in the chain (a `dup` error wraps it).
    let io = e
        .chain()
        .find_map(|cause| cause.downcast_ref::<std::io::Error>());
    let node_fault = io
        .and_then(std::io::Error::raw_os_error)
        .is_some_and(|code| {
            matches!(
                code,
                libc::EMFILE | libc::ENFILE | libc::EAGAIN | libc::ENOMEM | libc::ENOSPC
            )
        });
    let (program, reason) = (program.to_string(), format!("{e:#}"));
    if node_fault {
        SpawnError::Resources { program, reason }
    } else {
        SpawnError::Program { program, reason }
    }
}

fn read_loop(mut reader: Box<dyn Read + Send>, master_fd: Option<i32>, tx: mpsc::Sender<PtyEvent>) {
    // Reads land in a buffer whose filled part is split off as the frame:
    // no copy between the read and every subscriber. The first read's size
    // adapts (an idle session keeps only a few KiB); after it, whatever is
    // already waiting is read into the same frame, up to READ_CHUNK, so a
    // flood becomes a few large frames while interactive output goes out at
    // once (the check does not wait).
    let mut buf = BytesMut::new();
    let mut want = MIN_CHUNK;
    loop {
        buf.clear();
        buf.resize(want, 0);
        let mut filled = match reader.read(&mut buf) {
            // A signal interrupted the read: nothing was read, nothing ended.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // Linux reports EIO once the last slave fd closes: that is EOF.
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        want = if filled == want {
            (want * 2).min(READ_CHUNK)
        } else if filled < want / 4 {
            (want / 2).max(MIN_CHUNK)
        } else {
            want
        };
        while filled < READ_CHUNK && master_fd.is_some_and(readable_now) {
            buf.resize(READ_CHUNK, 0);
            match reader.read(&mut buf[filled..]) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(0) | Err(_) => break,
                Ok(n) => filled += n,
            }
        }
        let frame = buf.split_to(filled).freeze();
        if tx.blocking_send(PtyEvent::Output(frame)).is_err() {
            return;
        }
    }
    let _ = tx.blocking_send(PtyEvent::Eof);
}

/// Whether the PTY has output waiting right now (no wait). The reader is a
/// duplicate of the master, so they share readiness.
fn readable_now(fd: i32) -> bool {
    let mut pfd = [filedescriptor::pollfd {
        fd,
        events: filedescriptor::POLLIN,
        revents: 0,
    }];
    matches!(filedescriptor::poll(&mut pfd, Some(std::time::Duration::ZERO)), Ok(n) if n > 0)
        && pfd[0].revents & filedescriptor::POLLIN != 0
}

fn write_loop(mut writer: Box<dyn Write + Send>, mut rx: mpsc::Receiver<Bytes>) {
    while let Some(data) = rx.blocking_recv() {
        if writer
            .write_all(&data)
            .and_then(|_| writer.flush())
            .is_err()
        {
            break;
        }
    }
}

fn wait_loop(pid: i32, tx: mpsc::Sender<PtyEvent>, release: std::sync::mpsc::Receiver<()>) {
    let info = loop {
        // WNOWAIT: learn of the exit but leave the zombie, which keeps the
        // pid and process group id from being reused while the session may
        // still signal them.
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(Pid::from_raw(pid)), flags) {
            Ok(WaitStatus::Exited(_, code)) => {
                break ExitInfo {
                    code: code as u32,
                    signal: None,
                }
            }
            Ok(WaitStatus::Signaled(_, signal, _)) => {
                break ExitInfo {
                    code: 128 + signal as u32,
                    signal: Some(signal),
                }
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => {
                break ExitInfo {
                    code: 1,
                    signal: None,
                }
            }
        }
    };
    let _ = tx.blocking_send(PtyEvent::Exited(info));
    // Wait until the session lets go of its guard (or is gone), then reap.
    while release.recv().is_ok() {}
    while let Err(nix::errno::Errno::EINTR) = waitpid(Pid::from_raw(pid), None) {}
}

/// Signals the program's process group and the terminal's foreground group.
/// Only call it while holding the session's `ReapGuard` (the program is
/// alive or an unreaped zombie, so `pid` is still its group). The
/// foreground group is signalled only when its leader is in the program's
/// session, so a stale id from the terminal never reaches a stranger.
pub fn signal_groups(pid: i32, master: &Mutex<Box<dyn MasterPty + Send>>, signal: Signal) {
    let _ = killpg(Pid::from_raw(pid), signal);
    signal_foreground(pid, master, signal, false);
}

/// Signals the terminal's foreground group if its leader belongs to the
/// program's session (`pid` leads it); `include_own` also when that group
/// is the program's own.
pub fn signal_foreground(
    pid: i32,
    master: &Mutex<Box<dyn MasterPty + Send>>,
    signal: Signal,
    include_own: bool,
) {
    let Some(fg) = foreground_group(master) else {
        return;
    };
    let ours = nix::unistd::getsid(Some(Pid::from_raw(fg))).is_ok_and(|sid| sid.as_raw() == pid);
    if ours && (include_own || fg != pid) {
        let _ = killpg(Pid::from_raw(fg), signal);
    }
}

/// The PTY's foreground process group, if any.
pub fn foreground_group(master: &Mutex<Box<dyn MasterPty + Send>>) -> Option<i32> {
    master
        .lock()
        .ok()?
        .process_group_leader()
        .filter(|p| *p > 0)
}

/// Parses a protocol signal name (`TERM`, `KILL`, `HUP`, `INT`).
pub fn parse_signal(name: &str) -> Option<Signal> {
    match name {
        "TERM" => Some(Signal::SIGTERM),
        "KILL" => Some(Signal::SIGKILL),
        "HUP" => Some(Signal::SIGHUP),
        "INT" => Some(Signal::SIGINT),
        _ => None,
    }
}
