//! Session operations shared by every front end (WebSocket, raw endpoint,
//! REST): each checks its input and answers with an `ApiError` carrying the
//! protocol's code.

use std::sync::Arc;
use termesh_config::defaults::{MAX_COLS, MAX_ROWS};

use actix::Addr;
use bytes::Bytes;
use termesh_transport::{CreateRequest, ErrorCode, SessionInfo, MAX_INPUT, MAX_SCROLLBACK};
use tokio::sync::{mpsc::error::TrySendError, oneshot};

use crate::cluster::forward::Route;
use crate::cluster::ClusterCtx;
use crate::directory::create::{check_name, check_tags, size_field};
use crate::directory::registry::{Create, Directory, Registry, Remove, SessionHandle};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::output::feed::Feed;
use crate::session::pty::parse_signal;
use crate::session::{
    DetachAttaches, GetScreen, Hooked, Kill, RawTail, RawTailResult, Rename, Resize, ScreenResult,
    ScreenWant, Tag,
};

/// How long a create waits for every up peer to list the new session.
const DIRECTORY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Bytes of events one `events` reply holds at most (hook payloads can be
/// large; a forwarded reply must fit a peer frame).
const EVENTS_REPLY_BYTES: usize = 2 << 20;

/// What every front end needs to reach the node's sessions.
#[derive(Clone)]
pub struct NodeCtx {
    pub node: String,
    pub version: &'static str,
    pub registry: Addr<Registry>,
    pub dir: Directory,
    pub metrics: Arc<Metrics>,
    /// Replaced by a reload; connections check their token again then.
    pub tokens: crate::front::tokens::Tokens,
    pub ws: termesh_config::WsConfig,
    /// The node's credited host stall, discounted by liveness decisions.
    pub stall: crate::liveness::stall::StallClock,
    /// Checks the keys in `TERMESH_HOOK_URL`s.
    pub hook_secret: crate::directory::hook::HookSecret,
    pub default_window: u64,
    pub window_bounds: (u64, u64),
    /// Where events and output are kept (`None`: `--no-store`).
    pub store: Option<crate::store::StoreHandle>,
    /// The cluster: the other nodes' sessions and links, this node's
    /// mirrors (its `dir`, `metrics` and `stall` are this node's).
    pub mesh: ClusterCtx,
    /// Turns for `list` gathers on blocking threads (`LIST_GATHERS`).
    pub gathers: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for NodeCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCtx").field("node", &self.node).finish()
    }
}

/// `list` answers gathered at once on a node.
pub const LIST_GATHERS: usize = 2;

impl NodeCtx {
    /// Every session of the cluster, oldest first: this node's and what
    /// the other nodes announced (`unreachable` where a link is down).
    pub fn list(&self) -> Vec<SessionInfo> {
        let mut all = self.dir.list();
        all.extend(self.mesh.view.list());
        termesh_transport::oldest_first(&mut all);
        all
    }

    /// `page` on a blocking thread, at most `LIST_GATHERS` at once for
    /// the node (a large directory takes a while to gather; connections
    /// and REST requests wait their turn instead of piling up threads).
    pub async fn page_off_thread(
        &self,
        after: Option<String>,
        limit: Option<u32>,
    ) -> Result<(Vec<SessionInfo>, Option<String>), ApiError> {
        let internal =
            |e: &dyn std::fmt::Display| ApiError::new(ErrorCode::Internal, format!("list: {e}"));
        let _turn = self.gathers.acquire().await.map_err(|e| internal(&e))?;
        let node = self.clone();
        tokio::task::spawn_blocking(move || node.page(after.as_deref(), limit))
            .await
            .map_err(|e| internal(&e))?
    }

    /// A page of `list` (`front::page`): every session without `limit`,
    /// else records for the page's ids only.
    pub fn page(
        &self,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Result<(Vec<SessionInfo>, Option<String>), ApiError> {
        let Some(limit) = crate::front::page::limit(after, limit)? else {
            return Ok((self.list(), None));
        };
        let mut ids = self.dir.ids();
        ids.extend(self.mesh.view.ids());
        let (ids, next) = crate::front::page::select(ids, after, limit);
        // A session removed meanwhile is left out; `next` stays as chosen.
        let infos = ids.iter().filter_map(|id| self.info(id).ok()).collect();
        Ok((infos, next))
    }

    /// The session `wanted` names: an id, else the one session of the
    /// cluster whose name it is exactly (REST paths take either), else
    /// `wanted` as it is (an id the request itself may know: a removed
    /// session's stored events). Names are looked up off the actor thread,
    /// as a list is gathered.
    pub async fn resolve_name(&self, wanted: &str) -> Result<String, ApiError> {
        if self.dir.get(wanted).is_some() || self.mesh.view.get(wanted).is_some() {
            return Ok(wanted.to_string());
        }
        let (all, _) = self.page_off_thread(None, None).await?;
        let mut ids: Vec<String> = all
            .into_iter()
            .filter(|s| s.name.as_deref() == Some(wanted))
            .map(|s| s.id)
            .collect();
        match ids.len() {
            0 => Ok(wanted.to_string()),
            1 => Ok(ids.remove(0)),
            n => {
                ids.truncate(5);
                Err(ApiError::bad_request(format!(
                    "{wanted:?} is the name of {n} sessions ({}{}): use an id",
                    ids.join(", "),
                    if n > ids.len() { ", ..." } else { "" }
                )))
            }
        }
    }

    /// One session of the cluster, as `list` shows it.
    pub fn info(&self, id: &str) -> Result<SessionInfo, ApiError> {
        if let Some((info, _)) = self.mesh.view.get(id) {
            return Ok(info);
        }
        Ok(self.session(id)?.shared.info())
    }

    pub fn session(&self, id: &str) -> Result<SessionHandle, ApiError> {
        match self.dir.get(id) {
            Some(handle) => Ok(handle),
            // Its sessions are gone from the directory, not removed.
            None if self.dir.closing() => {
                Err(crate::cluster::forward::shutting_down(&self.mesh.node))
            }
            None => Err(ApiError::not_found(id)),
        }
    }

    /// Where a subscriber of `id` subscribes: the session itself, or the
    /// mirror of another node's session (started on first use).
    pub fn feed(&self, id: &str) -> Result<(Arc<str>, Feed), ApiError> {
        if let Some(handle) = self.dir.get(id) {
            return Ok((handle.id.clone(), Feed::of(&handle.addr)));
        }
        self.mesh.mirror_feed(id)
    }

    /// Who answers a request about `session` (`ClusterCtx::route_session`).
    pub fn route_session(&self, session: &str) -> Result<Route, ApiError> {
        self.mesh.route_session(session)
    }

    /// Who runs a `create` naming `node`.
    pub fn route_create(&self, node: Option<&str>) -> Result<Route, ApiError> {
        self.mesh.route_create(node)
    }

    /// `msg` sent to `owner`, its answer awaited (`ClusterCtx::forward`;
    /// the forward spends one hop).
    pub fn forward(
        &self,
        owner: &str,
        msg: termesh_transport::ClientMsg,
    ) -> impl std::future::Future<Output = Result<termesh_transport::ServerMsg, ApiError>> + 'static
    {
        self.mesh.forward(owner, msg)
    }

    pub fn running(&self, id: &str) -> Result<SessionHandle, ApiError> {
        let handle = self.session(id)?;
        if handle.shared.is_exited() {
            return Err(ApiError::exited(id));
        }
        Ok(handle)
    }

    /// Writes to the program's input queue without waiting.
    pub fn input(&self, id: &str, data: Bytes) -> Result<(), ApiError> {
        if data.len() > MAX_INPUT {
            return Err(ApiError::new(
                ErrorCode::TooLarge,
                format!(
                    "input of {} bytes is over the {MAX_INPUT}-byte limit",
                    data.len()
                ),
            ));
        }
        let handle = self.running(id)?;
        if data.is_empty() {
            return Ok(());
        }
        let n = data.len() as u64;
        handle.input.try_send(data).map_err(|e| match e {
            TrySendError::Closed(_) => ApiError::exited(id),
            TrySendError::Full(_) => ApiError::new(
                ErrorCode::Internal,
                format!("input queue of session `{id}` is full: its program is not reading input"),
            ),
        })?;
        Metrics::add(&self.metrics.input_bytes, n);
        Ok(())
    }

    pub fn resize(&self, id: &str, cols: u64, rows: u64) -> Result<(), ApiError> {
        let cols = size_field("cols", Some(cols), 0, MAX_COLS)?;
        let rows = size_field("rows", Some(rows), 0, MAX_ROWS)?;
        let handle = self.running(id)?;
        // In order with the keys around it: through the input queue.
        let applied = handle.input.resize(cols, rows);
        handle.addr.do_send(Resize {
            cols,
            rows,
            applied,
        });
        Ok(())
    }

    pub fn kill(&self, id: &str, signal: Option<&str>) -> Result<(), ApiError> {
        let name = signal.unwrap_or("TERM");
        let signal = parse_signal(name).ok_or_else(|| {
            ApiError::bad_request(format!(
                "`signal` {name:?}: must be \"TERM\", \"KILL\", \"HUP\" or \"INT\""
            ))
        })?;
        self.session(id)?.addr.do_send(Kill { signal });
        Ok(())
    }

    pub fn rename(&self, id: &str, name: String) -> Result<(), ApiError> {
        check_name(&name)?;
        let handle = self.session(id)?;
        if let Some(other) = self.dir.named(&name, Some(id)) {
            return Err(crate::directory::registry::name_taken(&name, &other));
        }
        handle.addr.do_send(Rename { name });
        Ok(())
    }

    /// `attach -d`: every attach of the session but `keep`'s is told to end.
    pub fn detach(&self, id: &str, keep: String) -> Result<(), ApiError> {
        if keep.is_empty() || keep.len() > 64 {
            return Err(ApiError::bad_request(
                "`keep` must be an attach's tag of 1 to 64 bytes",
            ));
        }
        self.session(id)?.addr.do_send(DetachAttaches { keep });
        Ok(())
    }

    pub fn tag(&self, id: &str, tags: Vec<String>) -> Result<(), ApiError> {
        check_tags(&tags)?;
        self.session(id)?.addr.do_send(Tag { tags });
        Ok(())
    }

    /// An agent's hook: `body` is what it posted, `name` its event.
    pub fn hooked(&self, id: &str, name: &str, body: &serde_json::Value) -> Result<(), ApiError> {
        let session = self.session(id)?;
        let (phase, state) = crate::session::agent::hooks::meaning(name, body);
        if phase.is_some() || state.is_some() {
            session.addr.do_send(Hooked {
                phase: phase.map(str::to_string),
                state,
            });
        }
        Ok(())
    }

    /// The screen model's answer, computed off the session's thread.
    pub async fn screen(&self, id: &str, want: ScreenWant) -> Result<ScreenResult, ApiError> {
        let want = match want {
            ScreenWant::Snapshot { scrollback } => ScreenWant::Snapshot {
                scrollback: scrollback.min(MAX_SCROLLBACK as usize),
            },
            ScreenWant::Lines { max } => ScreenWant::Lines {
                max: max.min(MAX_SCROLLBACK as usize),
            },
            other => other,
        };
        let handle = self.session(id)?;
        let (reply, answer) = oneshot::channel();
        // `send` waits for room in a busy session's mailbox: a session with
        // many acks queued is served, not reported gone.
        handle
            .addr
            .send(GetScreen { want, reply })
            .await
            .map_err(|_| gone(id))?;
        answer.await.map_err(|_| gone(id))?
    }

    /// The newest `limit` bytes of output: from the ring, or from the
    /// output log when the ring holds less than asked and more is stored.
    pub async fn raw_tail(&self, id: &str, limit: usize) -> Result<RawTailResult, ApiError> {
        let handle = self.session(id)?;
        let ring = handle
            .addr
            .send(RawTail {
                limit,
                before: None,
            })
            .await
            .map_err(|_| gone(id))?;
        let Some(store) = self.store.as_ref().filter(|_| ring.data.len() < limit) else {
            return Ok(ring);
        };
        // A frame more than asked (frames are whole), cut to `limit` below.
        let page = store
            .output_before(
                id,
                ring.last_seq.saturating_add(1),
                limit.saturating_add(crate::session::pty::READ_CHUNK),
            )
            .await
            .map_err(|e| ApiError::new(ErrorCode::Internal, e))?;
        let stored: usize = page.frames.iter().map(|f| f.data.len()).sum();
        // The log holds every frame sent: more of it than the ring, unless
        // its writes failed (then the ring is the better answer).
        if stored <= ring.data.len() || page.frames.last().map(|f| f.seq) != Some(ring.last_seq) {
            return Ok(ring);
        }
        let mut data = bytes::BytesMut::with_capacity(stored.min(limit));
        for f in &page.frames {
            data.extend_from_slice(&f.data);
        }
        // At least one frame comes even past `limit`: keep the newest bytes.
        let cut = data.len().saturating_sub(limit);
        Ok(RawTailResult {
            last_seq: ring.last_seq,
            data: data.freeze().slice(cut..),
            first_seq: page.frames.first().map_or(0, |f| f.seq),
            end_seq: ring.last_seq,
            more: page.more,
        })
    }

    /// Creates a session here; answers once every peer whose link is up
    /// lists it too (PROTOCOL.md section 13), or after `DIRECTORY_WAIT`.
    pub async fn create(&self, req: CreateRequest) -> Result<SessionInfo, ApiError> {
        let info = self
            .registry
            .send(Create(req))
            .await
            .map_err(|_| ApiError::new(ErrorCode::Internal, "the registry is not running"))??;
        self.peers_have_directory().await;
        Ok(info)
    }

    /// Waits (bounded) until every up peer has applied this node's
    /// directory changes so far. A peer that does not answer in time is
    /// not waited for: its link is failing, and the breaker deals with it.
    async fn peers_have_directory(&self) {
        let waits: Vec<_> = self
            .mesh
            .peers
            .all()
            .into_iter()
            .filter(|p| {
                p.stats.state.load(std::sync::atomic::Ordering::Relaxed) == crate::cluster::peer::UP
            })
            .map(|p| {
                let (tx, rx) = tokio::sync::oneshot::channel();
                p.addr.do_send(crate::cluster::peer::Barrier(tx));
                rx
            })
            .collect();
        let all = async {
            for rx in waits {
                let _ = rx.await;
            }
        };
        let _ = tokio::time::timeout(DIRECTORY_WAIT, all).await;
    }

    pub async fn remove(&self, id: &str, purge: bool) -> Result<(), ApiError> {
        // The registry's `Remove` kills a running session first.
        self.registry
            .send(Remove {
                id: id.to_string(),
                purge,
            })
            .await
            .map_err(|_| ApiError::new(ErrorCode::Internal, "the registry is not running"))?
    }

    /// Runs an exited or lost session's command again (same id, seqs
    /// continuing).
    pub async fn revive(&self, id: &str) -> Result<SessionInfo, ApiError> {
        self.session(id)?;
        self.registry
            .send(crate::directory::revive::Revive { id: id.to_string() })
            .await
            .map_err(|_| ApiError::new(ErrorCode::Internal, "the registry is not running"))?
    }

    /// The store, or the error that says this node keeps nothing.
    pub fn store(&self) -> Result<&crate::store::StoreHandle, ApiError> {
        self.store.as_ref().ok_or_else(|| {
            ApiError::new(
                ErrorCode::Unavailable,
                "this node runs without a store (--no-store): it keeps no events or stored output",
            )
        })
    }

    /// Stored events of a session of this node after the id `after`.
    pub async fn events(
        &self,
        id: &str,
        after: u64,
        limit: u64,
    ) -> Result<Vec<serde_json::Value>, ApiError> {
        self.session(id)?;
        let limit = limit.clamp(1, termesh_transport::MAX_EVENTS) as usize;
        let entries = self
            .store()?
            .events_after(id, after, limit)
            .await
            .map_err(|e| ApiError::new(ErrorCode::Internal, e))?;
        // A reply must fit a peer frame when it is forwarded.
        let mut bytes = 0;
        Ok(entries
            .iter()
            .take_while(|e| {
                bytes += e.data.len() + 64;
                bytes <= EVENTS_REPLY_BYTES
            })
            .map(|e| e.event_json())
            .collect())
    }

    /// Stored output of a session of this node after seq `after`.
    pub async fn read_output(
        &self,
        id: &str,
        after: u64,
        max_bytes: u64,
    ) -> Result<Vec<termesh_transport::StoredFrame>, ApiError> {
        self.session(id)?;
        let max = max_bytes.clamp(1, termesh_transport::MAX_READ_OUTPUT) as usize;
        let entries = self
            .store()?
            .output_after(id, after, max)
            .await
            .map_err(|e| ApiError::new(ErrorCode::Internal, e))?;
        Ok(entries
            .into_iter()
            .map(|e| termesh_transport::StoredFrame {
                seq: e.n,
                ts: e.at_ms,
                data: e.data.to_vec(),
            })
            .collect())
    }

    /// Clamps a requested window to the protocol's bounds.
    pub fn window(&self, requested: Option<u64>) -> u64 {
        requested
            .unwrap_or(self.default_window)
            .clamp(self.window_bounds.0, self.window_bounds.1)
    }

    pub fn count(&self, counter: &std::sync::atomic::AtomicU64, n: u64) {
        Metrics::add(counter, n);
    }
}

pub(super) fn gone(id: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("session `{id}` went away"))
}
