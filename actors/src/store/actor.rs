//! The store actor: one thread (a sync arbiter) that owns the `Store` and
//! applies what sessions hand it. Sessions never wait on it: they hand a
//! frame over and go on. The bytes handed over and not yet written are
//! the backlog; past `MAX_BACKLOG` a session stops taking output from its
//! program until the disk catches up (as it does for a slow snapshot), so
//! a slow disk slows the programs, and nothing acknowledged is dropped. A
//! write that fails is counted (`termesh_store_lost_bytes_total`) and
//! logged, never silent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use actix::prelude::*;
use bytes::Bytes;
use termesh_transport::{EventKind, SessionInfo};

use super::{Entry, Retention, Store, StoreError, Write};
use crate::metrics::Metrics;

/// Output handed to the store and not yet written, at most (all sessions).
pub const MAX_BACKLOG: u64 = 32 << 20;
/// A session record (created, renamed, exited...) is flushed at once, so
/// a crash soon after forgets no session; flushes this close together are
/// left to sled's own periodic flush (every 500 ms).
const RECORD_FLUSH_GAP: std::time::Duration = std::time::Duration::from_millis(20);

/// Live events a slow reader may fall behind by before it reads the
/// store again (`RecvError::Lagged`).
const LIVE_EVENTS: usize = 1024;

pub struct StoreActor {
    store: Store,
    backlog: Arc<AtomicU64>,
    metrics: Arc<Metrics>,
    last_record_flush: Option<std::time::Instant>,
    live: tokio::sync::broadcast::Sender<LiveEvent>,
    /// When `termesh_store_bytes` was last measured.
    sized_at: std::time::Instant,
}

/// How often writes re-measure the store's size on disk for `/metrics`.
const SIZE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// An event as stored (with its id), told to live readers after the
/// write: a reader that subscribes, then reads the store, misses nothing
/// (what it read is not told again after it, ids tell repeats apart).
#[derive(Debug, Clone)]
pub struct LiveEvent {
    pub session: Arc<str>,
    pub entry: Entry,
}

impl Actor for StoreActor {
    type Context = SyncContext<Self>;

    fn stopped(&mut self, _: &mut SyncContext<Self>) {
        if let Err(e) = self.store.flush() {
            tracing::error!(path = %self.store.path().display(), "store flush at stop failed: {e}");
        }
    }
}

/// What sessions and the registry reach the store by.
#[derive(Clone)]
pub struct StoreHandle {
    addr: Addr<StoreActor>,
    backlog: Arc<AtomicU64>,
    live: tokio::sync::broadcast::Sender<LiveEvent>,
}

impl std::fmt::Debug for StoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "StoreHandle(backlog {})",
            self.backlog.load(Ordering::Relaxed)
        )
    }
}

/// Writes, and the output bytes among them (for the backlog).
#[derive(Message)]
#[rtype(result = "()")]
struct Persist(Vec<Write>, u64);

impl Handler<Persist> for StoreActor {
    type Result = ();

    fn handle(&mut self, msg: Persist, _: &mut SyncContext<Self>) {
        let record = msg.0.iter().any(|w| matches!(w, Write::Record { .. }));
        let mut result = self.store.apply(msg.0).map(|stored| {
            for e in stored {
                let _ = self.live.send(LiveEvent {
                    session: e.session.into(),
                    entry: e.entry,
                });
            }
        });
        if record
            && result.is_ok()
            && self
                .last_record_flush
                .is_none_or(|at| at.elapsed() >= RECORD_FLUSH_GAP)
        {
            result = self.store.flush().map(|_| ());
            self.last_record_flush = Some(std::time::Instant::now());
        }
        self.backlog.fetch_sub(msg.1, Ordering::Relaxed);
        if self.sized_at.elapsed() >= SIZE_EVERY {
            self.sized_at = std::time::Instant::now();
            if let Ok(size) = self.store.size_on_disk() {
                self.metrics.store_bytes.store(size, Ordering::Relaxed);
            }
        }
        if let Err(e) = result {
            Metrics::add(&self.metrics.store_lost_bytes, msg.1);
            tracing::error!(path = %self.store.path().display(), "store write failed ({} bytes of output not stored): {e}", msg.1);
        }
    }
}

/// Writes everything to disk; the answer says whether it worked.
#[derive(Message)]
#[rtype(result = "Result<(), String>")]
pub struct Flush;

impl Handler<Flush> for StoreActor {
    type Result = Result<(), String>;

    fn handle(&mut self, _: Flush, _: &mut SyncContext<Self>) -> Self::Result {
        self.store.flush().map(|_| ()).map_err(|e| e.to_string())
    }
}

/// Marks a session removed (`purge`: its output and events go now).
#[derive(Message)]
#[rtype(result = "()")]
struct Removed {
    session: String,
    at_ms: u64,
    purge: bool,
}

impl Handler<Removed> for StoreActor {
    type Result = ();

    fn handle(&mut self, msg: Removed, _: &mut SyncContext<Self>) {
        let mut done = self.store.remove(&msg.session, msg.at_ms);
        if msg.purge && done.is_ok() {
            done = self.store.purge(&msg.session);
        }
        if let Err(e) = done {
            tracing::error!(session = %msg.session, "store: remove failed: {e}");
        }
    }
}

/// Stored events of a session after an id, at most `limit`.
#[derive(Message)]
#[rtype(result = "Result<Vec<Entry>, String>")]
struct ReadEvents {
    session: String,
    after: u64,
    limit: usize,
}

impl Handler<ReadEvents> for StoreActor {
    type Result = Result<Vec<Entry>, String>;

    fn handle(&mut self, msg: ReadEvents, _: &mut SyncContext<Self>) -> Self::Result {
        self.store
            .events_after(&msg.session, msg.after, msg.limit)
            .map_err(|e| e.to_string())
    }
}

/// Stored output of a session after a seq, up to `max_bytes`.
#[derive(Message)]
#[rtype(result = "Result<Vec<Entry>, String>")]
struct ReadOutput {
    session: String,
    after: u64,
    max_bytes: usize,
}

impl Handler<ReadOutput> for StoreActor {
    type Result = Result<Vec<Entry>, String>;

    fn handle(&mut self, msg: ReadOutput, _: &mut SyncContext<Self>) -> Self::Result {
        self.store
            .output_after(&msg.session, msg.after, msg.max_bytes)
            .map_err(|e| e.to_string())
    }
}

/// Runs the vacuum; answers the entries it deleted.
#[derive(Message)]
#[rtype(result = "Result<u64, String>")]
pub struct Vacuum {
    pub now_ms: u64,
    pub keep: Retention,
}

impl Handler<Vacuum> for StoreActor {
    type Result = Result<u64, String>;

    fn handle(&mut self, msg: Vacuum, _: &mut SyncContext<Self>) -> Self::Result {
        let deleted = self
            .store
            .vacuum(msg.now_ms, msg.keep)
            .map_err(|e| e.to_string())?;
        if let Ok(size) = self.store.size_on_disk() {
            self.metrics.store_bytes.store(size, Ordering::Relaxed);
        }
        Ok(deleted)
    }
}

/// A session found in the store at start: its last record, whether it
/// was removed, and the newest output (up to a ring's worth).
#[derive(Debug, Clone)]
pub struct Restored {
    pub info: SessionInfo,
    pub tail: Vec<Entry>,
    pub last_seq: u64,
}

impl StoreHandle {
    /// Opens the store in `dir` (the error names the path and the cause),
    /// reads every session not removed with the newest `tail_bytes` of its
    /// output, and starts the store's thread.
    pub fn open(
        dir: &std::path::Path,
        tail_bytes: usize,
        output_cap: u64,
        metrics: Arc<Metrics>,
    ) -> Result<(StoreHandle, Vec<Restored>), StoreError> {
        let mut store = Store::open(dir)?;
        store.set_output_cap(output_cap);
        let restored = load(&store, tail_bytes)?;
        if let Ok(size) = store.size_on_disk() {
            metrics.store_bytes.store(size, Ordering::Relaxed);
        }
        let backlog = Arc::new(AtomicU64::new(0));
        let shared = backlog.clone();
        let (live, _) = tokio::sync::broadcast::channel(LIVE_EVENTS);
        let live_tx = live.clone();
        let cell = std::sync::Mutex::new(Some(store));
        let addr = SyncArbiter::start(1, move || StoreActor {
            store: cell
                .lock()
                .ok()
                .and_then(|mut s| s.take())
                .expect("the store thread starts once"),
            backlog: shared.clone(),
            metrics: metrics.clone(),
            last_record_flush: None,
            live: live_tx.clone(),
            sized_at: std::time::Instant::now(),
        });
        Ok((
            StoreHandle {
                addr,
                backlog,
                live,
            },
            restored,
        ))
    }

    /// Output of `session` as frame `seq`.
    pub fn output(&self, session: &str, seq: u64, data: Bytes) {
        let len = data.len() as u64;
        self.backlog.fetch_add(len, Ordering::Relaxed);
        self.addr.do_send(Persist(
            vec![Write::Output {
                session: session.to_string(),
                seq,
                at_ms: crate::session::now_ms(),
                data,
            }],
            len,
        ));
    }

    /// A session event of the protocol (`resized`, `exited`, ...).
    pub fn event(&self, session: &str, event: &EventKind) {
        self.record_event(session, serde_json::to_value(event).unwrap_or_default());
    }

    /// An event as stored: a JSON object with `kind` and its fields.
    pub fn record_event(&self, session: &str, event: serde_json::Value) {
        let data = serde_json::to_vec(&event).unwrap_or_default();
        self.addr.do_send(Persist(
            vec![Write::Event {
                session: session.to_string(),
                at_ms: crate::session::now_ms(),
                data: data.into(),
            }],
            0,
        ));
    }

    pub fn record(&self, info: &SessionInfo) {
        let Ok(data) = rmp_serde::to_vec_named(info) else {
            return;
        };
        self.addr.do_send(Persist(
            vec![Write::Record {
                session: info.id.clone(),
                data: data.into(),
            }],
            0,
        ));
    }

    pub fn removed(&self, session: &str, purge: bool) {
        self.addr.do_send(Removed {
            session: session.to_string(),
            at_ms: crate::session::now_ms(),
            purge,
        });
    }

    /// The disk is behind: sessions hold their programs' output.
    pub fn is_behind(&self) -> bool {
        self.backlog.load(Ordering::Relaxed) > MAX_BACKLOG
    }

    pub async fn flush(&self) -> Result<(), String> {
        self.addr.send(Flush).await.map_err(|e| e.to_string())?
    }

    /// Live events from now on (every session's).
    pub fn live_events(&self) -> tokio::sync::broadcast::Receiver<LiveEvent> {
        self.live.subscribe()
    }

    pub async fn events_after(
        &self,
        session: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Entry>, String> {
        self.addr
            .send(ReadEvents {
                session: session.to_string(),
                after,
                limit,
            })
            .await
            .map_err(|e| e.to_string())?
    }

    pub async fn output_after(
        &self,
        session: &str,
        after: u64,
        max_bytes: usize,
    ) -> Result<Vec<Entry>, String> {
        self.addr
            .send(ReadOutput {
                session: session.to_string(),
                after,
                max_bytes,
            })
            .await
            .map_err(|e| e.to_string())?
    }

    pub async fn vacuum(&self, keep: Retention) -> Result<u64, String> {
        let now_ms = crate::session::now_ms();
        self.addr
            .send(Vacuum { now_ms, keep })
            .await
            .map_err(|e| e.to_string())?
    }
}

/// Every session not removed, with the newest `tail_bytes` of output.
fn load(store: &Store, tail_bytes: usize) -> Result<Vec<Restored>, StoreError> {
    let mut out = Vec::new();
    for (id, record, removed) in store.records()? {
        if removed {
            continue;
        }
        let Ok(info) = rmp_serde::from_slice::<SessionInfo>(&record) else {
            tracing::warn!(session = %id, "store: a session record that does not decode is skipped");
            continue;
        };
        let tail = store.output_tail(&id, tail_bytes)?;
        let last_seq = store.last_seq(&id)?;
        out.push(Restored {
            info,
            tail,
            last_seq,
        });
    }
    Ok(out)
}
