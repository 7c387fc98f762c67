//! One session's output log: its segments on disk, the one it appends to,
//! retention by whole segments, and recovery of the segment a crash left
//! open (its torn tail cut off). Reads go through a `View`
//! (`view.rs`), taken under the session's lock and read without it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::format::{self, Index, IndexEntry, BLOCK, HEADER, RECORD};
use super::scan::{read_index, scan_segment};

/// Segment files a node keeps open for appending, at most: past it a
/// write opens, writes and closes (a busy node with thousands of
/// sessions spends no descriptor per session on its log).
pub const MAX_OPEN: u64 = 512;

pub use super::format::Segment;

/// The segment being appended to.
#[derive(Debug)]
struct Active {
    file: Option<Open>,
    /// Its blocks so far (the index written when it is sealed).
    index: Vec<IndexEntry>,
    /// Written since the last sync.
    dirty: bool,
    last_write: Instant,
}

#[derive(Debug)]
struct Open {
    file: File,
    /// Counts against `MAX_OPEN`.
    counted: bool,
}

/// A session's log. Every field describes files on disk: `segments` is
/// oldest first, and when `active` is set its last one is being written.
#[derive(Debug)]
pub struct SessionLog {
    dir: PathBuf,
    segments: Vec<Segment>,
    active: Option<Active>,
    /// The segments' lengths, summed.
    bytes: u64,
    /// Sealed segments whose data has not been synced yet.
    unsynced: Vec<u64>,
}

/// Segments taken out of a log by `trim`: their bytes, and their files
/// to delete in order.
#[derive(Debug, Default)]
pub struct Dropped {
    pub bytes: u64,
    pub files: Vec<PathBuf>,
}

/// What opening a session's folder found and did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Opened {
    /// Bytes of a torn or damaged tail cut off the newest segment.
    pub repaired: u64,
}

impl SessionLog {
    /// A log with no segment yet, in `dir` (made at the first write).
    pub fn new(dir: PathBuf) -> SessionLog {
        SessionLog {
            dir,
            segments: Vec::new(),
            active: None,
            bytes: 0,
            unsynced: Vec::new(),
        }
    }

    /// Opens the segments in `dir`: every sealed one by its index, the
    /// newest one scanned past what its index covers (a torn tail is cut
    /// off, so the next append follows the last whole record).
    pub fn open(dir: PathBuf) -> io::Result<(SessionLog, Opened)> {
        let mut firsts: Vec<u64> = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| format::parse_segment_name(&e.file_name().to_string_lossy()))
            .collect();
        firsts.sort_unstable();
        let mut log = SessionLog::new(dir);
        let mut opened = Opened::default();
        let newest = firsts.last().copied();
        for first in firsts {
            let path = log.segment_path(first);
            let len = std::fs::metadata(&path)?.len();
            let index = read_index(&log.index_path(first));
            let index = match index {
                // It describes bytes the segment no longer has (a tail
                // cut off since): it would mislead, so it goes.
                Some(i) if i.covered > len => {
                    remove_if_there(&log.index_path(first))?;
                    None
                }
                found => found,
            };
            let segment = match index {
                Some(i) if i.covered == len => {
                    if Some(first) == newest {
                        // Appends continue in it (a clean stop indexed it).
                        log.active = Some(Active {
                            file: None,
                            index: i.entries,
                            dirty: false,
                            last_write: Instant::now(),
                        });
                    }
                    Segment {
                        first_seq: first,
                        last_seq: i.last_seq,
                        last_at: i.last_at,
                        len,
                    }
                }
                // Written on after its index, or never indexed: scanned.
                found => {
                    let (scanned, entries) = scan_segment(&path, first, found)?;
                    if scanned.len < len {
                        opened.repaired += len - scanned.len;
                        remove_if_there(&log.index_path(first))?;
                        OpenOptions::new()
                            .write(true)
                            .open(&path)?
                            .set_len(scanned.len)?;
                        tracing::warn!(path = %path.display(), cut = len - scanned.len, "output log: a torn tail cut off");
                    }
                    if Some(first) == newest {
                        log.active = Some(Active {
                            file: None,
                            index: entries,
                            dirty: scanned.len < len,
                            last_write: Instant::now(),
                        });
                    }
                    scanned
                }
            };
            log.bytes += segment.len;
            log.segments.push(segment);
        }
        Ok((log, opened))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Bytes its segments take.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The newest seq in the log (0: none).
    pub fn last_seq(&self) -> u64 {
        self.segments
            .iter()
            .rev()
            .find(|s| s.has_records())
            .map_or(0, |s| s.last_seq)
    }

    /// When its newest record was read (0: none).
    pub fn last_at(&self) -> u64 {
        self.segments.iter().map(|s| s.last_at).max().unwrap_or(0)
    }

    pub fn segment_path(&self, first_seq: u64) -> PathBuf {
        self.dir.join(format::segment_name(first_seq))
    }

    pub fn index_path(&self, first_seq: u64) -> PathBuf {
        self.dir.join(format::index_name(first_seq))
    }

    /// The blocks of the segment being written (sealed ones have theirs
    /// in their index file).
    pub fn active_index(&self) -> Option<(u64, &[IndexEntry])> {
        let a = self.active.as_ref()?;
        Some((self.segments.last()?.first_seq, &a.index))
    }

    /// Appends one frame (encoded in `buf`, which it reuses), after a
    /// new segment when the current one is full; answers the bytes the
    /// log grew by. On an error nothing is counted: the next append
    /// writes over what this one may have left.
    pub fn append(
        &mut self,
        seq: u64,
        at_ms: u64,
        data: &[u8],
        buf: &mut Vec<u8>,
        segment_bytes: u64,
        open: &AtomicU64,
    ) -> io::Result<u64> {
        let size = (RECORD + data.len()) as u64;
        let full = self
            .segments
            .last()
            .is_some_and(|s| s.has_records() && s.len + size > segment_bytes);
        let mut grew = 0;
        if self.active.is_none() || full {
            self.seal(open)?;
            grew += self.start_segment(seq, open)?;
        }
        buf.clear();
        format::encode(buf, seq, at_ms, data);
        let segment = self.segments.last_mut().expect("a segment was started");
        let active = self.active.as_mut().expect("a segment was started");
        let file = match &active.file {
            Some(o) => o,
            None => active.file.insert(open_for_append(
                &self.dir.join(format::segment_name(segment.first_seq)),
                open,
            )?),
        };
        file.file.write_all_at(buf, segment.len)?;
        let starts_block = active
            .index
            .last()
            .is_none_or(|e| segment.len - e.offset >= BLOCK);
        if starts_block {
            active.index.push(IndexEntry {
                seq,
                at_ms,
                offset: segment.len,
            });
        }
        if !file.counted {
            // Over the budget: not kept open.
            active.file = None;
        }
        segment.len += size;
        segment.last_seq = seq;
        segment.last_at = at_ms;
        active.dirty = true;
        active.last_write = Instant::now();
        self.bytes += size;
        Ok(grew + size)
    }

    fn start_segment(&mut self, seq: u64, open: &AtomicU64) -> io::Result<u64> {
        make_private_dir(&self.dir)?;
        remove_if_there(&self.index_path(seq))?;
        let path = self.segment_path(seq);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        file.write_all_at(&format::segment_header(seq), 0)?;
        let counted = take_slot(open);
        self.segments.push(Segment {
            first_seq: seq,
            last_seq: seq - 1,
            last_at: 0,
            len: HEADER,
        });
        self.bytes += HEADER;
        self.active = Some(Active {
            file: Some(Open { file, counted }),
            index: Vec::new(),
            dirty: true,
            last_write: Instant::now(),
        });
        if !counted {
            if let Some(a) = &mut self.active {
                a.file = None;
            }
        }
        Ok(HEADER)
    }

    /// Seals the segment being written: its index goes beside it and its
    /// descriptor is let go; its data is synced by the next sync. A log
    /// with nothing being written is left as it is.
    pub fn seal(&mut self, open: &AtomicU64) -> io::Result<()> {
        let Some(active) = self.active.take() else {
            return Ok(());
        };
        release(active.file, open);
        let Some(segment) = self.segments.last() else {
            return Ok(());
        };
        let index = Index {
            covered: segment.len,
            last_seq: segment.last_seq,
            last_at: segment.last_at,
            entries: active.index,
        };
        let first = segment.first_seq;
        if active.dirty {
            self.unsynced.push(first);
        }
        write_file(&self.index_path(first), &format::encode_index(&index))
    }

    /// Lets the segment being written go without indexing it (the next
    /// start scans it): for a log whose segments are about to be deleted.
    pub fn let_go(&mut self, open: &AtomicU64) {
        if let Some(active) = self.active.take() {
            release(active.file, open);
            if active.dirty {
                if let Some(s) = self.segments.last() {
                    self.unsynced.push(s.first_seq);
                }
            }
        }
    }

    /// Writes the index of the segment being written as it stands now,
    /// so a clean start reads it instead of scanning (appends continue
    /// after it: the next start scans only what follows).
    pub fn checkpoint(&mut self) -> io::Result<()> {
        let (Some(active), Some(segment)) = (&self.active, self.segments.last()) else {
            return Ok(());
        };
        let index = Index {
            covered: segment.len,
            last_seq: segment.last_seq,
            last_at: segment.last_at,
            entries: active.index.clone(),
        };
        write_file(
            &self.index_path(segment.first_seq),
            &format::encode_index(&index),
        )
    }

    /// What to make durable now, taken under the session's lock and
    /// synced without it (`Unsynced::sync`), so a slow disk's fsync never
    /// holds the session's writes: the segments sealed since the last
    /// sync and the one being written if it was written to. Lets the
    /// descriptor go when nothing was written for `idle`.
    pub fn unsynced(&mut self, idle: std::time::Duration, open: &AtomicU64) -> Unsynced {
        let mut out = Unsynced::default();
        for first in std::mem::take(&mut self.unsynced) {
            out.files.push(self.segment_path(first));
        }
        let first = self.segments.last().map(|s| s.first_seq);
        if let (Some(active), Some(first)) = (&mut self.active, first) {
            if std::mem::take(&mut active.dirty) {
                match active.file.as_ref().map(|o| o.file.try_clone()) {
                    Some(Ok(file)) => out.open = Some(file),
                    _ => out.active_path = Some(self.dir.join(format::segment_name(first))),
                }
            }
            if active.last_write.elapsed() >= idle {
                release(active.file.take(), open);
            }
        }
        out
    }

    /// A sync of the segment being written failed: it is tried again.
    pub fn sync_failed(&mut self) {
        if let Some(active) = &mut self.active {
            active.dirty = true;
        }
    }

    /// Takes the oldest segments out of the log while what stays holds at
    /// least `keep` bytes; never the one being written. Their files are
    /// the caller's to delete (`OutputLog` hands them to its `log-trim`
    /// thread: a reader that trims as it appends never waits for the
    /// file system).
    pub fn trim(&mut self, keep: u64) -> Dropped {
        let mut dropped = Dropped::default();
        while self.segments.len() > 1 && self.bytes - self.segments[0].len >= keep {
            let Some(files) = self.oldest_files() else {
                break;
            };
            dropped.files.extend(files);
            dropped.bytes += self.take_oldest();
        }
        dropped
    }

    /// Deletes the oldest segment (the one being written only when it is
    /// the last and the log is sealed); answers its bytes (0: none went).
    /// A segment that cannot be deleted stays in the log.
    pub fn drop_oldest(&mut self) -> io::Result<u64> {
        let Some(files) = self.oldest_files() else {
            return Ok(0);
        };
        for file in &files {
            remove_if_there(file)?;
        }
        Ok(self.take_oldest())
    }

    /// The oldest segment's index and data files, index first (a crash
    /// between the two leaves a segment to scan, never an index without
    /// its segment); `None` when it may not go.
    fn oldest_files(&self) -> Option<[PathBuf; 2]> {
        let oldest = self.segments.first()?;
        if self.segments.len() == 1 && self.active.is_some() {
            return None;
        }
        let first = oldest.first_seq;
        Some([self.index_path(first), self.segment_path(first)])
    }

    /// Forgets the oldest segment; answers its bytes.
    fn take_oldest(&mut self) -> u64 {
        let oldest = self.segments.remove(0);
        self.unsynced.retain(|f| *f != oldest.first_seq);
        self.bytes -= oldest.len;
        oldest.len
    }

    /// Lets go of the descriptor and forgets the segments (after the
    /// folder was deleted).
    pub fn close(&mut self, open: &AtomicU64) {
        if let Some(active) = self.active.take() {
            release(active.file, open);
        }
        self.segments.clear();
        self.unsynced.clear();
        self.bytes = 0;
    }
}

fn take_slot(open: &AtomicU64) -> bool {
    open.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
        (n < MAX_OPEN).then_some(n + 1)
    })
    .is_ok()
}

fn release(file: Option<Open>, open: &AtomicU64) {
    if let Some(o) = file {
        if o.counted {
            open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn open_for_append(path: &Path, open: &AtomicU64) -> io::Result<Open> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    Ok(Open {
        file,
        counted: take_slot(open),
    })
}

/// Segment files to sync, taken from a session's log (`unsynced`).
#[derive(Debug, Default)]
pub struct Unsynced {
    /// The segment being written, by a copy of its descriptor...
    open: Option<File>,
    /// ...or by its name, when its descriptor could not be copied.
    active_path: Option<PathBuf>,
    /// Segments sealed since the last sync.
    files: Vec<PathBuf>,
}

impl Unsynced {
    pub fn is_empty(&self) -> bool {
        !self.active() && self.files.is_empty()
    }

    /// The segment being written is among them.
    pub fn active(&self) -> bool {
        self.open.is_some() || self.active_path.is_some()
    }

    /// Syncs every one, the rest too when one fails; answers the first
    /// error.
    pub fn sync(self) -> io::Result<()> {
        let mut result = Ok(());
        let mut keep = |r: io::Result<()>| {
            if let Err(e) = r {
                if result.is_ok() {
                    result = Err(e);
                }
            }
        };
        if let Some(file) = self.open {
            keep(file.sync_data());
        }
        if let Some(path) = self.active_path {
            keep(sync_path(&path).map(drop));
        }
        for path in self.files {
            keep(sync_path(&path).map(|f| f.as_ref().map_or((), uncache)));
        }
        result
    }
}

/// Syncs the segment at `path`: its file, `None` when retention deleted
/// it since (nothing to keep).
fn sync_path(path: &Path) -> io::Result<Option<File>> {
    match File::open(path) {
        Ok(f) => f.sync_data().map(|()| Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Lets the page cache drop a sealed segment, on disk now (synced):
/// output is written once and read back rarely (history pages, grep),
/// so the log does not take a page of fresh memory for every byte the
/// node ever kept. Never the segment being written: its last page,
/// dropped, would be read back from the disk by the next append to it
/// (an echo's frame waited for that read: docs/benchmarks.md, issue 32,
/// twentieth stop).
fn uncache(file: &File) {
    let _ = rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed);
}

/// Makes `dir` (and missing parents) the node user's alone.
pub fn make_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    file.write_all_at(bytes, 0)
}

pub(super) fn remove_if_there(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
