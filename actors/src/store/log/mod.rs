//! The output log (ARCHITECTURE.md, "Persistence"; docs/architecture.md,
//! "The output log"): every session's output as an append-only log of
//! segment files under `DATA_DIR/output/<session>/`, written before a
//! frame's seq is sent (so it is also the crash journal), synced in
//! groups, deleted a whole segment at a time as retention requires, and
//! read page by page. The node holds none of its frames in memory: only
//! each segment's name, length and last seq, the block index of the
//! segments being written, and a bounded cache of sealed ones' indexes.
//!
//! Whether a restarted node may continue each session's seqs right after
//! its log's last frame, or must go above its seq high-water mark, is the
//! `LOGGED` file: it holds the machine's boot id while every frame sent
//! is in the log (a process crash keeps what was written; a machine
//! crash, another boot id, may not), and is deleted at the first write
//! that fails.

pub mod cache;
pub mod format;
mod scan;
pub mod session;
#[cfg(test)]
mod tests;
mod upkeep;
pub mod view;

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

pub use format::Frame;
use upkeep::Trim;
pub use view::{Page, View};

use crate::metrics::Metrics;
use cache::IndexCache;
use session::SessionLog;

/// Segment size at most: large enough that a busy session makes a new
/// file every few seconds at most, small enough that retention frees
/// space in steps a user would not notice.
pub const SEGMENT_BYTES: u64 = 8 << 20;
/// The segment size for a session cap of `keep` bytes: an eighth of it
/// (so a session keeps between its cap and an eighth more), at most
/// `SEGMENT_BYTES`.
pub fn segment_bytes_for(keep: u64) -> u64 {
    (keep / 8).clamp(4 << 10, SEGMENT_BYTES)
}

/// How often written output is synced to disk (group commit): a machine
/// crash loses at most about this much of the newest output (a process
/// crash, nothing).
pub const SYNC_EVERY: Duration = Duration::from_secs(1);
/// A session's segment descriptor is let go after this long unwritten.
const IDLE: Duration = Duration::from_secs(10);
const MARKER: &str = "LOGGED";

/// What `shed` deleted, in bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Shed {
    pub ended: u64,
    pub running: u64,
}

/// What opening the log found.
#[derive(Debug, Default, Clone, Copy)]
pub struct Recovery {
    /// Every frame sent by the last run is in the log (the same boot, no
    /// write failed): seqs may continue right after each log's last.
    pub whole: bool,
    /// Bytes of torn tails cut off.
    pub repaired: u64,
    pub sessions: usize,
}

#[derive(Debug)]
pub struct OutputLog {
    dir: PathBuf,
    segment_bytes: u64,
    /// Output kept per session (whole segments deleted past it).
    keep_bytes: AtomicU64,
    sessions: Mutex<HashMap<String, Arc<Mutex<SessionLog>>>>,
    pub cache: IndexCache,
    /// What it counts (`termesh_store_output_*`, `store_lost_bytes`, and
    /// `log_error` for `/healthz`).
    metrics: Arc<Metrics>,
    /// The `LOGGED` file says this run's log is whole.
    whole: AtomicBool,
    /// `metrics.log_error` is set: the next write that works clears it.
    failing: AtomicBool,
    /// Files of trimmed segments go to the `log-trim` thread once it
    /// runs (`start_trimming`); before, they are deleted where trimmed.
    trimmer: OnceLock<mpsc::SyncSender<Trim>>,
}

thread_local! {
    /// The record being written (one per writing thread, not per session).
    static RECORD: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl OutputLog {
    /// Opens the log in `dir` (made when absent): every session's
    /// segments, torn tails repaired.
    pub fn open(
        dir: &Path,
        segment_bytes: u64,
        keep_bytes: u64,
        metrics: Arc<Metrics>,
    ) -> io::Result<(OutputLog, Recovery)> {
        session::make_private_dir(dir)?;
        // An output log made before the node restricted it stays its own.
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        let marker = std::fs::read_to_string(dir.join(MARKER)).ok();
        // Read once: this run says it again only once it is whole
        // (`declare_whole`); a mark left standing would outlive a write
        // that fails before then.
        if marker.is_some() {
            std::fs::remove_file(dir.join(MARKER))?;
        }
        let mut recovery = Recovery {
            whole: marker.is_some_and(|m| Some(m.trim()) == boot_id().as_deref()),
            ..Recovery::default()
        };
        let mut sessions = HashMap::new();
        let mut disk = 0;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let Some(id) = format::id_of_folder(&entry.file_name().to_string_lossy()) else {
                continue;
            };
            let (log, opened) = SessionLog::open(entry.path())?;
            recovery.repaired += opened.repaired;
            disk += log.bytes();
            sessions.insert(id, Arc::new(Mutex::new(log)));
        }
        recovery.sessions = sessions.len();
        let log = OutputLog {
            dir: dir.to_path_buf(),
            segment_bytes,
            keep_bytes: AtomicU64::new(keep_bytes),
            sessions: Mutex::new(sessions),
            cache: IndexCache::new(metrics.clone()),
            metrics,
            whole: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            trimmer: OnceLock::new(),
        };
        log.metrics.log_bytes.store(disk, Ordering::Relaxed);
        Ok((log, recovery))
    }

    /// From now on every frame sent is in the log: said in the `LOGGED`
    /// file (call once what a restart continues from is on disk).
    pub fn declare_whole(&self) -> io::Result<()> {
        let path = self.dir.join(MARKER);
        let tmp = self.dir.join(format!("{MARKER}.tmp"));
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            let Some(boot) = boot_id() else {
                // No boot id: a restart cannot tell a process crash from
                // a machine's, so it never trusts the log's end.
                return Ok(());
            };
            io::Write::write_all(&mut f, boot.as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &path)?;
        self.whole.store(true, Ordering::Release);
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn set_keep_bytes(&self, bytes: u64) {
        self.keep_bytes.store(bytes, Ordering::Relaxed);
    }

    fn slot(&self, id: &str) -> Arc<Mutex<SessionLog>> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions
            .entry(id.to_string())
            .or_insert_with(|| {
                let dir = self.dir.join(format::folder_name(id));
                Arc::new(Mutex::new(SessionLog::new(dir)))
            })
            .clone()
    }

    fn existing(&self, id: &str) -> Option<Arc<Mutex<SessionLog>>> {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.get(id).cloned()
    }

    /// Appends frame `seq` of `id` (call before its seq is sent). A write
    /// that fails is counted and said, and the log no longer claims to
    /// be whole: a restart then continues above the seq high-water mark.
    pub fn append(&self, id: &str, seq: u64, at_ms: u64, data: &[u8]) -> io::Result<()> {
        let slot = self.slot(id);
        let mut log = slot.lock().unwrap_or_else(|p| p.into_inner());
        let written = RECORD.with(|buf| {
            let mut buf = buf.borrow_mut();
            let r = log.append(
                seq,
                at_ms,
                data,
                &mut buf,
                self.segment_bytes,
                &self.metrics.log_open_files,
            );
            if buf.capacity() > 1 << 20 {
                *buf = Vec::new();
            }
            r
        });
        match written {
            Ok(grew) => {
                self.metrics.log_bytes.fetch_add(grew, Ordering::Relaxed);
                // The oldest segment may go now (a look at two numbers
                // unless it does); its files are deleted off this thread.
                let dropped = log.trim(self.keep_bytes.load(Ordering::Relaxed));
                drop(log);
                self.count_dropped(dropped.bytes);
                self.delete(dropped.files);
                // One atomic read per frame; the error's lock only when
                // writes come back.
                if self.failing.swap(false, Ordering::AcqRel) {
                    self.metrics
                        .log_error
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .take();
                    tracing::info!(dir = %self.dir.display(), "output log: writes work again");
                }
                Ok(())
            }
            Err(e) => {
                drop(log);
                self.failed(data.len() as u64, &e);
                Err(e)
            }
        }
    }

    fn failed(&self, bytes: u64, e: &io::Error) {
        Metrics::add(&self.metrics.store_lost_bytes, bytes);
        self.fail(
            e.to_string(),
            "a write failed: output is sent but not stored until the disk takes writes again",
        );
        if self.whole.swap(false, Ordering::AcqRel) {
            // Unlinking needs no space: it works on a full disk.
            if let Err(e) = std::fs::remove_file(self.dir.join(MARKER)) {
                tracing::error!("output log: cannot withdraw the LOGGED mark ({e})");
            }
        }
    }

    /// A sync failed: output written since may not survive a machine crash.
    pub fn sync_failed(&self, e: &io::Error) {
        self.fail(
            format!("sync failed: {e}"),
            "a sync failed: output written since may not survive a machine crash",
        );
    }

    /// Said once per episode, and by `/healthz` until a write works.
    fn fail(&self, cause: String, what: &str) {
        let mut failing = self
            .metrics
            .log_error
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if failing.is_none() {
            tracing::error!(dir = %self.dir.display(), "output log: {what} ({cause})");
        }
        *failing = Some(cause);
        self.failing.store(true, Ordering::Release);
    }

    fn count_dropped(&self, freed: u64) {
        if freed > 0 {
            self.metrics.log_bytes.fetch_sub(freed, Ordering::Relaxed);
            Metrics::add(&self.metrics.log_dropped_bytes, freed);
        }
    }

    /// The session's log as it stands, to read without its lock.
    pub fn view(&self, id: &str) -> Option<View> {
        let slot = self.existing(id)?;
        let log = slot.lock().unwrap_or_else(|p| p.into_inner());
        Some(View::of(&log))
    }

    /// Frames of `id` after `after`, up to `max_bytes` (at least one).
    pub fn after(&self, id: &str, after: u64, max_bytes: usize) -> io::Result<Vec<Frame>> {
        match self.view(id) {
            Some(v) => v.after(after, max_bytes, &self.cache),
            None => Ok(Vec::new()),
        }
    }

    /// The newest frames of `id` before `before`, up to `max_bytes`.
    pub fn before(&self, id: &str, before: u64, max_bytes: usize) -> io::Result<Page> {
        match self.view(id) {
            Some(v) => v.before(before, max_bytes, &self.cache),
            None => Ok(Page::default()),
        }
    }

    /// The newest seq in `id`'s log (0: none).
    pub fn last_seq(&self, id: &str) -> u64 {
        self.existing(id).map_or(0, |s| {
            s.lock().unwrap_or_else(|p| p.into_inner()).last_seq()
        })
    }

    /// When `id`'s newest frame was read (unix ms; 0: none).
    pub fn last_at(&self, id: &str) -> u64 {
        self.existing(id)
            .map_or(0, |s| s.lock().unwrap_or_else(|p| p.into_inner()).last_at())
    }

    /// Bytes `id`'s log takes.
    pub fn bytes(&self, id: &str) -> u64 {
        self.existing(id)
            .map_or(0, |s| s.lock().unwrap_or_else(|p| p.into_inner()).bytes())
    }

    /// Bytes every session's segments take.
    pub fn bytes_on_disk(&self) -> u64 {
        self.metrics.log_bytes.load(Ordering::Relaxed)
    }

    /// Every session with a log.
    pub fn ids(&self) -> Vec<String> {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.keys().cloned().collect()
    }

    /// The session will write no more (its program ended): its segment
    /// is indexed and its descriptor let go.
    pub fn seal(&self, id: &str) {
        if let Some(slot) = self.existing(id) {
            let mut log = slot.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = log.seal(&self.metrics.log_open_files) {
                tracing::warn!(
                    session = id,
                    "output log: sealing failed ({e}): the next start scans it"
                );
            }
        }
    }

    /// Deletes `id`'s output now.
    pub fn purge(&self, id: &str) -> io::Result<()> {
        let slot = {
            let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            sessions.remove(id)
        };
        let dir = self.dir.join(format::folder_name(id));
        if let Some(slot) = slot {
            let mut log = slot.lock().unwrap_or_else(|p| p.into_inner());
            self.metrics
                .log_bytes
                .fetch_sub(log.bytes(), Ordering::Relaxed);
            log.close(&self.metrics.log_open_files);
        }
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Every session's log to at least `keep` bytes, whole segments.
    pub fn trim_all(&self, keep: u64) -> u64 {
        let mut freed = 0;
        for id in self.ids() {
            if let Some(slot) = self.existing(&id) {
                let dropped = slot.lock().unwrap_or_else(|p| p.into_inner()).trim(keep);
                self.count_dropped(dropped.bytes);
                self.delete(dropped.files);
                freed += dropped.bytes;
            }
        }
        freed
    }

    /// Deletes the oldest segments until the log holds at most `max`
    /// bytes: of sessions in `ended` first (every segment may go), then
    /// of running ones (never the segment being written), oldest output
    /// first by when it was read. Answers what it deleted.
    pub fn shed(&self, max: u64, ended: &std::collections::HashSet<String>) -> Shed {
        // Segments trimmed before go first: a crash then cannot leave an
        // older one on disk behind a hole this deletes.
        self.settle_trims();
        let mut shed = Shed::default();
        for ended_pass in [true, false] {
            let mut heap = std::collections::BinaryHeap::new();
            for id in self
                .ids()
                .into_iter()
                .filter(|id| ended.contains(id) == ended_pass)
            {
                if let Some(at) = self.oldest_at(&id, ended_pass) {
                    heap.push(std::cmp::Reverse((at, id)));
                }
            }
            while self.metrics.log_bytes.load(Ordering::Relaxed) > max {
                let Some(std::cmp::Reverse((_, id))) = heap.pop() else {
                    break;
                };
                let Some(slot) = self.existing(&id) else {
                    continue;
                };
                let dropped = {
                    let mut log = slot.lock().unwrap_or_else(|p| p.into_inner());
                    if ended_pass {
                        // No index written: it would need space the
                        // budget may be short of, and the segment goes.
                        log.let_go(&self.metrics.log_open_files);
                    }
                    log.drop_oldest()
                };
                let freed = match dropped {
                    Ok(freed) => freed,
                    Err(e) => {
                        tracing::warn!(session = %id, "output log: a segment over the budget cannot be deleted: {e}");
                        continue;
                    }
                };
                self.count_dropped(freed);
                if ended_pass {
                    shed.ended += freed;
                } else {
                    shed.running += freed;
                }
                if let Some(at) = self.oldest_at(&id, ended_pass) {
                    heap.push(std::cmp::Reverse((at, id)));
                }
            }
        }
        shed
    }

    /// When the oldest segment that may go was last written, if one may.
    fn oldest_at(&self, id: &str, ended: bool) -> Option<u64> {
        let slot = self.existing(id)?;
        let log = slot.lock().unwrap_or_else(|p| p.into_inner());
        let segments = log.segments();
        let may_go = if ended { 1 } else { 2 };
        (segments.len() >= may_go).then(|| segments[0].last_at)
    }

    /// Makes everything written durable; lets idle descriptors go.
    /// Answers how many sessions it synced.
    pub fn sync(&self) -> io::Result<usize> {
        let mut synced = 0;
        let mut result = Ok(());
        for id in self.ids() {
            let Some(slot) = self.existing(&id) else {
                continue;
            };
            let unsynced = slot
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .unsynced(IDLE, &self.metrics.log_open_files);
            if unsynced.is_empty() {
                continue;
            }
            let active = unsynced.active();
            match unsynced.sync() {
                Ok(()) => synced += 1,
                Err(e) => {
                    if active {
                        slot.lock().unwrap_or_else(|p| p.into_inner()).sync_failed();
                    }
                    result = Err(e);
                }
            }
        }
        if synced > 0 {
            Metrics::add(&self.metrics.log_syncs, 1);
        }
        result.map(|()| synced)
    }

    /// A clean stop: every segment being written is indexed as it
    /// stands and synced, so the next start reads indexes, not segments,
    /// and every trimmed one is deleted.
    pub fn checkpoint(&self) -> io::Result<()> {
        for id in self.ids() {
            if let Some(slot) = self.existing(&id) {
                slot.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .checkpoint()?;
            }
        }
        let synced = self.sync().map(|_| ());
        // Last: what the next start reads first is done whatever this
        // waits for.
        self.settle_trims();
        synced
    }
}

/// This boot of the machine (Linux's random boot id).
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}
