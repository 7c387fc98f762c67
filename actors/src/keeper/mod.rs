//! The node's side of the PTY keeper (`termesh keeper`, in the node
//! crate): a small process per data dir that starts the node's programs as
//! its own children, holds their PTY masters, and so keeps them running
//! while the node restarts, upgrades or crashes. The node connects at
//! start (starting a keeper when none answers), takes up the programs the
//! keeper holds (`Held`: each with a copy of its master), starts new ones
//! through it (`spawn`), hears of their exits (`watch`), and releases them
//! when their session is done with them (`release`: the keeper reaps).
//! One thread of the node's reads the keeper's messages.
//!
//! If the keeper dies, its masters close with it; the node closes its own
//! copies, so every terminal hangs up (SIGHUP) and its sessions become
//! `lost`. The next create starts a new keeper.

pub use termesh_transport::keeper as wire;

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

pub use wire::Exit;
use wire::{Reply, Request};

/// Why a spawn through the keeper failed.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The keeper's fault (or the node's): no PTY, no answer, gone.
    #[error("{0}")]
    Keeper(String),
    /// The request's: no such program, not executable.
    #[error("{0}")]
    Program(String),
}

/// How long a node waits for a keeper it started to listen.
const START_WAIT: Duration = Duration::from_secs(10);
/// How long a spawn waits for the keeper's answer.
const SPAWN_WAIT: Duration = Duration::from_secs(10);
/// How long a send to the keeper, or a read at hello, may block.
const IO_WAIT: Duration = Duration::from_secs(10);

/// The data dir's keeper: the connection to it, made again (and a new
/// keeper started) when a spawn finds the last one gone. Cheap to clone.
#[derive(Clone)]
pub struct Keeper {
    current: Arc<Mutex<Connection>>,
    /// Held while a gone keeper is replaced (not `current`'s lock: watches
    /// and releases go on meanwhile).
    reconnecting: Arc<Mutex<()>>,
    data_dir: PathBuf,
    exe: PathBuf,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keeper").field("pid", &self.pid()).finish()
    }
}

/// One connection to a keeper.
#[derive(Clone)]
struct Connection {
    inner: Arc<Inner>,
}

struct Inner {
    socket: OwnedFd,
    pid: u32,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    gone: bool,
    spawns: HashMap<String, std::sync::mpsc::SyncSender<(Reply, Option<OwnedFd>)>>,
    exits: HashMap<String, oneshot::Sender<Exit>>,
    /// Exits told before anyone watched for them.
    ended: HashMap<String, Exit>,
}

/// A program the keeper held when the node connected.
#[derive(Debug)]
pub struct Held {
    pub id: String,
    pub pid: i32,
    /// A copy of its PTY master.
    pub master: OwnedFd,
    /// It ended while no node listened.
    pub exit: Option<Exit>,
}

/// A session's watch on its kept program: its exit, and its release.
pub struct Kept {
    keeper: Connection,
    id: String,
    exit: Option<oneshot::Receiver<Exit>>,
}

impl Kept {
    /// The program's exit; `None` if the keeper is gone.
    pub async fn exit(&mut self) -> Option<Exit> {
        self.exit.as_mut()?.await.ok()
    }

    /// Hands the program back to the keeper to reap (killed first if it
    /// still runs).
    pub fn release(self) {
        self.keeper.release(&self.id);
    }
}

impl Keeper {
    /// Connects to the keeper of `data_dir`, starting one (`exe keeper
    /// --data-dir DIR`, its log in DIR/keeper.log) when none listens;
    /// answers it and the programs it holds.
    pub fn connect_or_start(data_dir: &Path, exe: &Path) -> std::io::Result<(Keeper, Vec<Held>)> {
        let (connection, held) = Connection::connect_or_start(data_dir, exe)?;
        let keeper = Keeper {
            current: Arc::new(Mutex::new(connection)),
            reconnecting: Arc::default(),
            data_dir: data_dir.to_path_buf(),
            exe: exe.to_path_buf(),
        };
        Ok((keeper, held))
    }

    /// The keeper's process id.
    pub fn pid(&self) -> u32 {
        self.connection().inner.pid
    }

    /// Whether a keeper listens on `data_dir` (a connection made and
    /// dropped at once, without a hello: its programs are not touched).
    pub fn listening(data_dir: &Path) -> bool {
        let Ok(socket) = wire::seqpacket() else {
            return false;
        };
        wire::address(&wire::socket_path(data_dir))
            .is_ok_and(|addr| rustix::net::connect(&socket, &addr).is_ok())
    }

    /// Starts `command` in a new PTY under the keeper as session `id`;
    /// answers its pid and a copy of its master. A keeper found gone is
    /// started again first (its programs are lost; new ones need one).
    pub fn spawn(
        &self,
        id: &str,
        command: &[String],
        env: &[(OsString, OsString)],
        cwd: Option<PathBuf>,
        size: (u16, u16),
    ) -> Result<(i32, OwnedFd), SpawnError> {
        let mut connection = self.connection();
        if connection.is_gone() {
            let _one = self.reconnecting.lock().unwrap_or_else(|p| p.into_inner());
            connection = self.connection();
            if connection.is_gone() {
                let (fresh, held) = Connection::connect_or_start(&self.data_dir, &self.exe)
                    .map_err(|e| SpawnError::Keeper(format!("the PTY keeper: {e}")))?;
                for program in held {
                    // A keeper the node did not start holds programs no
                    // session of this run knows: they go.
                    fresh.release(&program.id);
                }
                *self.current.lock().unwrap_or_else(|p| p.into_inner()) = fresh.clone();
                connection = fresh;
            }
        }
        connection.spawn(id, command, env, cwd, size)
    }

    /// Watches `id`'s program for its exit.
    pub fn watch(&self, id: &str) -> Kept {
        self.connection().watch(id)
    }

    /// The node is done with `id`'s program: the keeper reaps it (killing
    /// its process group first if it still runs).
    pub fn release(&self, id: &str) {
        self.connection().release(id);
    }

    fn connection(&self) -> Connection {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The last line of `log` (its last 4 KiB read), if any.
fn last_line(log: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = crate::private_fs::options().read(true).open(log).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(4096))).ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

impl Connection {
    /// Connects to the keeper of `data_dir`, starting one (`exe keeper
    /// --data-dir DIR`, its log in DIR/keeper.log) when none listens.
    fn connect_or_start(data_dir: &Path, exe: &Path) -> std::io::Result<(Connection, Vec<Held>)> {
        if let Some(found) = Self::connect(data_dir)? {
            return Ok(found);
        }
        let log = crate::private_fs::append(&data_dir.join("keeper.log"))?;
        let mut child = std::process::Command::new(exe)
            .arg("keeper")
            .arg("--data-dir")
            .arg(data_dir)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot start {}: {e}", exe.display()))
            })?;
        let started = Instant::now();
        loop {
            if let Some(found) = Self::connect(data_dir)? {
                // The keeper leaves its own session at once; the node only
                // collects the exit status of the one it started.
                std::thread::Builder::new()
                    .name("keeper-start".into())
                    .spawn(move || child.wait())?;
                tracing::info!(pid = found.0.inner.pid, "started the PTY keeper");
                return Ok(found);
            }
            if let Some(status) = child.try_wait()? {
                let log = data_dir.join("keeper.log");
                let said = last_line(&log)
                    .map(|l| format!(": {l}"))
                    .unwrap_or_default();
                return Err(std::io::Error::other(format!(
                    "the PTY keeper exited ({status}) before it listened{said} (its log: {})",
                    log.display()
                )));
            }
            if started.elapsed() > START_WAIT {
                let _ = child.kill();
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the PTY keeper did not listen within {START_WAIT:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Connects to the keeper of `data_dir`; `None` when none listens.
    fn connect(data_dir: &Path) -> std::io::Result<Option<(Connection, Vec<Held>)>> {
        let path = wire::socket_path(data_dir);
        let socket = wire::seqpacket()?;
        match rustix::net::connect(&socket, &wire::address(&path)?) {
            Ok(()) => {}
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::CONNREFUSED) => return Ok(None),
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", path.display()),
                ))
            }
        }
        // Only a keeper of this user gets the programs' terminals: a
        // socket another user made in its place is refused.
        let me = rustix::process::getuid().as_raw();
        match rustix::net::sockopt::socket_peercred(&socket) {
            Ok(cred) if cred.uid.as_raw() == me => {}
            Ok(cred) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "{} is served by uid {}, not this user (uid {me}): refused",
                        path.display(),
                        cred.uid.as_raw()
                    ),
                ))
            }
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{}: cannot tell who serves it: {e}", path.display()),
                ))
            }
        }
        // A keeper that does not answer fails the hello, and later a send,
        // rather than hanging the node.
        use rustix::net::sockopt::{set_socket_timeout, Timeout};
        set_socket_timeout(&socket, Timeout::Send, Some(IO_WAIT))?;
        set_socket_timeout(&socket, Timeout::Recv, Some(IO_WAIT))?;
        let Greeted { pid, held, early } = hello(&socket)?;
        // The reader waits for the keeper's messages as long as it takes.
        set_socket_timeout(&socket, Timeout::Recv, None)?;
        let mut state = State::default();
        for h in &held {
            if let Some(exit) = h.exit {
                state.ended.insert(h.id.clone(), exit);
            }
        }
        state.ended.extend(early);
        let keeper = Connection {
            inner: Arc::new(Inner {
                socket,
                pid,
                state: Mutex::new(state),
            }),
        };
        let reader = keeper.clone();
        std::thread::Builder::new()
            .name("keeper-reader".into())
            .spawn(move || reader.read_loop())?;
        tracing::info!(pid, programs = held.len(), "connected to the PTY keeper");
        Ok(Some((keeper, held)))
    }

    /// Whether the keeper's connection has ended.
    fn is_gone(&self) -> bool {
        self.lock().gone
    }

    fn spawn(
        &self,
        id: &str,
        command: &[String],
        env: &[(OsString, OsString)],
        cwd: Option<PathBuf>,
        (cols, rows): (u16, u16),
    ) -> Result<(i32, OwnedFd), SpawnError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        {
            let mut state = self.lock();
            if state.gone {
                return Err(SpawnError::Keeper(self.gone_reason()));
            }
            state.spawns.insert(id.to_string(), tx);
        }
        let request = Request::Spawn {
            id: id.to_string(),
            command: command.to_vec(),
            cwd,
            env: env
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
            cols,
            rows,
        };
        let sent = wire::send(&self.inner.socket, &request, None);
        let answer = sent
            .map_err(|e| SpawnError::Keeper(format!("the PTY keeper: {e}")))
            .and_then(|()| {
                rx.recv_timeout(SPAWN_WAIT).map_err(|_| {
                    SpawnError::Keeper(format!(
                        "the PTY keeper (pid {}) did not answer within {SPAWN_WAIT:?}",
                        self.inner.pid
                    ))
                })
            });
        let unanswered = self.lock().spawns.remove(id).is_some();
        if unanswered || answer.is_err() {
            // It may still start the program, or did as the wait ran out
            // (its answer is dropped here): it goes, never left running
            // with no session.
            self.release(id);
        }
        match answer? {
            (Reply::Spawned { pid, .. }, fd) => match fd {
                Some(fd) => Ok((pid, fd)),
                None => Err(SpawnError::Keeper(
                    "the PTY keeper sent no terminal with the program".into(),
                )),
            },
            (
                Reply::SpawnFailed {
                    internal, reason, ..
                },
                _,
            ) => Err(if internal {
                SpawnError::Keeper(reason)
            } else {
                SpawnError::Program(reason)
            }),
            _ => Err(SpawnError::Keeper(self.gone_reason())),
        }
    }

    fn watch(&self, id: &str) -> Kept {
        let mut state = self.lock();
        let (tx, rx) = oneshot::channel();
        if let Some(exit) = state.ended.remove(id) {
            let _ = tx.send(exit);
        } else if !state.gone {
            state.exits.insert(id.to_string(), tx);
        }
        Kept {
            keeper: self.clone(),
            id: id.to_string(),
            exit: Some(rx),
        }
    }

    fn release(&self, id: &str) {
        {
            let mut state = self.lock();
            state.ended.remove(id);
            state.exits.remove(id);
            if state.gone {
                return;
            }
        }
        let request = Request::Release { id: id.to_string() };
        if let Err(e) = wire::send(&self.inner.socket, &request, None) {
            tracing::warn!(session = id, "the PTY keeper was not told to release: {e}");
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn gone_reason(&self) -> String {
        format!("the PTY keeper (pid {}) is gone", self.inner.pid)
    }

    /// Reads the keeper's messages until its connection ends.
    fn read_loop(self) {
        let mut buf = Vec::new();
        loop {
            match wire::recv::<Reply>(&self.inner.socket, &mut buf) {
                Ok(Some((reply, fd))) => self.on_reply(reply, fd),
                Ok(None) => break,
                Err(e) => {
                    tracing::error!("the PTY keeper's connection failed: {e}");
                    break;
                }
            }
        }
        let mut state = self.lock();
        state.gone = true;
        let lost = state.exits.len();
        // Watchers see the keeper gone; spawns waiting fail.
        state.exits.clear();
        state.spawns.clear();
        drop(state);
        tracing::error!(
            pid = self.inner.pid,
            sessions = lost,
            "the PTY keeper is gone: the programs it held end as their terminals hang up, \
             and their sessions are lost"
        );
    }

    fn on_reply(&self, reply: Reply, fd: Option<OwnedFd>) {
        let mut state = self.lock();
        match &reply {
            Reply::Exited { id, exit } => {
                let info = *exit;
                match state.exits.remove(id) {
                    Some(tx) => {
                        let _ = tx.send(info);
                    }
                    None => {
                        state.ended.insert(id.clone(), info);
                    }
                }
            }
            Reply::Spawned { id, .. } | Reply::SpawnFailed { id, .. } => {
                match state.spawns.remove(id) {
                    Some(tx) => {
                        let _ = tx.try_send((reply.clone(), fd));
                    }
                    None if matches!(reply, Reply::Spawned { .. }) => {
                        // Its spawn gave up waiting: nobody will run it.
                        drop(state);
                        self.release(id);
                    }
                    None => {}
                }
            }
            other => tracing::warn!("the PTY keeper sent {other:?} unasked"),
        }
    }
}

/// What the handshake found: the keeper's pid, the programs it holds, and
/// exits it told meanwhile.
struct Greeted {
    pid: u32,
    held: Vec<Held>,
    early: Vec<(String, Exit)>,
}

/// The handshake: `hello`, then the programs held, each with its master
/// (and exits told meanwhile).
fn hello(socket: &OwnedFd) -> std::io::Result<Greeted> {
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    wire::send(
        socket,
        &Request::Hello {
            version: wire::VERSION,
        },
        None,
    )?;
    let mut buf = Vec::new();
    let mut next = || -> std::io::Result<(Reply, Option<OwnedFd>)> {
        wire::recv(socket.as_fd(), &mut buf)?
            .ok_or_else(|| bad("the PTY keeper closed the connection at hello".into()))
    };
    let pid = match next()?.0 {
        Reply::Hello { version, pid } if version == wire::VERSION => pid,
        Reply::Hello { version, pid } => {
            return Err(bad(format!(
                "the PTY keeper (pid {pid}) speaks version {version}, this node {}",
                wire::VERSION
            )))
        }
        Reply::Refused { reason } => return Err(bad(format!("the PTY keeper refused: {reason}"))),
        other => return Err(bad(format!("the PTY keeper answered hello with {other:?}"))),
    };
    let (mut held, mut early) = (Vec::new(), Vec::new());
    loop {
        match next()? {
            (Reply::Held { id, pid, exit }, Some(master)) => held.push(Held {
                id,
                pid,
                master,
                exit,
            }),
            (Reply::Held { id, .. }, None) => {
                // Its terminal did not come: nobody can run it.
                tracing::error!(session = %id, "the PTY keeper held a program whose terminal did not come: ended");
                let _ = wire::send(socket, &Request::Release { id }, None);
            }
            (Reply::Exited { id, exit }, _) => early.push((id, exit)),
            (Reply::HeldEnd, _) => return Ok(Greeted { pid, held, early }),
            (other, _) => return Err(bad(format!("the PTY keeper sent {other:?} at hello"))),
        }
    }
}
