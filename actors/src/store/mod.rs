//! The node's store (ARCHITECTURE.md, "Persistence"): output in the
//! output log (`log`: segment files per session, written before a
//! frame's seq is sent), everything else in sled 0.34, which this module
//! owns: the one place that knows its key layouts. `Store` is
//! synchronous; the store actor (`actor`) runs it off the session actors,
//! in batches, and `StoreHandle` (`handle`) is how the rest of the node
//! reaches both.
//!
//! Trees:
//! - `sessions`: session id -> record (bytes the caller encodes), plus a
//!   tombstone mark for removed sessions (`tombstones`: id -> removed at);
//! - `events`: `key(id) ‖ event id (u64 BE)` -> `at ms (u64 BE) ‖ event`;
//! - `event_ids`: id -> the last event id given (u64 BE), so an id is
//!   never given twice, a purge and a restart included;
//! - `seq_marks`: id -> the seq high-water mark (u64 BE): no seq above it
//!   was ever sent, so a restarted node that cannot trust its log's end
//!   continues above it (PROTOCOL.md section 4). A session reserves seqs
//!   in blocks and sends none past the mark on disk; a clean stop lowers
//!   it to the last seq sent.
//! - `seq_floors`: id -> the seq the session continued from at the node's
//!   last start: a restart continues right after the log's last frame
//!   when the log is whole (`log`), and never below this floor (seqs an
//!   earlier start skipped stay skipped).
//! - `output`: only in a data dir of the previous release, which kept
//!   output here (`key(id) ‖ seq` -> `at ms ‖ frame`); `migrate` moves it
//!   into the log at the first start and drops it.
//!
//! `key(id)` is the id's length (one byte) then its bytes, so one
//! session's keys are one contiguous, seq-ordered range.

mod actor;
mod chunks;
mod handle;
pub mod legacy;
mod load;
pub mod log;
mod manifest;
mod migrate;
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
    /// The session the write is for.
    pub fn session(&self) -> &str {
        match self {
            Write::Event { session, .. }
            | Write::Record { session, .. }
            | Write::SeqMark { session, .. }
            | Write::Reserve { session, .. } => session,
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

impl From<log::Frame> for Entry {
    fn from(f: log::Frame) -> Entry {
        Entry {
            n: f.seq,
            at_ms: f.at_ms,
            data: f.data,
        }
    }
}

/// The output log beside the store's directory (`DATA_DIR/output` for
/// the store in `DATA_DIR/store`).
pub fn log_dir(store_dir: &Path) -> PathBuf {
    store_dir.with_file_name("output")
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
    events: sled::Tree,
    last_ids: sled::Tree,
    seq_marks: sled::Tree,
    seq_floors: sled::Tree,
    /// Last event id per session, read from `last_ids` on first use.
    event_ids: HashMap<String, u64>,
    /// Ids with a record on disk (removed ones too), for the manifest.
    known: HashSet<String>,
    /// Sessions removed while this store is open: a write of theirs that
    /// comes after the removal (an event their actor made as it closed)
    /// is dropped, so a purge stays a purge and a tombstone gains nothing.
    gone: HashSet<String>,
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
            events: tree("events")?,
            last_ids: tree("event_ids")?,
            seq_marks: tree("seq_marks")?,
            seq_floors: tree("seq_floors")?,
            event_ids: HashMap::new(),
            known: HashSet::new(),
            gone: HashSet::new(),
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

    /// The previous release's output tree, when this data dir has one
    /// (`migrate`).
    pub fn legacy_output(&self) -> Result<Option<sled::Tree>, StoreError> {
        let found = self.db.tree_names().iter().any(|n| &n[..] == b"output");
        Ok(if found {
            Some(self.db.open_tree("output")?)
        } else {
            None
        })
    }

    /// Drops the previous release's output tree (its frames are in the
    /// log now).
    pub fn drop_legacy_output(&self) -> Result<(), StoreError> {
        self.db.drop_tree("output")?;
        Ok(())
    }

    /// Applies a batch, every tree's part atomically; answers the events
    /// stored, with their ids.
    pub fn apply(&mut self, writes: Vec<Write>) -> Result<Vec<Stored>, StoreError> {
        let mut stored = Vec::new();
        let (mut ev, mut rec, mut ids, mut marks) = (
            sled::Batch::default(),
            sled::Batch::default(),
            sled::Batch::default(),
            sled::Batch::default(),
        );
        for w in writes {
            if self.gone.contains(w.session()) {
                continue;
            }
            match w {
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
        self.apply_all((ev, ids, rec, marks))?;
        Ok(stored)
    }

    /// One transaction over every tree: a crash keeps all of a batch or
    /// none of it (an event never without its id).
    fn apply_all(
        &self,
        (ev, ids, rec, marks): (sled::Batch, sled::Batch, sled::Batch, sled::Batch),
    ) -> Result<(), StoreError> {
        let trees = (
            &self.events,
            &self.last_ids,
            &self.sessions,
            &self.seq_marks,
        );
        use sled::Transactional;
        trees
            .transaction(|(e, i, r, m)| {
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
    pub fn remove(&mut self, session: &str, at_ms: u64) -> Result<(), StoreError> {
        self.tombstones
            .insert(key(session)?, &at_ms.to_be_bytes())?;
        self.gone.insert(session.to_string());
        Ok(())
    }

    /// Wipes a session's events now (its record stays; the caller wipes
    /// its output log).
    pub fn purge(&mut self, session: &str) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for k in self.events.scan_prefix(key(session)?).keys() {
            batch.remove(k?);
        }
        self.events.apply_batch(batch)?;
        // Event ids keep counting: an id is never reused.
        Ok(())
    }

    /// Trims every session's events to `keep`, and drops removed
    /// sessions whole. Answers the events deleted and the sessions
    /// dropped (whose output log the caller deletes).
    pub fn vacuum(
        &mut self,
        now_ms: u64,
        keep: Retention,
    ) -> Result<(u64, Vec<String>), StoreError> {
        let mut deleted = 0;
        let mut dropped = Vec::new();
        for (id, _, removed) in self.records()? {
            if removed {
                deleted += self.events.scan_prefix(key(&id)?).count() as u64;
                self.purge(&id)?;
                let k = key(&id)?;
                self.sessions.remove(&k)?;
                self.known.remove(&id);
                self.tombstones.remove(&k)?;
                self.last_ids.remove(&k)?;
                self.seq_marks.remove(&k)?;
                self.seq_floors.remove(&k)?;
                self.event_ids.remove(&id);
                self.gone.remove(&id);
                dropped.push(id);
                continue;
            }
            deleted += self.trim(&id, now_ms, keep)?;
        }
        Ok((deleted, dropped))
    }

    /// Oldest events past the count or age.
    fn trim(&mut self, session: &str, now_ms: u64, keep: Retention) -> Result<u64, StoreError> {
        let mut batch = sled::Batch::default();
        let mut deleted = 0;
        for (i, item) in self.events.scan_prefix(key(session)?).rev().enumerate() {
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
