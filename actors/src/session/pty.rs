//! The PTY of a session: opening it, starting the program in it, and the
//! program's process group (signals, the foreground group). Its reads,
//! writes and exit wait run without threads of their own (`io`).
//!
//! Reaping: the waiter learns of the exit without reaping (`WNOWAIT`), so
//! the program's pid, and with it its process group id, stays reserved by
//! the zombie; it reaps only when the session drops its `ReapGuard`, after
//! which the session never signals the group again. A late SIGKILL can
//! therefore never hit a recycled process group.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use filedescriptor::FileDescriptor;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use portable_pty::{native_pty_system, PtySize};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use crate::keeper::Keeper;
pub use io::{PtyIo, READ_CHUNK};
pub use reaper::exit_info;

mod input;
mod io;
mod reads;
mod reaper;
mod seqs;
mod spin;
mod weight;
mod writes;

pub use input::{InputTx, ToTerminal, INPUT_QUEUE_BYTES};

pub use seqs::Sequencer;

/// Frames queued between the reader and the session actor.
const OUTPUT_QUEUE: usize = 32;
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

impl From<crate::keeper::Exit> for ExitInfo {
    fn from(exit: crate::keeper::Exit) -> Self {
        ExitInfo {
            code: exit.code,
            signal: exit.signal.and_then(|s| Signal::try_from(s).ok()),
        }
    }
}

impl ExitInfo {
    /// The signal's name without `SIG` (`"TERM"`).
    pub fn signal_name(&self) -> Option<String> {
        self.signal
            .map(|s| s.as_str().trim_start_matches("SIG").to_string())
    }
}

/// Events from the reader and the waiter, in one stream.
#[derive(Debug)]
pub enum PtyEvent {
    /// A frame with its seq, already in the output log.
    Output {
        seq: u64,
        data: Bytes,
    },
    Eof,
    Exited(ExitInfo),
    /// The keeper that held the program is gone, and the program with it.
    Lost,
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

impl SpawnSpec {
    fn size(&self) -> (u16, u16) {
        (self.cols, self.rows)
    }
}

impl SpawnError {
    /// Whether the node, not the request, is at fault.
    pub fn is_internal(&self) -> bool {
        !matches!(self, SpawnError::Program { .. })
    }
}

/// Held by the session while it may still signal the program's group.
/// `release` lets the program be reaped (the node's own child by its
/// waiter, a kept one by the keeper, killed first if it still runs);
/// `detach` (the node stops) ends the PTY's tasks and leaves a kept
/// program running. Dropped without either, the node's own child is
/// reaped and a kept program is left to the keeper (as `detach`): only an
/// explicit release may end it.
#[derive(Debug)]
pub struct ReapGuard(tokio::sync::watch::Sender<Let>);

/// What the session did with its `ReapGuard`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Let {
    Held,
    Detached,
    Released,
}

impl ReapGuard {
    /// Stops the PTY's I/O without reaping or releasing the program.
    pub fn detach(self) {
        let _ = self.0.send(Let::Detached);
    }

    /// The session is done with the program: it may be reaped.
    pub fn release(self) {
        let _ = self.0.send(Let::Released);
    }
}

/// Once the session has let go of its `ReapGuard`: how.
async fn released(release: &mut tokio::sync::watch::Receiver<Let>) -> Let {
    while release.changed().await.is_ok() {}
    let how = *release.borrow();
    how
}

/// Which thread a session's reads run on, its own or the node's bulk
/// thread: bulk while
/// its program floods and is not interactive (`bulk::Flow` says so),
/// back at once when a key is written. Shared by the session's terminal,
/// its writer, its reader and the senders that write keys at once
/// (`input`).
#[derive(Debug, Clone)]
pub struct Lane(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Lane {
    fn default() -> Self {
        Lane(Arc::new(tokio::sync::watch::channel(false).0))
    }
}

impl Lane {
    /// Moves the reads to the bulk thread (`true`) or home.
    pub fn set_bulk(&self, bulk: bool) {
        // Asked on every frame: a read, and a write only on a change.
        if *self.0.borrow() != bulk {
            self.0
                .send_if_modified(|now| std::mem::replace(now, bulk) != bulk);
        }
    }
}

/// A PTY's master: the one descriptor a session holds, shared by its I/O
/// tasks (non-blocking reads and writes) and the session (size, the
/// foreground group), with the lane its reads take (`Lane`). Closed
/// when the last holder lets go.
#[derive(Debug, Clone)]
pub struct Terminal(Arc<FileDescriptor>, Lane);

impl Terminal {
    fn descriptor(&self) -> Arc<FileDescriptor> {
        self.0.clone()
    }

    /// Which thread the program's output is read on.
    pub fn lane(&self) -> &Lane {
        &self.1
    }

    /// Sets the terminal's size (the kernel sends SIGWINCH on a change).
    pub fn resize(&self, cols: u16, rows: u16) -> std::io::Result<()> {
        let size = rustix::termios::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        Ok(rustix::termios::tcsetwinsize(self.0.as_fd(), size)?)
    }

    /// The terminal's foreground process group, if any.
    pub fn foreground_group(&self) -> Option<i32> {
        rustix::termios::tcgetpgrp(self.0.as_fd())
            .ok()
            .map(|p| p.as_raw_nonzero().get())
            .filter(|p| *p > 0)
    }
}

/// A raw descriptor lent to `FileDescriptor::dup`, which copies it.
struct Lent(RawFd);

impl AsRawFd for Lent {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// The master, registered for one kind of readiness with the runtime of
/// the task that waits on it.
type Registered = tokio::io::unix::AsyncFd<Arc<FileDescriptor>>;

/// A running PTY program; its I/O is started by `spawn`.
pub struct Pty {
    /// Process id of the program, which is also its process group id
    /// (`os::spawn_on_terminal` makes it a session leader).
    pub pid: i32,
    pub terminal: Terminal,
    pub input: InputTx,
    pub events: mpsc::Receiver<PtyEvent>,
    pub reap_guard: ReapGuard,
    /// The keeper holds it: it runs on when the node stops.
    pub kept: bool,
    /// Where the session hands the reader its seqs (`take_seqs`).
    seqs: tokio::sync::watch::Sender<Option<Arc<Sequencer>>>,
}

impl Pty {
    /// The reader gives its frames seqs from `seqs` (it reads nothing into
    /// a frame before).
    pub fn take_seqs(&self, seqs: Arc<Sequencer>) {
        let _ = self.seqs.send(Some(seqs));
    }
}

impl std::fmt::Debug for Pty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pty").field("pid", &self.pid).finish()
    }
}

/// Opens a PTY (portable-pty), starts the program in it as a session
/// leader with the slave as its controlling terminal, and starts the PTY's
/// I/O on `thread` (its session's): the program is the node's child
/// and ends with it.
pub fn spawn((io, thread): (&PtyIo, &Handle), spec: &SpawnSpec) -> Result<Pty, SpawnError> {
    let env = child_env(&spec.env);
    let cwd = spec.cwd.clone().or_else(home);
    let (pid, master) = start_in_terminal(&spec.command, &env, cwd.as_deref(), spec.size())?;
    crate::os::reset_for_child(pid);
    start_io((io, thread), pid, master, io::Child::Own).inspect_err(|_| {
        // Nobody would read it or reap it: it goes now.
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
    })
}

/// Starts the program under the node's PTY keeper (`keeper`), which holds
/// it and its terminal across the node's restarts.
pub fn spawn_kept(
    (io, thread): (&PtyIo, &Handle),
    keeper: &Keeper,
    id: &str,
    spec: &SpawnSpec,
) -> Result<Pty, SpawnError> {
    let env = child_env(&spec.env);
    let cwd = spec.cwd.clone().or_else(home);
    let (pid, master) = keeper
        .spawn(id, &spec.command, &env, cwd, spec.size())
        .map_err(|e| match e {
            crate::keeper::SpawnError::Keeper(reason) => SpawnError::Pty(reason),
            crate::keeper::SpawnError::Program(reason) => SpawnError::Program {
                program: spec.command.first().cloned().unwrap_or_default(),
                reason,
            },
        })?;
    adopt((io, thread), keeper, id, pid, master)
}

/// Takes up a program the keeper holds (started by this node or by an
/// earlier run of it): `master` is the keeper's copy of its PTY master.
pub fn adopt(
    (io, thread): (&PtyIo, &Handle),
    keeper: &Keeper,
    id: &str,
    pid: i32,
    master: OwnedFd,
) -> Result<Pty, SpawnError> {
    let child = io::Child::Kept(keeper.watch(id));
    start_io((io, thread), pid, FileDescriptor::new(master), child)
        .inspect_err(|_| keeper.release(id))
}

/// Opens a PTY and starts `command` in it (the node's and the keeper's
/// way alike); answers the program's pid and the PTY's master. The program
/// is started here rather than by portable-pty's `spawn_command`, whose
/// forked child lists `/proc/self/fd` and closes every entry: costs that
/// grow with the node's memory and descriptors, paid by every create
/// (`os::spawn_on_terminal`).
pub fn start_in_terminal(
    command: &[String],
    env: &[(OsString, OsString)],
    cwd: Option<&Path>,
    (cols, rows): (u16, u16),
) -> Result<(i32, FileDescriptor), SpawnError> {
    let pty_error = |e: &dyn std::fmt::Display| SpawnError::Pty(e.to_string());
    let Some((program, args)) = command.split_first() else {
        return Err(SpawnError::Program {
            program: String::new(),
            reason: "the command is empty".into(),
        });
    };
    let pair = native_pty_system()
        .openpty(PtySize {
            rows,
            cols,
            pixel_width: 0,
            pixel_height: 0,
        })
        .map_err(|e| pty_error(&e))?;
    let master = pair.master;
    let master_fd = master
        .as_raw_fd()
        .ok_or_else(|| SpawnError::Pty("the PTY master has no descriptor".into()))?;
    // A copy of the master of our own (portable-pty's goes below).
    let own = FileDescriptor::dup(&Lent(master_fd)).map_err(|e| pty_error(&e))?;
    // The child opens the slave by its name (the parent never holds it,
    // so the reader sees EOF once the program and its children close it).
    let slave = master
        .tty_name()
        .ok_or_else(|| SpawnError::Pty("the PTY has no slave name".into()))?;
    drop(pair.slave);
    drop(master);
    // The child opens it; that it cannot is the node's fault, not the
    // program's, so it is checked here.
    std::fs::metadata(&slave).map_err(|e| pty_error(&e))?;
    let program_spec = crate::os::TerminalProgram {
        program,
        args,
        env,
        cwd,
        slave: &slave,
    };
    let pid = crate::os::spawn_on_terminal(&program_spec).map_err(|failed| match failed {
        crate::os::SpawnFailed::Node(e) => pty_error(&e),
        crate::os::SpawnFailed::Program(e) => program_error(program, e),
    })?;
    Ok((pid, own))
}

/// Starts the reader, writer and exit waiter on `master` (made
/// non-blocking: the session's one descriptor), on `thread`.
fn start_io(
    (io, thread): (&PtyIo, &Handle),
    pid: i32,
    mut master: FileDescriptor,
    child: io::Child,
) -> Result<Pty, SpawnError> {
    let kept = matches!(child, io::Child::Kept(_));
    let pty_error = |e: &dyn std::fmt::Display| SpawnError::Pty(e.to_string());
    master.set_non_blocking(true).map_err(|e| pty_error(&e))?;
    let terminal = Terminal(Arc::new(master), Lane::default());
    let (event_tx, events) = mpsc::channel(OUTPUT_QUEUE);
    let direct = input::Direct::new(&terminal.0, terminal.lane().clone(), io.written());
    let (input, queue) = InputTx::new(Some(direct), io.typed());
    let (guard_tx, guard_rx) = tokio::sync::watch::channel(Let::Held);
    let (seqs, seqs_rx) = tokio::sync::watch::channel(None);
    let out = (event_tx, seqs_rx);
    io::start((io, thread), &terminal, pid, child, out, queue, guard_rx)
        .map_err(|e| pty_error(&e))?;
    Ok(Pty {
        pid,
        terminal,
        input,
        events,
        reap_guard: ReapGuard(guard_tx),
        kept,
        seqs,
    })
}

/// As portable-pty did: without a cwd the program starts in the home
/// directory.
fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_dir())
}

/// The program's environment: the node's, `TERM`, the request's, and a
/// `SHELL` when none is set (as portable-pty did).
fn child_env(extra: &BTreeMap<String, String>) -> Vec<(OsString, OsString)> {
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    env.insert("TERM".into(), "xterm-256color".into());
    for (k, v) in extra {
        env.insert(k.into(), v.into());
    }
    env.entry("SHELL".into())
        .or_insert_with(|| "/bin/sh".into());
    env.into_iter().collect()
}

/// Sorts a failed program start: missing or not executable is the
/// request's fault; running out of descriptors, processes or memory is the
/// node's.
fn program_error(program: &str, e: std::io::Error) -> SpawnError {
    let node_fault = e.raw_os_error().is_some_and(|code| {
        matches!(
            code,
            libc::EMFILE | libc::ENFILE | libc::EAGAIN | libc::ENOMEM | libc::ENOSPC
        )
    });
    let (program, reason) = (program.to_string(), e.to_string());
    if node_fault {
        SpawnError::Resources { program, reason }
    } else {
        SpawnError::Program { program, reason }
    }
}

/// Signals the program's process group and the terminal's foreground group.
/// Only call it while holding the session's `ReapGuard` (the program is
/// alive or an unreaped zombie, so `pid` is still its group). The
/// foreground group is signalled only when its leader is in the program's
/// session, so a stale id from the terminal never reaches a stranger.
pub fn signal_groups(pid: i32, terminal: &Terminal, signal: Signal) {
    let _ = killpg(Pid::from_raw(pid), signal);
    signal_foreground(pid, terminal, signal, false);
}

/// Signals the terminal's foreground group if its leader belongs to the
/// program's session (`pid` leads it); `include_own` also when that group
/// is the program's own.
pub fn signal_foreground(pid: i32, terminal: &Terminal, signal: Signal, include_own: bool) {
    let Some(fg) = terminal.foreground_group() else {
        return;
    };
    let ours = nix::unistd::getsid(Some(Pid::from_raw(fg))).is_ok_and(|sid| sid.as_raw() == pid);
    if ours && (include_own || fg != pid) {
        let _ = killpg(Pid::from_raw(fg), signal);
    }
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

/// A fresh raw terminal for unit tests: its master, non-blocking, and its
/// slave. Raw before anything is written, so it holds bytes as they came.
#[cfg(test)]
fn raw_terminal() -> (FileDescriptor, std::os::fd::OwnedFd) {
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut attrs = nix::sys::termios::tcgetattr(&pty.slave).unwrap();
    nix::sys::termios::cfmakeraw(&mut attrs);
    nix::sys::termios::tcsetattr(&pty.slave, nix::sys::termios::SetArg::TCSANOW, &attrs).unwrap();
    let mut master = FileDescriptor::new(pty.master);
    master.set_non_blocking(true).unwrap();
    (master, pty.slave)
}
