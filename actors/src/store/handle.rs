//! `StoreHandle`: how sessions, the registry and the front ends reach the
//! store. Output is appended to the output log by the calling session
//! itself (one write, before its seq is sent); records, events and seq
//! marks go onto the store actor's queue without waiting, and the first
//! write into an empty queue wakes it. Reads of output go to the log on a
//! blocking thread; reads of events, remove, flush and vacuum are
//! messages that first apply what is queued. Also the opening of the
//! store at start and what it restores.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use termesh_transport::{EventKind, SessionInfo};

use super::actor::{
    Budget, Drain, Flush, LiveEvent, Queue, ReadEvents, Removed, StoreActor, Vacuum,
};
use super::log::{OutputLog, Page};
use super::{Entry, Retention, Store, StoreError, Write};
use crate::metrics::Metrics;

/// Live events a slow reader may fall behind by before it reads the
/// store again (`RecvError::Lagged`).
const LIVE_EVENTS: usize = 1024;

/// What sessions and the registry reach the store by.
#[derive(Clone)]
pub struct StoreHandle {
    addr: Addr<StoreActor>,
    /// Flush requests stamped so far (group commit: `actor::Flush`).
    stamps: Arc<AtomicU64>,
    queue: Arc<Mutex<Queue>>,
    live: tokio::sync::broadcast::Sender<LiveEvent>,
    /// Every frame, before its seq is sent.
    log: Arc<OutputLog>,
}

impl std::fmt::Debug for StoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreHandle({})", self.log.dir().display())
    }
}

pub use super::load::Restored;

impl StoreHandle {
    /// Opens the store in `dir` and the output log beside it (the error
    /// names the path and the cause), migrates what the previous release
    /// left, reads every session not removed with the newest `tail_bytes`
    /// of its output, and starts the store's thread and the log's sync.
    pub fn open(
        dir: &std::path::Path,
        tail_bytes: usize,
        output_cap: u64,
        metrics: Arc<Metrics>,
    ) -> Result<(StoreHandle, Vec<Restored>), StoreError> {
        let mut store = Store::open(dir)?;
        // sled makes its files with the umask's mode: the store is the
        // node's alone.
        if let Err(e) = crate::private_fs::restrict_tree(dir) {
            tracing::warn!(path = %dir.display(), "cannot restrict the store's files: {e}");
        }
        let log_dir = super::log_dir(dir);
        let log_err = |e: std::io::Error| StoreError::Open {
            path: log_dir.display().to_string(),
            cause: e.to_string(),
        };
        let started = std::time::Instant::now();
        let segment = super::log::segment_bytes_for(output_cap);
        let (log, recovery) =
            OutputLog::open(&log_dir, segment, output_cap, metrics.clone()).map_err(log_err)?;
        tracing::info!(
            sessions = recovery.sessions,
            bytes = metrics.log_bytes.load(Ordering::Relaxed),
            repaired = recovery.repaired,
            whole = recovery.whole,
            ms = started.elapsed().as_millis() as u64,
            "output log opened"
        );
        let journal = super::legacy::journal_path(dir);
        let restored = super::load::load(&mut store, &log, recovery, &journal, tail_bytes)?;
        if let Ok(size) = store.size_on_disk() {
            metrics.store_bytes.store(size, Ordering::Relaxed);
        }
        let log = Arc::new(log);
        OutputLog::start_syncing(&log).map_err(log_err)?;
        OutputLog::start_trimming(&log).map_err(log_err)?;
        let queue = Arc::new(Mutex::new(Queue::default()));
        let (live, _) = tokio::sync::broadcast::channel(LIVE_EVENTS);
        let cell = Mutex::new(Some(store));
        let (q, l, lg) = (queue.clone(), live.clone(), log.clone());
        let stamps = Arc::new(AtomicU64::new(0));
        let st = stamps.clone();
        let addr = SyncArbiter::start(1, move || StoreActor {
            store: cell
                .lock()
                .ok()
                .and_then(|mut s| s.take())
                .expect("the store thread starts once"),
            log: lg.clone(),
            queue: q.clone(),
            metrics: metrics.clone(),
            live: l.clone(),
            last_record_flush: None,
            sized_at: std::time::Instant::now(),
            stamps: st.clone(),
            durable_upto: 0,
        });
        let handle = StoreHandle {
            addr,
            stamps,
            queue,
            live,
            log,
        };
        Ok((handle, restored))
    }

    /// Queues a write and wakes the actor when the queue was empty.
    fn push(&self, write: Write) {
        let wake = {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.push(write)
        };
        if wake {
            self.addr.do_send(Drain);
        }
    }

    /// Output of `session` as frame `seq`: appended to its log before
    /// the seq is sent to anyone (one write into the page cache), so a
    /// node killed now continues right after it. A write that fails is
    /// counted and said by the log; the output is still sent.
    pub fn output(&self, session: &str, seq: u64, data: &[u8]) {
        let _ = self.log.append(session, seq, crate::clock::now_ms(), data);
    }

    /// The newest output of `session`, up to `max_bytes` (at least one
    /// frame), read now on the calling thread: for a cold session's ring,
    /// once.
    pub fn tail_now(&self, session: &str, max_bytes: usize) -> Vec<Entry> {
        match self.log.before(session, u64::MAX, max_bytes) {
            Ok(page) => page.frames.into_iter().map(Entry::from).collect(),
            Err(e) => {
                tracing::error!(session, "output log: its newest output cannot be read: {e}");
                Vec::new()
            }
        }
    }

    /// The session will write no more output (its program is gone).
    pub fn sealed(&self, session: &str) {
        self.log.seal(session);
    }

    /// A session event of the protocol (`resized`, `exited`, ...).
    pub fn event(&self, session: &str, event: &EventKind) {
        self.record_event(session, serde_json::to_value(event).unwrap_or_default());
    }

    /// An event as stored: a JSON object with `kind` and its fields.
    pub fn record_event(&self, session: &str, event: serde_json::Value) {
        let data = serde_json::to_vec(&event).unwrap_or_default();
        let write = Write::Event {
            session: session.into(),
            at_ms: crate::clock::now_ms(),
            data: data.into(),
        };
        self.push(write);
    }

    pub fn record(&self, info: &SessionInfo, resume_command: Option<&[String]>) {
        let record = Record {
            info,
            resume_command,
        };
        let Ok(data) = rmp_serde::to_vec_named(&record) else {
            return;
        };
        let write = Write::Record {
            session: info.id.as_str().into(),
            data: data.into(),
        };
        self.push(write);
    }

    /// Reserves seqs through `seq` for `session`: answers once the mark is
    /// on disk, after which seqs up to it may be sent.
    pub fn reserve(
        &self,
        session: &Arc<str>,
        seq: u64,
    ) -> impl std::future::Future<Output = Result<(), String>> + 'static {
        let write = Write::Reserve {
            session: session.clone(),
            seq,
        };
        self.push(write);
        self.flush_queued(Some((session.clone(), seq)))
    }

    /// A clean stop: no seq above `seq` was sent, so the mark comes down
    /// to it and a restart continues without a gap.
    pub fn seq_mark(&self, session: &Arc<str>, seq: u64) {
        let write = Write::SeqMark {
            session: session.clone(),
            seq,
        };
        self.push(write);
    }

    pub fn removed(&self, session: &str, purge: bool) {
        self.addr.do_send(Removed {
            session: session.to_string(),
            at_ms: crate::clock::now_ms(),
            purge,
        });
    }

    pub async fn flush(&self) -> Result<(), String> {
        self.flush_queued(None).await
    }

    /// Durability for everything queued so far, committed with whatever
    /// else asks for it meanwhile (one fsync for a group).
    fn flush_queued(
        &self,
        reserved: Option<(Arc<str>, u64)>,
    ) -> impl std::future::Future<Output = Result<(), String>> + 'static {
        let stamp = self.stamps.fetch_add(1, Ordering::SeqCst) + 1;
        let sent = self.addr.send(Flush { stamp, reserved });
        async move { sent.await.map_err(|e| e.to_string())? }
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
        let msg = ReadEvents {
            session: session.to_string(),
            after,
            limit,
        };
        self.addr.send(msg).await.map_err(|e| e.to_string())?
    }

    /// Stored output of `session` after seq `after`, up to `max_bytes`
    /// (at least one frame), read from its log off the caller's thread.
    pub async fn output_after(
        &self,
        session: &str,
        after: u64,
        max_bytes: usize,
    ) -> Result<Vec<Entry>, String> {
        let (log, id) = (self.log.clone(), session.to_string());
        let frames = tokio::task::spawn_blocking(move || log.after(&id, after, max_bytes))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        Ok(frames.into_iter().map(Entry::from).collect())
    }

    /// Every stored frame of `session` after `after`, oldest first, read
    /// a page at a time on the calling thread (a blocking one), until `f`
    /// answers `false`.
    pub fn walk(
        &self,
        session: &str,
        after: u64,
        mut f: impl FnMut(&super::log::Frame) -> bool,
    ) -> Result<(), String> {
        const PAGE: usize = 1 << 20;
        let mut after = after;
        loop {
            let frames = self
                .log
                .after(session, after, PAGE)
                .map_err(|e| e.to_string())?;
            let Some(last) = frames.last() else {
                return Ok(());
            };
            after = last.seq;
            for frame in &frames {
                if !f(frame) {
                    return Ok(());
                }
            }
        }
    }

    /// The newest stored output of `session` before seq `before`, up to
    /// `max_bytes` (at least one frame), and whether older output remains.
    pub async fn output_before(
        &self,
        session: &str,
        before: u64,
        max_bytes: usize,
    ) -> Result<Page, String> {
        let (log, id) = (self.log.clone(), session.to_string());
        tokio::task::spawn_blocking(move || log.before(&id, before, max_bytes))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
    }

    /// Keeps the output log within `max_bytes`, the node's budget: a
    /// look at a counter while it is under, the oldest output deleted
    /// when it is over (`actor::Budget`).
    pub async fn keep_within(&self, max_bytes: u64) -> Result<super::log::Shed, String> {
        if self.log_bytes() <= max_bytes {
            return Ok(super::log::Shed::default());
        }
        self.addr
            .send(Budget { max_bytes })
            .await
            .map_err(|e| e.to_string())?
    }

    /// Bytes the output log takes on disk.
    pub fn log_bytes(&self) -> u64 {
        self.log.bytes_on_disk()
    }

    pub async fn vacuum(&self, keep: Retention) -> Result<u64, String> {
        let now_ms = crate::clock::now_ms();
        self.addr
            .send(Vacuum { now_ms, keep })
            .await
            .map_err(|e| e.to_string())?
    }
}

/// A session's record: its `SessionInfo`, and what `revive` runs when that
/// is not its command (read back by `load`; a record decodes as a plain
/// `SessionInfo` too).
#[derive(serde::Serialize)]
struct Record<'a> {
    #[serde(flatten)]
    info: &'a SessionInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    resume_command: Option<&'a [String]>,
}
