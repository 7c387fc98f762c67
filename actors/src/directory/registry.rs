//! `Registry`: the node's session directory. It creates sessions (on the
//! node's session threads, one per core, in turn: `homes`), removes them, and
//! tells watchers what changed. Connections read the directory directly
//! (`table`) so a keystroke never waits for a message round trip; only
//! this actor writes it.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use actix::prelude::*;
use termesh_transport::{ErrorCode, SessionInfo, SessionStatus};

use crate::directory::create::{check_create, check_cwd, CreateDefaults, CreateSpec};
use crate::directory::homes::{Home, Homes};
pub use crate::directory::table::{Directory, SessionHandle};
use crate::directory::watch::{Coalescer, WatchQueue};
pub use crate::directory::watch::{WatchEvent, WatchReady};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::session::pty::{self, SpawnSpec};
use crate::session::{Close, Meta, SessionActor, SessionChanged, SessionSettings, SessionShared};
use termesh_transport::CreateRequest;

/// How long a create waits for its record to reach the disk.
const CREATE_FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Sessions being spawned at once (each holds a blocking thread while its
/// program starts; a hung mount as cwd holds it until the mount answers).
pub const MAX_STARTING: usize = 64;

/// The registry's fixed inputs.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    pub node: String,
    pub defaults: CreateDefaults,
    pub settings: SessionSettings,
    pub max_sessions: usize,
    /// Base of `TERMESH_HOOK_URL`, e.g. `http://127.0.0.1:7420`.
    pub http_base: String,
    /// Signs each session's hook key.
    pub hook_secret: crate::directory::hook::HookSecret,
    /// The CA a session's program trusts to reach this node over HTTPS
    /// (`TERMESH_CA`: the hook command and the CLI read it).
    pub ca: Option<std::path::PathBuf>,
    /// Programs start under the PTY keeper (`None`: as the node's children).
    pub keeper: Option<crate::keeper::Keeper>,
}

pub struct Registry {
    pub(crate) config: RegistryConfig,
    pub(crate) dir: Directory,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) homes: Homes,
    watchers: HashMap<u64, Watcher>,
    /// Ids of sessions whose program is being started off this thread,
    /// with the names they will carry (revived ones included).
    pub(crate) starting: HashMap<Arc<str>, Option<String>>,
}

struct Watcher {
    local_only: bool,
    queue: WatchQueue,
    sink: Recipient<WatchReady>,
}

/// Subscription ids are unique per node.
pub static NEXT_SUB_ID: AtomicU64 = AtomicU64::new(1);

impl Registry {
    pub fn new(config: RegistryConfig, dir: Directory, metrics: Arc<Metrics>) -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Registry {
            config,
            dir,
            metrics,
            homes: Homes::start(cores),
            watchers: HashMap::new(),
            starting: HashMap::new(),
        }
    }

    /// Coalesces `event` into every watcher's queue; nudges those that
    /// have not been nudged since they last drained.
    pub(crate) fn tell_watchers(&self, event: WatchEvent) {
        self.tell(event, true);
    }

    fn tell(&self, event: WatchEvent, local: bool) {
        self.dir.bells().ring(event.session());
        for watcher in self.watchers.values().filter(|w| local || !w.local_only) {
            let nudge = watcher
                .queue
                .lock()
                .map(|mut q| q.push(event.clone()))
                .unwrap_or(false);
            if nudge {
                watcher.sink.do_send(WatchReady);
            }
        }
    }

    /// Reserves an id and prepares the program's spec, or refuses.
    fn prepare(&mut self, spec: &CreateSpec) -> Result<(Arc<str>, SpawnSpec), ApiError> {
        if self.dir.len() + self.starting.len() >= self.config.max_sessions {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                format!(
                    "this node runs its limit of {} sessions",
                    self.config.max_sessions
                ),
            ));
        }
        if self.starting.len() >= MAX_STARTING {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                format!("{MAX_STARTING} sessions are starting already; try again"),
            ));
        }
        if let Some(name) = &spec.name {
            let starting = self
                .starting
                .iter()
                .find(|(_, n)| n.as_deref() == Some(name.as_str()))
                .map(|(id, _)| id.to_string());
            if let Some(other) = self.dir.named(name, None).or(starting) {
                return Err(name_taken(name, &other));
            }
        }
        let id: Arc<str> = loop {
            let candidate: Arc<str> = uuid::Uuid::new_v4().simple().to_string()[..12]
                .to_string()
                .into();
            if self.dir.get(&candidate).is_none() && !self.starting.contains_key(&candidate) {
                break candidate;
            }
        };
        let mut env = spec.env.clone();
        env.extend(self.session_env(id.clone()));
        self.starting.insert(id.clone(), spec.name.clone());
        let spawn = SpawnSpec {
            command: spec.command.clone(),
            cwd: spec.cwd.clone(),
            env,
            cols: spec.cols,
            rows: spec.rows,
        };
        Ok((id, spawn))
    }

    /// What every run of a session's program gets in its environment.
    pub(crate) fn session_env(&self, id: Arc<str>) -> std::collections::BTreeMap<String, String> {
        let hook_key = self.config.hook_secret.key(&id);
        let url = format!(
            "{}/api/v1/sessions/{id}/hook?key={hook_key}",
            self.config.http_base
        );
        let mut env: std::collections::BTreeMap<String, String> = [
            ("TERMESH_SESSION_ID".to_string(), id.to_string()),
            ("TERMESH_HOOK_URL".to_string(), url),
        ]
        .into();
        if let Some(ca) = &self.config.ca {
            env.insert("TERMESH_CA".into(), ca.display().to_string());
        }
        env
    }

    /// Starts the session actor for a program that has started.
    fn start_session(
        &mut self,
        id: Arc<str>,
        spec: CreateSpec,
        mut pty: pty::Pty,
        home: Home,
        ctx: &mut Context<Self>,
    ) -> SessionInfo {
        let now = crate::session::now_ms();
        let shared = Arc::new(SessionShared {
            id: id.clone(),
            node: self.config.node.clone(),
            command: spec.command.clone(),
            cwd: spec.cwd.as_ref().map(|p| p.display().to_string()),
            created_at: now,
            resume_command: spec.resume_command.clone().or_else(|| {
                let agent = self.config.settings.agents.of(&spec.command);
                agent.and_then(|a| a.resume)
            }),
            last_seq: 0.into(),
            last_output_ms: now.into(),
            viewers: 0.into(),
            at_prompt: false.into(),
            bracketed_paste: false.into(),
            typed: Default::default(),
            exited: false.into(),
            meta: std::sync::Mutex::new(Meta {
                name: spec.name.clone(),
                tags: spec.tags.clone(),
                cols: spec.cols,
                rows: spec.rows,
                status: SessionStatus::Running,
                exit_code: None,
                phase: None,
                agent: Some(crate::session::agent::starting(now)),
            }),
        });
        // Stored before the session's actor starts: its first output and
        // its `exited` (a program may end at once) queue after these.
        let info = self.persist(&shared);
        self.record_event(
            &id,
            serde_json::json!({
                "kind": "created",
                "command": info.command,
                "cwd": info.cwd,
                "cols": info.cols,
                "rows": info.rows,
            }),
        );
        pty.input.share_typed(&shared.typed);
        let input = pty.input.clone();
        let (settings, metrics) = (self.config.settings.clone(), self.metrics.clone());
        let changed = ctx.address().recipient();
        let session_shared = shared.clone();
        let size = (spec.cols, spec.rows);
        let addr = SessionActor::start_in_arbiter(&home.arbiter, move |_| {
            SessionActor::new(session_shared, pty, size, settings, metrics, changed)
        });
        self.dir.insert(SessionHandle {
            id: id.clone(),
            addr,
            input,
            shared: shared.clone(),
            home,
        });
        Metrics::gauge(&self.metrics.sessions, 1);
        tracing::info!(session = %id, command = ?spec.command, "session created");
        info
    }

    pub(crate) fn record_event(&self, id: &str, event: serde_json::Value) {
        if let Some(store) = &self.config.settings.store {
            store.record_event(id, event);
        }
    }

    /// Stores the session's record; answers its info.
    pub(crate) fn persist(&self, shared: &SessionShared) -> SessionInfo {
        let info = shared.info();
        if let Some(store) = &self.config.settings.store {
            store.record(&info, shared.resume_command.as_deref());
        }
        info
    }
}

/// The error for a session name another session of this node carries.
pub fn name_taken(name: &str, other: &str) -> ApiError {
    ApiError::bad_request(format!(
        "the name {name:?} is taken by session `{other}` on this node"
    ))
}

/// Checks the cwd and starts the program (under `keeper` when given),
/// its PTY's tasks on `home`: blocking work (a `stat`, a fork and exec,
/// the keeper's answer), run off every actor thread.
pub(crate) fn spawn_program(
    id: &str,
    spec: &SpawnSpec,
    (io, home): (&pty::PtyIo, &tokio::runtime::Handle),
    keeper: Option<&crate::keeper::Keeper>,
) -> Result<pty::Pty, ApiError> {
    if let Some(cwd) = &spec.cwd {
        check_cwd(cwd)?;
    }
    let spawned = match keeper {
        Some(keeper) => pty::spawn_kept((io, home), keeper, id, spec),
        None => pty::spawn((io, home), spec),
    };
    spawned.map_err(|e| {
        if e.is_internal() {
            tracing::error!(session = id, "session spawn failed: {e}");
            ApiError::new(ErrorCode::Internal, e.to_string())
        } else {
            ApiError::bad_request(e.to_string())
        }
    })
}

impl Actor for Registry {
    type Context = Context<Self>;
}

/// Start a session.
#[derive(Message)]
#[rtype(result = "Result<SessionInfo, ApiError>")]
pub struct Create(pub CreateRequest);

impl Handler<Create> for Registry {
    type Result = ResponseActFuture<Self, Result<SessionInfo, ApiError>>;

    fn handle(&mut self, msg: Create, _: &mut Context<Self>) -> Self::Result {
        let prepared = check_create(msg.0, &self.config.node, &self.config.defaults)
            .and_then(|spec| self.prepare(&spec).map(|p| (spec, p)));
        let (spec, (id, spawn)) = match prepared {
            Ok(ready) => ready,
            Err(e) => return Box::pin(actix::fut::ready(Err(e))),
        };
        let thread_id = id.clone();
        let keeper = self.config.keeper.clone();
        let io = self.config.settings.pty_io.clone();
        let home = self.homes.next();
        let runtime = home.runtime.clone();
        let work = actix_rt::task::spawn_blocking(move || {
            spawn_program(&thread_id, &spawn, (&io, &runtime), keeper.as_ref())
        });
        Box::pin(work.into_actor(self).then(move |spawned, act, ctx| {
            act.starting.remove(&id);
            let started = spawned
                .map_err(|e| {
                    ApiError::new(ErrorCode::Internal, format!("session start failed: {e}"))
                })
                .and_then(|r| r)
                .map(|pty| act.start_session(id, spec, pty, home, ctx));
            // Nobody hears of the session (the client, watchers, the
            // other nodes) before its record is on disk: a session anyone
            // was told about survives a crash.
            let store = act.config.settings.store.clone();
            async move {
                if let (Ok(_), Some(store)) = (&started, store) {
                    // Bounded: a stuck disk delays a create, never hangs it.
                    match tokio::time::timeout(CREATE_FLUSH_WAIT, store.flush()).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => tracing::error!("store flush after a create failed: {e}"),
                        Err(_) => tracing::warn!(
                            "the store did not flush within {}s; the create is answered anyway",
                            CREATE_FLUSH_WAIT.as_secs()
                        ),
                    }
                }
                started
            }
            .into_actor(act)
            .map(|started, act, _| {
                let info = started?;
                // What it is now (it may have changed while flushing).
                let now = act.dir.get(&info.id).map(|h| h.shared.info());
                if let Some(now) = &now {
                    act.tell_watchers(WatchEvent::Changed(now.clone()));
                }
                Ok(now.unwrap_or(info))
            })
        }))
    }
}

/// Kill (if running) and forget a session.
#[derive(Message)]
#[rtype(result = "Result<(), ApiError>")]
pub struct Remove {
    pub id: String,
    /// Wipe its stored output and events now (else kept until the vacuum).
    pub purge: bool,
}

impl Handler<Remove> for Registry {
    type Result = Result<(), ApiError>;

    fn handle(&mut self, msg: Remove, _: &mut Context<Self>) -> Self::Result {
        let handle = self
            .dir
            .remove(&msg.id)
            .ok_or_else(|| ApiError::not_found(&msg.id))?;
        handle.addr.do_send(Close { removed: true });
        self.record_event(
            &msg.id,
            serde_json::json!({ "kind": "removed", "purge": msg.purge }),
        );
        if let Some(store) = &self.config.settings.store {
            store.removed(&msg.id, msg.purge);
        }
        Metrics::gauge(&self.metrics.sessions, -1);
        tracing::info!(session = %msg.id, "session removed");
        self.tell_watchers(WatchEvent::Removed(msg.id));
        Ok(())
    }
}

/// Start telling a watcher about session changes: they collect in the
/// returned queue, and `sink` is nudged when the queue has news.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Watch {
    pub conn: u64,
    pub queue: WatchQueue,
    pub sink: Recipient<WatchReady>,
    /// Told of this node's sessions only (a peer link), not of the
    /// sessions other nodes announce.
    pub local_only: bool,
    /// Sessions of other nodes the watcher already knows of (`list` showed
    /// them), so their removal is told.
    pub known_remote: Vec<String>,
}

impl Handler<Watch> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Watch, _: &mut Context<Self>) {
        if let Ok(mut queue) = msg.queue.lock() {
            // The watcher knows what `list` would show now.
            let mut known = self.dir.ids();
            known.extend(msg.known_remote);
            *queue = Coalescer::new(known);
        }
        self.watchers.insert(
            msg.conn,
            Watcher {
                queue: msg.queue,
                sink: msg.sink,
                local_only: msg.local_only,
            },
        );
    }
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct Unwatch {
    pub conn: u64,
}

impl Handler<Unwatch> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Unwatch, _: &mut Context<Self>) {
        self.watchers.remove(&msg.conn);
    }
}

impl Handler<SessionChanged> for Registry {
    type Result = ();

    fn handle(&mut self, msg: SessionChanged, _: &mut Context<Self>) {
        if let Some(handle) = self.dir.get(&msg.id) {
            let info = self.persist(&handle.shared);
            self.tell_watchers(WatchEvent::Changed(info));
        }
    }
}

/// Other nodes' sessions changed (a `PeerActor` merged them): tell the
/// watchers that want the whole cluster.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Broadcast(pub Vec<WatchEvent>);

impl Handler<Broadcast> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Broadcast, _: &mut Context<Self>) {
        for event in msg.0 {
            self.tell(event, false);
        }
    }
}
