//! The store actor: one thread (a sync arbiter) that owns the `Store`
//! (sled: records, events, seq marks) and applies what sessions hand it.
//! Sessions never wait on it: they push a write onto a shared queue and go
//! on; the first write into an empty queue wakes the actor, which takes
//! everything queued meanwhile and applies it as one batch, in chunks
//! (`chunks`). Requests for durability are committed in groups (`Flush`),
//! and make the output log durable too. A write that fails is logged and
//! shown by `/healthz`, never silent. Every other request (reads, remove,
//! flush, vacuum) first applies what is queued, so it sees every write
//! handed over before it. Output does not pass here: sessions append it
//! to the output log themselves (`log`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::log::OutputLog;
use super::{Entry, Retention, Store, Write};
use crate::metrics::Metrics;

/// A session record (created, renamed, exited...) is flushed at once, so
/// a crash soon after forgets no session; flushes this close together are
/// left to sled's own periodic flush (every 500 ms).
const RECORD_FLUSH_GAP: Duration = Duration::from_millis(20);
/// How often writes re-measure the store's size on disk for `/metrics`.
const SIZE_EVERY: Duration = Duration::from_secs(1);

/// Writes handed over and not yet applied.
#[derive(Default)]
pub(super) struct Queue {
    pub writes: Vec<Write>,
    /// A wake of the actor is on its way: later writes join its batch.
    pub woken: bool,
}

impl Queue {
    /// Queues `write`; answers whether the actor must be woken for it.
    pub fn push(&mut self, write: Write) -> bool {
        self.writes.push(write);
        !std::mem::replace(&mut self.woken, true)
    }
}

/// An event as stored (with its id), told to live readers after the
/// write: a reader that subscribes, then reads the store, misses nothing
/// (what it read is not told again after it, ids tell repeats apart).
#[derive(Debug, Clone)]
pub struct LiveEvent {
    pub session: Arc<str>,
    pub entry: Entry,
}

pub struct StoreActor {
    pub(super) store: Store,
    pub(super) log: Arc<OutputLog>,
    pub(super) queue: Arc<Mutex<Queue>>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) live: tokio::sync::broadcast::Sender<LiveEvent>,
    pub(super) last_record_flush: Option<Instant>,
    /// When `termesh_store_bytes` was last measured.
    pub(super) sized_at: Instant,
    /// Flush requests stamped so far (the handle counts them).
    pub(super) stamps: Arc<AtomicU64>,
    /// Requests stamped up to this one are durable.
    pub(super) durable_upto: u64,
}

/// How much lower than the node's the store's threads (its actor and
/// sled's own) run: their work is batched and may wait; a keystroke's
/// echo on a busy core may not (echo through a mirror, p99: 2.2-4.7 ms
/// with the store at the node's priority, as with the store off below it).
const STORE_NICE: i32 = 10;

fn lower_store_threads() {
    crate::os::lower_priority(&["sled-io", "log flusher"], STORE_NICE);
}

impl Actor for StoreActor {
    type Context = SyncContext<Self>;

    fn started(&mut self, _: &mut SyncContext<Self>) {
        lower_store_threads();
    }

    fn stopped(&mut self, _: &mut SyncContext<Self>) {
        self.drain();
        if let Err(e) = self.flush() {
            tracing::error!(path = %self.store.path().display(), "store flush at stop failed: {e}");
        }
        // The segments being written are indexed as they stand: the next
        // start reads indexes instead of scanning them.
        if let Err(e) = self.log.checkpoint() {
            tracing::error!(dir = %self.log.dir().display(), "output log: checkpoint at stop failed: {e}");
        }
    }
}

impl StoreActor {
    /// Applies everything queued, in chunks (`chunks`).
    fn drain(&mut self) {
        let writes = {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.woken = false;
            std::mem::take(&mut q.writes)
        };
        if writes.is_empty() {
            return;
        }
        let live = &self.live;
        let applied = super::chunks::apply(&mut self.store, writes, |e| {
            let _ = live.send(LiveEvent {
                session: e.session,
                entry: e.entry,
            });
        });
        let mut result = applied.result;
        let mut flushed = false;
        // A record applied is flushed even when a later chunk failed.
        if applied.record
            && self
                .last_record_flush
                .is_none_or(|at| at.elapsed() >= RECORD_FLUSH_GAP)
        {
            result = result.and(self.flush());
            flushed = true;
            self.last_record_flush = Some(Instant::now());
        }
        if self.sized_at.elapsed() >= SIZE_EVERY {
            self.sized_at = Instant::now();
            self.measure();
        }
        match result {
            Err(e) => {
                tracing::error!(path = %self.store.path().display(), "store write failed: {e}");
                self.metrics.store_wrote(Err(e.to_string()));
            }
            // Writes applied in memory say nothing of the disk: only a
            // flush that worked ends a failure (a full disk kept /healthz
            // flapping to ok while every flush failed).
            Ok(()) if flushed => self.metrics.store_wrote(Ok(())),
            Ok(()) => {}
        }
    }

    /// Everything on disk, then the manifest that says so.
    fn flush(&self) -> Result<(), super::StoreError> {
        Metrics::add(&self.metrics.store_flushes, 1);
        self.store.flush()?;
        self.store.write_manifest()
    }

    fn measure(&self) {
        // sled starts I/O threads as it needs them: later ones too.
        lower_store_threads();
        if let Ok(size) = self.store.size_on_disk() {
            self.metrics.store_bytes.store(size, Ordering::Relaxed);
        }
    }
}

/// Something was queued: apply the queue.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct Drain;

impl Handler<Drain> for StoreActor {
    type Result = ();

    fn handle(&mut self, _: Drain, _: &mut SyncContext<Self>) {
        self.drain();
    }
}

/// Writes everything to disk; the answer says whether it worked. Flushes
/// are committed in groups: `stamp` numbers the request (taken after its
/// writes were queued), and a flush that began after the stamp was taken
/// already made them durable, so that request costs no fsync of its own.
/// Sixteen creates at once wait for about one fsync, not sixteen in a row.
#[derive(Message)]
#[rtype(result = "Result<(), String>")]
pub struct Flush {
    pub stamp: u64,
    /// A reservation to check: the session's mark must have reached this
    /// seq (a batch that failed to apply is logged, not returned, so the
    /// mark is read back rather than trusted).
    pub reserved: Option<(Arc<str>, u64)>,
}

impl Handler<Flush> for StoreActor {
    type Result = Result<(), String>;

    fn handle(&mut self, msg: Flush, _: &mut SyncContext<Self>) -> Self::Result {
        if msg.stamp > self.durable_upto {
            // Every request stamped so far queued its writes before its
            // stamp: the drain below takes them, the flush makes them
            // durable.
            let upto = self.stamps.load(Ordering::SeqCst);
            self.drain();
            // What the flush says is the store's state (/healthz): a
            // reservation that cannot be made durable is a failing store.
            let flushed = self.flush().map_err(|e| e.to_string());
            self.metrics.store_wrote(flushed.clone());
            flushed?;
            // The output log's sync failing (EIO) degrades storing, not
            // the live stream: a reservation, which holds output until it
            // is answered, does not wait on it. /healthz says it.
            if let Err(e) = self.log.sync() {
                self.log.sync_failed(&e);
            }
            self.durable_upto = upto;
        }
        // A flush after this request's stamp has drained its writes, so the
        // mark shows whether they were applied.
        if let Some((session, seq)) = msg.reserved {
            let mark = self.store.seq_mark(&session).map_err(|e| e.to_string())?;
            if mark < seq {
                return Err(format!(
                    "the seq mark of {session} did not reach {seq} (a store write failed)"
                ));
            }
        }
        Ok(())
    }
}

/// Marks a session removed (`purge`: its output and events go now).
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct Removed {
    pub session: String,
    pub at_ms: u64,
    pub purge: bool,
}

impl Handler<Removed> for StoreActor {
    type Result = ();

    fn handle(&mut self, msg: Removed, _: &mut SyncContext<Self>) {
        self.drain();
        let mut done = self.store.remove(&msg.session, msg.at_ms);
        if msg.purge && done.is_ok() {
            done = self.store.purge(&msg.session);
            if let Err(e) = self.log.purge(&msg.session) {
                tracing::error!(session = %msg.session, "output log: purge failed: {e}");
            }
        }
        // Durable now: these change the store outside the queue, so a flush
        // asked for before them (whose stamp covers the next ones) would
        // not make them durable, and a stop right after would undo them.
        let done = done.and_then(|()| self.flush());
        if let Err(e) = done {
            tracing::error!(session = %msg.session, "store: remove failed: {e}");
        }
    }
}

/// Stored events of a session after an id, at most `limit`.
#[derive(Message)]
#[rtype(result = "Result<Vec<Entry>, String>")]
pub(super) struct ReadEvents {
    pub session: String,
    pub after: u64,
    pub limit: usize,
}

impl Handler<ReadEvents> for StoreActor {
    type Result = Result<Vec<Entry>, String>;

    fn handle(&mut self, msg: ReadEvents, _: &mut SyncContext<Self>) -> Self::Result {
        self.drain();
        self.store
            .events_after(&msg.session, msg.after, msg.limit)
            .map_err(|e| e.to_string())
    }
}

/// The output log is over the node's budget (`store.max_bytes`): the
/// oldest output goes, ended sessions' first (a session is ended when its
/// record says it is not running).
#[derive(Message)]
#[rtype(result = "Result<super::log::Shed, String>")]
pub(super) struct Budget {
    pub max_bytes: u64,
}

impl Handler<Budget> for StoreActor {
    type Result = Result<super::log::Shed, String>;

    fn handle(&mut self, msg: Budget, _: &mut SyncContext<Self>) -> Self::Result {
        self.drain();
        // Every few seconds, writes or not: sled's threads started since
        // (it starts them as it goes) are lowered, the size is measured.
        if self.sized_at.elapsed() >= SIZE_EVERY {
            self.sized_at = Instant::now();
            self.measure();
        }
        let ended = self
            .store
            .records()
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|(_, record, removed)| {
                *removed
                    || rmp_serde::from_slice::<termesh_transport::SessionInfo>(record)
                        .is_ok_and(|i| i.status != termesh_transport::SessionStatus::Running)
            })
            .map(|(id, _, _)| id)
            .collect();
        let shed = self.log.shed(msg.max_bytes, &ended);
        if shed.ended + shed.running > 0 {
            tracing::warn!(
                max_bytes = msg.max_bytes,
                ended_bytes = shed.ended,
                running_bytes = shed.running,
                "store: over store.max_bytes: the oldest output was deleted ({:.1} MB of ended sessions, {:.1} MB of running ones)",
                shed.ended as f64 / 1e6,
                shed.running as f64 / 1e6
            );
        }
        Ok(shed)
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
        self.drain();
        let (deleted, dropped) = self
            .store
            .vacuum(msg.now_ms, msg.keep)
            .map_err(|e| e.to_string())?;
        for id in dropped {
            self.log.purge(&id).map_err(|e| e.to_string())?;
        }
        self.log.trim_all(msg.keep.output_bytes);
        // The records it deleted are gone on disk before the manifest
        // counts fewer.
        self.flush().map_err(|e| e.to_string())?;
        self.measure();
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_write_into_an_empty_queue_wakes_the_actor_once() {
        let event = || Write::Event {
            session: "s".into(),
            at_ms: 0,
            data: bytes::Bytes::from_static(b"{}"),
        };
        let mut q = Queue::default();
        assert!(q.push(event()));
        assert!(!q.push(event()), "joins the batch");
        // A drained queue starts over.
        q.woken = false;
        q.writes.clear();
        assert!(q.push(event()));
    }
}
