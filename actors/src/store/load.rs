//! What a starting node reads from its store: the previous release's
//! output migrated into the log first (`migrate`), then every session not
//! removed with its newest output, and the seq each continues from: right
//! after its log's last frame when the log is whole (every frame the last
//! run sent is in it: a client resuming there gets every byte, no
//! resync), above the seq high-water mark when it is not (a seq is never
//! given twice).

use std::path::Path;

use termesh_transport::{SessionInfo, SessionStatus};

use super::log::{OutputLog, Recovery};
use super::{Entry, Store, StoreError};

/// A session found in the store at start: its last record, whether it
/// was removed, and the newest output (up to a ring's worth).
#[derive(Debug, Clone)]
pub struct Restored {
    pub info: SessionInfo,
    /// What `revive` runs instead of its command.
    pub resume_command: Option<Vec<String>>,
    /// Its newest output, for its ring: read at start only for a session
    /// that was running; an ended one starts cold and reads it when
    /// first asked for (`cold`), so a node's memory at start does not
    /// grow with the sessions it keeps.
    pub tail: Vec<Entry>,
    pub cold: bool,
    /// Where its seqs continue: above the newest stored frame and above
    /// its high-water mark (seqs that may have been sent unstored).
    pub last_seq: u64,
    /// When its newest stored output was read (unix ms; 0: none).
    pub last_output_ms: u64,
}

/// Migrates what the previous release left, then reads every session not
/// removed with the newest `tail_bytes` of its output.
pub fn load(
    store: &mut Store,
    log: &OutputLog,
    recovery: Recovery,
    journal: &Path,
    tail_bytes: usize,
) -> Result<Vec<Restored>, StoreError> {
    let whole = match super::migrate::migrate(store, log, journal)? {
        Some(migrated) => migrated.whole,
        None => recovery.whole,
    };
    if !whole && recovery.sessions > 0 {
        tracing::warn!(
            "store: the output log may not hold every frame the last run sent (the machine \
             restarted, or a write failed): sessions continue above their seq high-water marks"
        );
    }
    let log_err = |e: std::io::Error| StoreError::Open {
        path: log.dir().display().to_string(),
        cause: e.to_string(),
    };
    let mut out = Vec::new();
    let mut floors = Vec::new();
    for (id, record, removed) in store.records()? {
        if removed {
            continue;
        }
        let Ok(info) = rmp_serde::from_slice::<SessionInfo>(&record) else {
            tracing::warn!(session = %id, "store: a session record that does not decode is skipped");
            continue;
        };
        let resume_command = rmp_serde::from_slice::<Resume>(&record)
            .ok()
            .and_then(|r| r.resume_command);
        let logged = log.last_seq(&id);
        // A log retention emptied (an ended session past the node's
        // budget) no longer says where the seqs stopped: the mark does.
        let last_seq = if whole && logged > 0 {
            logged.max(store.seq_floor(&id)?)
        } else {
            logged.max(store.seq_floor(&id)?).max(store.seq_mark(&id)?)
        };
        // A session that ended keeps no ring in memory until asked for.
        let cold = info.status != SessionStatus::Running;
        let tail = if cold {
            Vec::new()
        } else {
            log.before(&id, u64::MAX, tail_bytes)
                .map_err(log_err)?
                .frames
                .into_iter()
                .map(Entry::from)
                .collect()
        };
        let last_output_ms = log.last_at(&id);
        floors.push((id, last_seq));
        out.push(Restored {
            info,
            resume_command,
            tail,
            cold,
            last_seq,
            last_output_ms,
        });
    }
    let floors: Vec<(&str, u64)> = floors.iter().map(|(id, s)| (id.as_str(), *s)).collect();
    store.set_floors(&floors)?;
    // The floors are on disk before the log says it is whole again.
    store.flush()?;
    if let Err(e) = log.declare_whole() {
        // Output is still logged; a crash of this run just cannot be
        // told from a machine's, so the next start goes above the marks.
        tracing::warn!(dir = %log.dir().display(), "output log: cannot write its LOGGED mark ({e})");
    }
    Ok(out)
}

/// The part of a session's record beside its `SessionInfo`.
#[derive(serde::Deserialize)]
struct Resume {
    #[serde(default)]
    resume_command: Option<Vec<String>>,
}
