//! The node's store over sled 0.34 (ARCHITECTURE.md, "Persistence"): the
//! one module that knows the key layouts. It is synchronous; the store
//! actor (`actor`) runs it off the session actors, in batches, and
//! `StoreHandle` (`handle`) is how the rest of the node reaches it.
//!
//! Trees:
//! - `sessions`: session id -> record (bytes the caller encodes), plus a
//!   tombstone mark for removed sessions (`tombstones`: id -> removed at);
//! - `output`: `key(id) ‖ seq (u64 BE)` -> `stored at ms (u64 BE) ‖ frame`;
//! - `events`: `key(id) ‖ event id (u64 BE)` -> `at ms (u64 BE) ‖ event`;
//! - `event_ids`: id -> the last event id given (u64 BE), so an id is
//!   never given twice, a purge and a restart included;
//! - `seq_marks`: id -> the seq high-water mark (u64 BE): no seq above it
//!   was ever sent, so a restarted node continues above it (PROTOCOL.md
//!   section 4). A session reserves seqs in blocks and sends none past the
//!   mark on disk; a clean stop lowers it to the last seq sent.
//!
//! - `seq_floors`: id -> the seq the session continued from at the node's
//!   last start: with a whole journal (`journal`) a restart continues
//!   above the last seq sent, and never below this floor (seqs an earlier
//!   start skipped stay skipped).
//!
//! `key(id)` is the id's length (one byte) then its bytes, so one
//! session's keys are one contiguous, seq-ordered range.

mod actor;
mod chunks;
mod handle;
pub mod journal;
mod load;
pub mod log;
mod manifest;
#[cfg(test)]
mod tests;

pub use actor::{LiveEvent, StoreActor};
pub use handle::{Restored, StoreHandle};

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

/// Session ids are short (the node makes 12 hex digits); this bounds what
/// a key may hold.
pub const MAX_ID: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the store at {path} is in use by another process (is a node already running on this data dir?)")]
    Locked { path: String },
    #[error("the store at {path} cannot be opened: {cause}")]
    Open { path: String, cause: String },
    #[error(
        "the store at {path} has lost data: {expected} session records were written to it \
         and {found} can be read back (its files are damaged); move the directory aside to \
         start with an empty store"
    )]
    Damaged {
        path: String,
        expected: u64,
        found: u64,
    },
    #[error("session id {0:?} is not a valid store key")]
    BadId(String),
    #[error("store: {0}")]
    Sled(#[from] sled::Error),
}

/// One write of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    Output {
        session: Arc<str>,
        seq: u64,
        at_ms: u64,
        data: Bytes,
    },
    /// Gets the session's next event id.
    Event {
        session: Arc<str>,
        at_ms: u64,
        data: Bytes,
    },
    Record {
        session: Arc<str>,
        data: Bytes,
    },
    /// The session's seq high-water mark (written as given: a clean stop
    /// lowers it to the last seq sent).
    SeqMark {
        session: Arc<str>,
        seq: u64,
    },
    /// Raises the session's seq high-water mark to `seq` (never lowers it):
    /// a reservation, durable at the flush that follows.
    Reserve {
        session: Arc<str>,
        seq: u64,
    },
}

impl Write {
    /// The output bytes it carries (0 for anything but output).
    pub fn output_len(&self) -> usize {
        match self {
            Write::Output { data, .. } => data.len(),
            _ => 0,
        }
    }
}

/// A stored frame or event: its number (seq or event id), when it was
/// stored, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub n: u64,
    pub at_ms: u64,
    pub data: Bytes,
}

impl Entry {
    /// A stored event as clients see it: its JSON object with `id` and
    /// `ts` (unix ms) added.
    pub fn event_json(&self) -> serde_json::Value {
        let mut v = serde_json::from_slice::<serde_json::Value>(&self.data)
            .ok()
            .filter(|v| v.is_object())
            .unwrap_or_else(|| serde_json::json!({ "kind": "unreadable" }));
        if let Some(map) = v.as_object_mut() {
            map.insert("id".into(), self.n.into());
            map.insert("ts".into(), self.at_ms.into());
        }
        v
    }
}

/// What the vacuum keeps.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub output_bytes: u64,
    pub event_age_ms: u64,
    pub events: usize,
}

pub struct Store {
    path: PathBuf,
    db: sled::Db,
    sessions: sled::Tree,
    tombstones: sled::Tree,
    output: sled::Tree,
    events: sled::Tree,
    last_ids: sled::Tree,
    seq_marks: sled::Tree,
    seq_floors: sled::Tree,
    /// Last event id per session, read from `last_ids` on first use.
    event_ids: HashMap<String, u64>,
    /// Output kept per session: past it by an eighth, the oldest frames
    /// go at once (not only at the vacuum), so the cap holds under a flood.
    output_cap: u64,
    /// Output bytes stored per session, counted on first use.
    output_bytes: HashMap<String, u64>,
    /// Ids with a record on disk (removed ones too), for the manifest.
    known: HashSet<String>,
    manifest: PathBuf,
}

/// An event `apply` stored: its session and the id it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub session: Arc<str>,
    pub entry: Entry,
}

fn key(id: &str) -> Result<Vec<u8>, StoreError> {
    if id.is_empty() || id.len() > MAX_ID {
        return Err(StoreError::BadId(id.to_string()));
    }
    let mut k = Vec::with_capacity(1 + id.len() + 8);
    k.push(id.len() as u8);
    k.extend_from_slice(id.as_bytes());
    Ok(k)
}

fn numbered(id: &str, n: u64) -> Result<Vec<u8>, StoreError> {
    let mut k = key(id)?;
    k.extend_from_slice(&n.to_be_bytes());
    Ok(k)
}

fn number_of(k: &[u8]) -> u64 {
    let tail: [u8; 8] = k[k.len() - 8..].try_into().expect("8 bytes");
    u64::from_be_bytes(tail)
}

fn stamped(at_ms: u64, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + data.len());
    v.extend_from_slice(&at_ms.to_be_bytes());
    v.extend_from_slice(data);
    v
}

fn entry(k: &[u8], v: sled::IVec) -> Entry {
    let at: [u8; 8] = v[..8].try_into().expect("stamped values");
    Entry {
        n: number_of(k),
        at_ms: u64::from_be_bytes(at),
        data: Bytes::copy_from_slice(&v[8..]),
    }
}

impl Store {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        let path = dir.to_path_buf();
        let shown = path.display().to_string();
        let db = sled::Config::new().path(&path).open().map_err(|e| {
            let cause = e.to_string();
            if cause.contains("lock") || cause.contains("WouldBlock") {
                StoreError::Locked {
                    path: shown.clone(),
                }
            } else {
                StoreError::Open {
                    path: shown.clone(),
                    cause,
                }
            }
        })?;
        let tree = |name: &str| db.open_tree(name);
        let mut store = Store {
            sessions: tree("sessions")?,
            tombstones: tree("tombstones")?,
            output: tree("output")?,
            events: tree("events")?,
            last_ids: tree("event_ids")?,
            seq_marks: tree("seq_marks")?,
            seq_floors: tree("seq_floors")?,
            event_ids: HashMap::new(),
            output_cap: u64::MAX,
            output_bytes: HashMap::new(),
            known: HashSet::new(),
            manifest: manifest::path_for(&path),
            db,
            path,
        };
        store.known = store.records()?.into_iter().map(|(id, _, _)| id).collect();
        let found = store.known.len() as u64;
        match manifest::read(&store.manifest) {
            Some(expected) if found < expected => Err(StoreError::Damaged {
                path: shown,
                expected,
                found,
            }),
            _ => Ok(store),
        }
    }

    /// Records the session records on disk now (call after a flush).
    pub fn write_manifest(&self) -> Result<(), StoreError> {
        manifest::write(&self.manifest, self.known.len() as u64).map_err(|e| StoreError::Open {
            path: self.manifest.display().to_string(),
            cause: format!("cannot write the manifest: {e}"),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Output kept per session from now on (the vacuum uses its own).
    pub fn set_output_cap(&mut self, bytes: u64) {
        self.output_cap = bytes;
    }

    /// Applies a batch, every tree's part atomically; answers the events
    /// stored, with their ids. A session whose output went past its cap
    /// by an eighth is trimmed to the cap, oldest frames first.
    pub fn apply(&mut self, writes: Vec<Write>) -> Result<Vec<Stored>, StoreError> {
        let mut stored = Vec::new();
        let mut grew: Vec<(Arc<str>, u64)> = Vec::new();
        let (mut out, mut ev, mut rec, mut ids, mut marks) = (
            sled::Batch::default(),
            sled::Batch::default(),
            sled::Batch::default(),
            sled::Batch::default(),
            sled::Batch::default(),
        );
        let only_output = writes.iter().all(|w| matches!(w, Write::Output { .. }));
        for w in writes {
            match w {
                Write::Output {
                    session,
                    seq,
                    at_ms,
                    data,
                } => {
                    out.insert(numbered(&session, seq)?, stamped(at_ms, &data));
                    match grew.iter_mut().find(|(s, _)| *s == session) {
                        Some((_, n)) => *n += data.len() as u64,
                        None => grew.push((session, data.len() as u64)),
                    }
                }
                Write::Event {
                    session,
                    at_ms,
                    data,
                } => {
                    let n = self.last_event_id(&session)? + 1;
                    self.event_ids.insert(session.to_string(), n);
                    ev.insert(numbered(&session, n)?, stamped(at_ms, &data));
                    ids.insert(key(&session)?, &n.to_be_bytes());
                    stored.push(Stored {
                        session,
                        entry: Entry { n, at_ms, data },
                    });
                }
                Write::Record { session, data } => {
                    rec.insert(key(&session)?, data.to_vec());
                    self.known.insert(session.to_string());
                }
                Write::SeqMark { session, seq } => {
                    marks.insert(key(&session)?, &seq.to_be_bytes());
                }
                Write::Reserve { session, seq } => {
                    let k = key(&session)?;
                    let old = self.seq_marks.get(&k)?.map_or(0, |v| number_of(&v));
                    if seq > old {
                        marks.insert(k, &seq.to_be_bytes());
                    }
                }
            }
        }
        // Output alone (what a busy node writes nearly every time) needs
        // one tree: its batch is atomic by itself, at a fraction of a
        // transaction's cost (tens of microseconds a frame less, on the
        // thread a keystroke's echo may be queued behind).
        if only_output {
            self.output.apply_batch(out)?;
        } else {
            self.apply_all((out, ev, ids, rec, marks))?;
        }
        if self.output_cap != u64::MAX {
            for (session, added) in grew {
                self.count_output(&session, added)?;
            }
        }
        Ok(stored)
    }

    /// One transaction over every tree: a crash keeps all of a batch or
    /// none of it (an event never without its id, a record never without
    /// the output it describes).
    fn apply_all(
        &self,
        (out, ev, ids, rec, marks): (
            sled::Batch,
            sled::Batch,
            sled::Batch,
            sled::Batch,
            sled::Batch,
        ),
    ) -> Result<(), StoreError> {
        let trees = (
            &self.output,
            &self.events,
            &self.last_ids,
            &self.sessions,
            &self.seq_marks,
        );
        use sled::Transactional;
        trees
            .transaction(|(o, e, i, r, m)| {
                o.apply_batch(&out)?;
                e.apply_batch(&ev)?;
                i.apply_batch(&ids)?;
                r.apply_batch(&rec)?;
                m.apply_batch(&marks)?;
                Ok::<_, sled::transaction::ConflictableTransactionError<()>>(())
            })
            .map_err(|e| match e {
                sled::transaction::TransactionError::Storage(e) => StoreError::Sled(e),
                sled::transaction::TransactionError::Abort(()) => {
                    StoreError::Sled(sled::Error::ReportableBug("batch aborted".into()))
                }
            })?;
        Ok(())
    }

    /// Adds `added` to what `session` stores; trims past the cap.
    fn count_output(&mut self, session: &str, added: u64) -> Result<(), StoreError> {
        let total = match self.output_bytes.get_mut(session) {
            Some(n) => {
                *n += added;
                *n
            }
            None => {
                let mut n = 0u64;
                for v in self.output.scan_prefix(key(session)?).values() {
                    n += (v?.len() - 8) as u64;
                }
                self.output_bytes.insert(session.to_string(), n);
                n
            }
        };
        if total <= self.output_cap.saturating_add(self.output_cap / 8) {
            return Ok(());
        }
        let excess = total - self.output_cap;
        let mut freed = 0u64;
        let mut batch = sled::Batch::default();
        for item in self.output.scan_prefix(key(session)?) {
            if freed >= excess {
                break;
            }
            let (k, v) = item?;
            freed += (v.len() - 8) as u64;
            batch.remove(k);
        }
        self.output.apply_batch(batch)?;
        self.output_bytes.insert(session.to_string(), total - freed);
        Ok(())
    }

    fn last_event_id(&mut self, session: &str) -> Result<u64, StoreError> {
        if let Some(n) = self.event_ids.get(session) {
            return Ok(*n);
        }
        let n = self
            .last_ids
            .get(key(session)?)?
            .map_or(0, |v| number_of(&v));
        self.event_ids.insert(session.to_string(), n);
        Ok(n)
    }

    /// Every session record, removed ones included (with their mark).
    pub fn records(&self) -> Result<Vec<(String, Bytes, bool)>, StoreError> {
        let mut all = Vec::new();
        for item in self.sessions.iter() {
            let (k, v) = item?;
            let id = String::from_utf8_lossy(&k[1..]).into_owned();
            let removed = self.tombstones.contains_key(&k)?;
            all.push((id, Bytes::copy_from_slice(&v), removed));
        }
        Ok(all)
    }

    /// The seq high-water mark of a session (0: none written).
    pub fn seq_mark(&self, session: &str) -> Result<u64, StoreError> {
        Ok(self
            .seq_marks
            .get(key(session)?)?
            .map_or(0, |v| number_of(&v)))
    }

    /// The seq the session continued from at the node's last start (0:
    /// none).
    pub fn seq_floor(&self, session: &str) -> Result<u64, StoreError> {
        Ok(self
            .seq_floors
            .get(key(session)?)?
            .map_or(0, |v| number_of(&v)))
    }

    /// Records where each session continues from at this start (written
    /// with the next flush).
    pub fn set_floors(&self, floors: &[(&str, u64)]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for (session, seq) in floors {
            batch.insert(key(session)?, &seq.to_be_bytes());
        }
        Ok(self.seq_floors.apply_batch(batch)?)
    }

    /// The newest stored seq of a session (0: none).
    pub fn last_seq(&self, session: &str) -> Result<u64, StoreError> {
        Ok(self
            .output
            .scan_prefix(key(session)?)
            .next_back()
            .transpose()?
            .map_or(0, |(k, _)| number_of(&k)))
    }

    /// Frames after `after`, oldest first, up to `max_bytes` of data (at
    /// least one frame when there is one).
    pub fn output_after(
        &self,
        session: &str,
        after: u64,
        max_bytes: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let from = numbered(session, after.saturating_add(1))?;
        let prefix = key(session)?;
        let mut out = Vec::new();
        let mut bytes = 0;
        for item in self.output.range(from..) {
            let (k, v) = item?;
            if !k.starts_with(&prefix) || k.len() != prefix.len() + 8 {
                break;
            }
            if !out.is_empty() && bytes + v.len() - 8 > max_bytes {
                break;
            }
            bytes += v.len() - 8;
            out.push(entry(&k, v));
        }
        Ok(out)
    }

    /// The newest frames holding at most `max_bytes` of data (at least
    /// the newest frame), oldest first.
    pub fn output_tail(&self, session: &str, max_bytes: usize) -> Result<Vec<Entry>, StoreError> {
        let mut out = Vec::new();
        let mut bytes = 0;
        for item in self.output.scan_prefix(key(session)?).rev() {
            let (k, v) = item?;
            if !out.is_empty() && bytes + v.len() - 8 > max_bytes {
                break;
            }
            bytes += v.len() - 8;
            out.push(entry(&k, v));
        }
        out.reverse();
        Ok(out)
    }

    /// Events after `after`, oldest first, at most `limit`.
    pub fn events_after(
        &self,
        session: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let from = numbered(session, after.saturating_add(1))?;
        let prefix = key(session)?;
        let mut out = Vec::new();
        for item in self.events.range(from..) {
            let (k, v) = item?;
            if !k.starts_with(&prefix) || k.len() != prefix.len() + 8 || out.len() >= limit {
                break;
            }
            out.push(entry(&k, v));
        }
        Ok(out)
    }

    /// Marks a session removed: hidden, its data kept until vacuum or purge.
    pub fn remove(&self, session: &str, at_ms: u64) -> Result<(), StoreError> {
        self.tombstones
            .insert(key(session)?, &at_ms.to_be_bytes())?;
        Ok(())
    }

    /// Wipes a session's output and events now (its record stays).
    pub fn purge(&mut self, session: &str) -> Result<(), StoreError> {
        let prefix = key(session)?;
        for tree in [&self.output, &self.events] {
            let mut batch = sled::Batch::default();
            for k in tree.scan_prefix(&prefix).keys() {
                batch.remove(k?);
            }
            tree.apply_batch(batch)?;
        }
        self.output_bytes.remove(session);
        // Event ids keep counting: an id is never reused.
        Ok(())
    }

    /// Trims every session to `keep`, and drops removed sessions whole.
    /// Returns the entries deleted.
    pub fn vacuum(&mut self, now_ms: u64, keep: Retention) -> Result<u64, StoreError> {
        let mut deleted = 0;
        for (id, _, removed) in self.records()? {
            if removed {
                deleted += self.count(&id)?;
                self.purge(&id)?;
                let k = key(&id)?;
                self.sessions.remove(&k)?;
                self.known.remove(&id);
                self.tombstones.remove(&k)?;
                self.last_ids.remove(&k)?;
                self.seq_marks.remove(&k)?;
                self.seq_floors.remove(&k)?;
                self.event_ids.remove(&id);
                continue;
            }
            deleted += self.trim(&id, now_ms, keep)?;
        }
        // Counted afresh on the next write.
        self.output_bytes.clear();
        Ok(deleted)
    }

    fn count(&self, session: &str) -> Result<u64, StoreError> {
        let prefix = key(session)?;
        Ok(
            (self.output.scan_prefix(&prefix).count() + self.events.scan_prefix(&prefix).count())
                as u64,
        )
    }

    /// Oldest output past the byte cap, oldest events past the count or age.
    fn trim(&mut self, session: &str, now_ms: u64, keep: Retention) -> Result<u64, StoreError> {
        let prefix = key(session)?;
        let mut batch = sled::Batch::default();
        let mut deleted = 0;
        let mut bytes = 0u64;
        for item in self.output.scan_prefix(&prefix).rev() {
            let (k, v) = item?;
            bytes += (v.len() - 8) as u64;
            if bytes > keep.output_bytes {
                batch.remove(k);
                deleted += 1;
            }
        }
        self.output.apply_batch(batch)?;
        let mut batch = sled::Batch::default();
        for (i, item) in self.events.scan_prefix(&prefix).rev().enumerate() {
            let (k, v) = item?;
            let at = entry(&k, v).at_ms;
            if i >= keep.events || now_ms.saturating_sub(at) > keep.event_age_ms {
                batch.remove(k);
                deleted += 1;
            }
        }
        self.events.apply_batch(batch)?;
        Ok(deleted)
    }

    /// Everything written is on disk.
    pub fn flush(&self) -> Result<usize, StoreError> {
        Ok(self.db.flush()?)
    }

    /// Bytes the store takes on disk.
    pub fn size_on_disk(&self) -> Result<u64, StoreError> {
        Ok(self.db.size_on_disk()?)
    }
}
