//! `termesh keeper`: the PTY keeper of one data dir. It starts the node's
//! programs as its own children, each in a new PTY, holds their masters,
//! and hands a copy of each to the node over `DIR/keeper.sock` (the wire
//! in `termesh_actors::keeper::wire`), so programs outlive the node's
//! restarts, upgrades and crashes: while no node reads a terminal, its
//! program blocks on the full PTY buffer and nothing is lost. It keeps the
//! exit status of a program that ends until the node releases it.
//!
//! Kept small on purpose (it rarely changes and must not go down): one
//! thread, `poll`, no async runtime, no network, no store. If it dies, its
//! programs' terminals hang up with it (SIGHUP) and their sessions become
//! `lost`; a machine reboot ends them too. It stops by itself when its
//! data dir is removed (no node could reach its programs again), or when
//! its socket is and it holds no program; a socket removed alone is made
//! again.

mod programs;

use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use termesh_actors::private_fs;

use anyhow::Context;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use rustix::event::{poll, PollFd, PollFlags};
use termesh_actors::keeper::wire::{self, Reply, Request};

use programs::Programs;

/// How often the keeper checks that its socket is still its own.
const LOOK_EVERY: rustix::event::Timespec = rustix::event::Timespec {
    tv_sec: 5,
    tv_nsec: 0,
};

/// How long a stopped keeper waits for its programs to end after their
/// terminals hang up (within the unit's TimeoutStopSec=, 15 s).
const HANG_UP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Listens on `path` (a stale socket there goes first), mode 0600;
/// answers the socket and the file's identity.
fn listen(path: &Path) -> anyhow::Result<(OwnedFd, (u64, u64))> {
    use std::os::unix::fs::MetadataExt;
    let _ = std::fs::remove_file(path);
    let listener = wire::seqpacket()?;
    rustix::net::bind(&listener, &wire::address(path)?)
        .with_context(|| format!("cannot bind {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    rustix::net::listen(&listener, 16)?;
    let m = std::fs::metadata(path)?;
    Ok((listener, (m.dev(), m.ino())))
}

/// Whether `path` is still the socket `id` names: `false` only when it is
/// gone (ENOENT) or another file; a file system that fails to answer
/// (a dead disk) is not a reason to end the programs.
fn still_ours(path: &Path, id: (u64, u64)) -> bool {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) => (m.dev(), m.ino()) == id,
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// Runs the keeper of `data_dir` until it is stopped (SIGTERM) or killed,
/// or its socket goes. Returns at once when another keeper already serves
/// the dir.
pub fn run(data_dir: &Path) -> anyhow::Result<()> {
    // Out of the caller's session: a Ctrl-C or a closed terminal that ends
    // a node run by hand does not reach the keeper it started.
    let _ = rustix::process::setsid();
    private_fs::create_dir(data_dir)
        .with_context(|| format!("cannot create the data dir {}", data_dir.display()))?;
    let Some(_lock) = lock(data_dir)? else {
        tracing::info!(dir = %data_dir.display(), "another keeper serves this data dir");
        return Ok(());
    };
    let path = wire::socket_path(data_dir);
    let (mut listener, mut socket_id) = listen(&path)?;
    // Exits, and a stop (SIGTERM: `termesh stop --keeper`, the unit at
    // shutdown), come as reads; the programs start with no signal blocked.
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    mask.add(Signal::SIGTERM);
    mask.thread_block()?;
    let mut signals = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)?;
    // Before the line that says it serves (tests wait for that one).
    if let Some(hint) = termesh_actors::session::autogroup::hint() {
        tracing::info!("{hint}");
    }
    tracing::info!(socket = %path.display(), pid = std::process::id(), "PTY keeper serving");
    notify_ready();

    let mut keeper = Keeper {
        programs: Programs::default(),
        node: None,
        pending: Vec::new(),
        greeted: false,
        buf: Vec::new(),
    };
    loop {
        let (accept, signalled, node, pending) = {
            let mut fds = vec![
                PollFd::new(&listener, PollFlags::IN),
                PollFd::new(&signals, PollFlags::IN),
            ];
            if let Some(node) = &keeper.node {
                fds.push(PollFd::new(node, PollFlags::IN));
            }
            let first_pending = fds.len();
            for p in &keeper.pending {
                fds.push(PollFd::new(&p.socket, PollFlags::IN));
            }
            match poll(&mut fds, Some(&LOOK_EVERY)) {
                Err(rustix::io::Errno::INTR) => continue,
                result => result?,
            };
            let ready = |i: usize| fds.get(i).is_some_and(|f| !f.revents().is_empty());
            let pending: Vec<usize> = (0..keeper.pending.len())
                .filter(|&k| ready(first_pending + k))
                .collect();
            (
                ready(0),
                ready(1),
                keeper.node.is_some() && ready(2),
                pending,
            )
        };
        if !still_ours(&path, socket_id) {
            // Its data dir was removed (no node can reach these programs
            // any more: they end with the keeper), or only the socket was
            // (it is made again where the node looks).
            let dir_gone = std::fs::metadata(data_dir)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
            if dir_gone || keeper.programs.is_empty() {
                tracing::warn!(socket = %path.display(), programs = keeper.programs.len(), "the keeper's socket is gone (its data dir too: {dir_gone}): stopping; its programs' terminals hang up");
                return Ok(());
            }
            match listen(&path) {
                Ok((again, id)) => {
                    (listener, socket_id) = (again, id);
                    tracing::warn!(socket = %path.display(), "the keeper's socket was gone: listening there again");
                }
                Err(e) => {
                    tracing::error!(socket = %path.display(), "the keeper's socket is gone and cannot be made again: {e:#}")
                }
            }
        }
        if signalled {
            let mut stop = false;
            while let Ok(Some(info)) = signals.read_signal() {
                stop |= info.ssi_signo == Signal::SIGTERM as u32;
            }
            if stop {
                tracing::info!(
                    programs = keeper.programs.len(),
                    "asked to stop (SIGTERM): its programs' terminals hang up"
                );
                let left = keeper.programs.hang_up(HANG_UP_GRACE, |within| {
                    let timeout = rustix::event::Timespec::try_from(within).unwrap_or(LOOK_EVERY);
                    let mut fds = [PollFd::new(&signals, PollFlags::IN)];
                    let _ = poll(&mut fds, Some(&timeout));
                    while let Ok(Some(_)) = signals.read_signal() {}
                });
                if left > 0 {
                    tracing::warn!(
                        left,
                        "programs still run {}s after their hang-up: left to whoever ends the rest",
                        HANG_UP_GRACE.as_secs()
                    );
                }
                return Ok(());
            }
            for (id, exit) in keeper.programs.look() {
                // A node not yet greeted hears of it in `held`.
                if keeper.greeted {
                    tell(&mut keeper.node, &Reply::Exited { id, exit }, None);
                }
            }
        }
        if node {
            keeper.read_node();
        }
        // Newest first, so the indexes of the ones not read yet hold.
        for k in pending.into_iter().rev() {
            keeper.read_pending(k);
        }
        keeper.pending.retain(|p| p.since.elapsed() < HELLO_WITHIN);
        if accept {
            keeper.accept(&listener);
        }
    }
}

/// A new connection must say `hello` within this to become the node's;
/// until then the node's connection stays as it is.
const HELLO_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);
/// Connections waiting to say `hello` at most (a new one drops the oldest).
const MAX_PENDING: usize = 4;

/// A connection that has not said `hello` yet.
struct Pending {
    socket: OwnedFd,
    since: std::time::Instant,
}

struct Keeper {
    programs: Programs,
    /// The node's connection (one at a time: a new one that says `hello`
    /// replaces it).
    node: Option<OwnedFd>,
    pending: Vec<Pending>,
    /// The node's `hello` was answered.
    greeted: bool,
    buf: Vec<u8>,
}

impl Keeper {
    fn accept(&mut self, listener: &OwnedFd) {
        let socket = match rustix::net::accept_with(listener, rustix::net::SocketFlags::CLOEXEC) {
            Ok(socket) => socket,
            Err(e) => {
                tracing::warn!("accept: {e}");
                return;
            }
        };
        // The socket is the owner's alone (mode 0600); this checks again.
        let uid = rustix::process::getuid().as_raw();
        match rustix::net::sockopt::socket_peercred(&socket) {
            Ok(cred) if cred.uid.as_raw() == uid => {}
            _ => {
                tracing::warn!("refused a connection from another user");
                return;
            }
        }
        // A node that stops reading (SIGSTOP) must not stop the keeper:
        // a send that cannot go within this drops the connection.
        let _ = rustix::net::sockopt::set_socket_timeout(
            &socket,
            rustix::net::sockopt::Timeout::Send,
            Some(std::time::Duration::from_secs(2)),
        );
        // It becomes the node's connection once it says `hello`: a
        // process that only connects (a probe, a stray client) changes
        // nothing.
        if self.pending.len() >= MAX_PENDING {
            self.pending.remove(0);
        }
        self.pending.push(Pending {
            socket,
            since: std::time::Instant::now(),
        });
    }

    /// The first message of a new connection: a `hello` of this version
    /// makes it the node's connection; anything else (or its end) drops
    /// it.
    fn read_pending(&mut self, k: usize) {
        let pending = self.pending.remove(k);
        let first = wire::recv::<Request>(&pending.socket, &mut self.buf);
        let mut socket = Some(pending.socket);
        match first {
            Ok(Some((Request::Hello { version }, _))) if version != wire::VERSION => {
                let reason = format!(
                    "this keeper speaks version {}, the node {version}: restart the keeper (its programs end) or run the node with --no-keeper",
                    wire::VERSION
                );
                tracing::error!("{reason}");
                tell(&mut socket, &Reply::Refused { reason }, None);
            }
            Ok(Some((Request::Hello { .. }, _))) => {
                if self.node.is_some() {
                    tracing::info!("a new node connection replaces the last one");
                }
                self.node = socket;
                self.greet();
            }
            Ok(Some(_)) => tracing::warn!("a connection that did not begin with hello: dropped"),
            Ok(None) => {}
            Err(e) => tracing::warn!("a new connection failed before hello ({e}): dropped"),
        }
    }

    /// Answers the node's `hello`: this keeper, then the programs it
    /// holds; their exits are told from then on.
    fn greet(&mut self) {
        let hello = Reply::Hello {
            version: wire::VERSION,
            pid: std::process::id(),
        };
        tell(&mut self.node, &hello, None);
        for (reply, master) in self.programs.held() {
            tell(&mut self.node, &reply, Some(master));
        }
        tell(&mut self.node, &Reply::HeldEnd, None);
        // Exits are told from now on (the ones before are in `held`).
        self.greeted = true;
    }

    /// Handles one message from the node; its end or a bad message drops
    /// the connection (the programs stay).
    fn read_node(&mut self) {
        let Some(node) = &self.node else { return };
        let request = match wire::recv::<Request>(node, &mut self.buf) {
            Ok(Some((request, _))) => request,
            Ok(None) => {
                tracing::info!("the node disconnected; its programs run on");
                self.node = None;
                return;
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                // Answered, and the connection kept: the node logs it.
                tracing::warn!("a message from the node that does not decode: {e}");
                let reason = format!("a message this keeper cannot read: {e}");
                tell(&mut self.node, &Reply::Refused { reason }, None);
                return;
            }
            Err(e) => {
                tracing::warn!("the node connection failed ({e}): dropped");
                self.node = None;
                return;
            }
        };
        match request {
            Request::Hello { version } if version != wire::VERSION => {
                let reason = format!(
                    "this keeper speaks version {}, the node {version}: restart the keeper (its programs end) or run the node with --no-keeper",
                    wire::VERSION
                );
                tracing::error!("{reason}");
                tell(&mut self.node, &Reply::Refused { reason }, None);
                self.node = None;
            }
            Request::Hello { .. } => self.greet(),
            Request::Spawn {
                id,
                command,
                cwd,
                env,
                cols,
                rows,
            } => {
                let reply = match self.programs.spawn(&id, &command, cwd, env, (cols, rows)) {
                    Ok(pid) => Reply::Spawned { id, pid },
                    Err((internal, reason)) => Reply::SpawnFailed {
                        id,
                        internal,
                        reason,
                    },
                };
                let master = match &reply {
                    Reply::Spawned { id, .. } => self.programs.master(id),
                    _ => None,
                };
                tell(&mut self.node, &reply, master);
            }
            Request::Release { id } => self.programs.release(&id),
        }
    }
}

/// Sends to the node, if one is connected (a failed send drops it).
fn tell(node: &mut Option<OwnedFd>, reply: &Reply, fd: Option<BorrowedFd<'_>>) {
    let Some(socket) = node else { return };
    if let Err(e) = wire::send(&*socket, reply, fd) {
        tracing::warn!("the node connection failed ({e}): dropped");
        *node = None;
    }
}

/// Tells systemd the keeper serves, for a keeper run as a unit of its own
/// (`Type=notify`, as `termesh-keeper.service` did before the shipped unit
/// had the node start its keeper; such a unit still runs until it is
/// moved from, docs/operations.md). Nothing without `NOTIFY_SOCKET`, as
/// under the node.
fn notify_ready() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let target = target.as_bytes();
    let sent = UnixDatagram::unbound().and_then(|socket| {
        let address = match target.strip_prefix(b"@") {
            Some(name) => SocketAddr::from_abstract_name(name)?,
            None => SocketAddr::from_pathname(std::ffi::OsStr::from_bytes(target))?,
        };
        socket.send_to_addr(b"READY=1", &address)
    });
    if let Err(e) = sent {
        tracing::warn!("could not tell systemd the keeper is ready: {e}");
    }
}

/// Takes `DIR/keeper.lock` (an exclusive `flock`, held while the keeper
/// lives) and writes the keeper's pid in it; `None` when another process
/// holds it.
fn lock(data_dir: &Path) -> anyhow::Result<Option<nix::fcntl::Flock<std::fs::File>>> {
    let path = data_dir.join("keeper.lock");
    let file = private_fs::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| private_fs::explain(&path, e))
        .with_context(|| format!("cannot open {}", path.display()))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(mut locked) => {
            use std::io::Write;
            locked.set_len(0)?;
            writeln!(locked, "{}", std::process::id())?;
            Ok(Some(locked))
        }
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(anyhow::anyhow!("cannot lock {}: {e}", path.display())),
    }
}
