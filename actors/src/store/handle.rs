//! `StoreHandle`: how sessions, the registry and the front ends reach the
//! store actor. Writes go onto the shared queue without waiting; output
//! wakes the actor `WAKE_AFTER` after the first write into an empty queue
//! (or at once past `WAKE_BYTES`), so a keystroke's echo never shares the
//! CPU with a store write of its own and a busy node writes in large
//! batches; records and events wake it at once. Reads, remove, flush and
//! vacuum are messages that first apply what is queued. Also the opening
//! of the store at start and what it restores.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use bytes::Bytes;
use termesh_transport::{EventKind, SessionInfo};

use super::actor::{
    Drain, Flush, LiveEvent, MakeDurable, Queue, ReadEvents, ReadOutput, Removed, StoreActor,
    Vacuum, Wake, MAX_BACKLOG,
};
use super::journal::Journal;
use super::{Entry, Retention, Store, StoreError, Write};
use crate::metrics::Metrics;

/// Live events a slow reader may fall behind by before it reads the
/// store again (`RecvError::Lagged`).
const LIVE_EVENTS: usize = 1024;
/// Output waits this long in the queue before the store thread is woken
/// for it: what a SIGKILL may lose on top of sled's own 500 ms flush.
pub const WAKE_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// What sessions and the registry reach the store by.
#[derive(Clone)]
pub struct StoreHandle {
    addr: Addr<StoreActor>,
    /// Flush requests stamped so far (group commit: `actor::Flush`).
    stamps: Arc<AtomicU64>,
    queue: Arc<Mutex<Queue>>,
    backlog: Arc<AtomicU64>,
    live: tokio::sync::broadcast::Sender<LiveEvent>,
    /// Every frame, before its seq is sent (`journal`).
    journal: Arc<Mutex<Journal>>,
    /// `Journal::filling` as of the last append: `is_behind`, asked before
    /// every frame, takes the journal's lock only when it may be pressed.
    journal_filling: Arc<AtomicBool>,
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

/// A session found in the store at start: its last record, whether it
/// was removed, and the newest output (up to a ring's worth).
#[derive(Debug, Clone)]
pub struct Restored {
    pub info: SessionInfo,
    pub tail: Vec<Entry>,
    /// Where its seqs continue: above the newest stored frame and above
    /// its high-water mark (seqs that may have been sent unstored).
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
        let journal_path = super::load::journal_path(dir);
        let restored = super::load::load(&mut store, &journal_path, tail_bytes)?;
        let journal = Journal::open(&journal_path).map_err(|e| StoreError::Open {
            path: journal_path.display().to_string(),
            cause: e.to_string(),
        })?;
        if let Ok(size) = store.size_on_disk() {
            metrics.store_bytes.store(size, Ordering::Relaxed);
        }
        let backlog = Arc::new(AtomicU64::new(0));
        let queue = Arc::new(Mutex::new(Queue::default()));
        let (live, _) = tokio::sync::broadcast::channel(LIVE_EVENTS);
        let cell = Mutex::new(Some(store));
        let (b, q, l) = (backlog.clone(), queue.clone(), live.clone());
        let stamps = Arc::new(AtomicU64::new(0));
        let st = stamps.clone();
        let addr = SyncArbiter::start(1, move || StoreActor {
            store: cell
                .lock()
                .ok()
                .and_then(|mut s| s.take())
                .expect("the store thread starts once"),
            queue: q.clone(),
            backlog: b.clone(),
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
            backlog,
            live,
            journal: Arc::new(Mutex::new(journal)),
            journal_filling: Arc::default(),
        };
        Ok((handle, restored))
    }

    /// Queues a write (`bytes` of output in it) and sees that the actor
    /// is woken for it: output after `WAKE_AFTER` unless a batch's worth
    /// is queued, anything else at once.
    fn push(&self, write: Write, bytes: u64) {
        self.backlog.fetch_add(bytes, Ordering::Relaxed);
        let wake = {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.push(write, bytes)
        };
        match wake {
            Wake::Now => self.addr.do_send(Drain),
            Wake::Later => match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    let addr = self.addr.clone();
                    rt.spawn(async move {
                        tokio::time::sleep(WAKE_AFTER).await;
                        addr.do_send(Drain);
                    });
                }
                Err(_) => self.addr.do_send(Drain),
            },
            Wake::Queued => {}
        }
    }

    /// Output of `session` as frame `seq`, before the seq is sent to
    /// anyone: written to the journal (one `pwrite`), then queued for the
    /// store without a copy (the id and the frame are shared). Under the
    /// journal's lock, so a half's frames are all queued when the switch
    /// away from it asks the store to make them durable.
    pub fn output(&self, session: &Arc<str>, seq: u64, data: Bytes) {
        let len = data.len() as u64;
        let at_ms = crate::clock::now_ms();
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        let addr = &self.addr;
        let written = journal.append(session, seq, at_ms, &data, |durable| {
            addr.do_send(MakeDurable(durable));
        });
        if let Err(e) = written {
            tracing::error!("the output journal cannot be written: {e}");
        }
        self.journal_filling
            .store(journal.filling(), Ordering::Relaxed);
        let write = Write::Output {
            session: session.clone(),
            seq,
            at_ms,
            data,
        };
        self.push(write, len);
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
        self.push(write, 0);
    }

    pub fn record(&self, info: &SessionInfo) {
        let Ok(data) = rmp_serde::to_vec_named(info) else {
            return;
        };
        let write = Write::Record {
            session: info.id.as_str().into(),
            data: data.into(),
        };
        self.push(write, 0);
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
        self.push(write, 0);
        self.flush_queued(Some((session.clone(), seq)))
    }

    /// A clean stop: no seq above `seq` was sent, so the mark comes down
    /// to it and a restart continues without a gap.
    pub fn seq_mark(&self, session: &Arc<str>, seq: u64) {
        let write = Write::SeqMark {
            session: session.clone(),
            seq,
        };
        self.push(write, 0);
    }

    pub fn removed(&self, session: &str, purge: bool) {
        self.addr.do_send(Removed {
            session: session.to_string(),
            at_ms: crate::clock::now_ms(),
            purge,
        });
    }

    /// The disk is behind (the backlog, or the journal waiting for a half
    /// to be durable): sessions hold their programs' output.
    pub fn is_behind(&self) -> bool {
        self.backlog.load(Ordering::Relaxed) > MAX_BACKLOG
            || (self.journal_filling.load(Ordering::Relaxed)
                && self
                    .journal
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .pressed())
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

    pub async fn output_after(
        &self,
        session: &str,
        after: u64,
        max_bytes: usize,
    ) -> Result<Vec<Entry>, String> {
        let msg = ReadOutput {
            session: session.to_string(),
            after,
            max_bytes,
        };
        self.addr.send(msg).await.map_err(|e| e.to_string())?
    }

    pub async fn vacuum(&self, keep: Retention) -> Result<u64, String> {
        let now_ms = crate::clock::now_ms();
        self.addr
            .send(Vacuum { now_ms, keep })
            .await
            .map_err(|e| e.to_string())?
    }
}
