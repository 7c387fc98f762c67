//! The first start on a data dir of the previous release: its output
//! (sled's `output` tree, and the journal's frames the store had not
//! written) moves into the output log, session by session, with a
//! progress line; then the tree is dropped and the journal deleted. An
//! interrupted migration resumes where it stopped: each session goes on
//! after its log's last seq, and the old tree and journal stay until
//! every session is in the log.

use std::path::Path;
use std::time::{Duration, Instant};

use super::legacy::{self, Replay};
use super::log::OutputLog;
use super::{Store, StoreError};

/// A progress line at most this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// What a migration did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    pub sessions: usize,
    pub frames: u64,
    pub bytes: u64,
    /// The journal was whole: every frame the previous run sent is in
    /// the log now, so seqs continue right after it.
    pub whole: bool,
}

/// Migrates the previous release's output in `store` (and the journal at
/// `journal`) into `log`; `None` when there was none to migrate.
pub fn migrate(
    store: &Store,
    log: &OutputLog,
    journal: &Path,
) -> Result<Option<Migrated>, StoreError> {
    let tree = store.legacy_output()?;
    if tree.is_none() && !journal.exists() {
        return Ok(None);
    }
    let open_err = |e: std::io::Error| StoreError::Open {
        path: journal.display().to_string(),
        cause: e.to_string(),
    };
    let replay = legacy::read_journal(journal).map_err(open_err)?;
    let started = Instant::now();
    let mut said = Instant::now();
    let mut done = Migrated {
        whole: replay.complete,
        ..Migrated::default()
    };
    let ids: Vec<String> = store.records()?.into_iter().map(|(id, _, _)| id).collect();
    let total = ids.len();
    tracing::info!(
        sessions = total,
        "store: moving the previous release's output into the output log"
    );
    for (n, id) in ids.iter().enumerate() {
        let mut next = log.last_seq(id);
        if let Some(tree) = &tree {
            for item in tree.range(super::numbered(id, next.saturating_add(1))?..) {
                let (k, v) = item?;
                let prefix = super::key(id)?;
                if !k.starts_with(&prefix) || k.len() != prefix.len() + 8 {
                    break;
                }
                if v.len() < 8 {
                    // Damaged: no stamp. Skipped, said.
                    tracing::warn!(session = %id, "store: a stored frame without its stamp is skipped");
                    continue;
                }
                let e = super::entry(&k, v);
                append(log, id, e.n, e.at_ms, &e.data, &mut done).map_err(open_err)?;
                next = e.n;
                if said.elapsed() >= PROGRESS_EVERY {
                    said = Instant::now();
                    progress(n, total, &done, started);
                }
            }
        }
        done.whole &= from_journal(log, id, next, &replay, &mut done).map_err(open_err)?;
        done.sessions += 1;
    }
    // What moved is on disk before the old copies go.
    log.sync().map_err(open_err)?;
    if tree.is_some() {
        store.drop_legacy_output()?;
        store.flush()?;
    }
    match std::fs::remove_file(journal) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(open_err(e)),
        _ => {}
    }
    progress(total, total, &done, started);
    Ok(Some(done))
}

/// The journal's frames of `id` after `after`, in order; answers whether
/// they followed without a hole (a hole: the previous run sent seqs it
/// never wrote down, so a restart must go above the high-water mark).
fn from_journal(
    log: &OutputLog,
    id: &str,
    after: u64,
    replay: &Replay,
    done: &mut Migrated,
) -> std::io::Result<bool> {
    let mut next = after + 1;
    for frame in replay.frames.get(id).into_iter().flatten() {
        if frame.seq < next {
            continue;
        }
        if frame.seq > next {
            tracing::warn!(
                session = id,
                "store: the journal misses seqs {next}..{}: seqs continue above the high-water mark",
                frame.seq - 1
            );
            return Ok(false);
        }
        append(log, id, frame.seq, frame.at_ms, &frame.data, done)?;
        next += 1;
    }
    Ok(true)
}

fn append(
    log: &OutputLog,
    id: &str,
    seq: u64,
    at_ms: u64,
    data: &[u8],
    done: &mut Migrated,
) -> std::io::Result<()> {
    log.append(id, seq, at_ms, data)?;
    done.frames += 1;
    done.bytes += data.len() as u64;
    Ok(())
}

fn progress(n: usize, total: usize, done: &Migrated, started: Instant) {
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    tracing::info!(
        "store: migrating output: {n} of {total} sessions, {:.1} MB in {:.1} s ({:.0} MB/s)",
        done.bytes as f64 / 1e6,
        secs,
        done.bytes as f64 / 1e6 / secs
    );
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;
    use crate::store::legacy::{write_data_dir, OldSession};
    use crate::store::log::Frame;

    fn frames(seqs: std::ops::RangeInclusive<u64>) -> Vec<Frame> {
        seqs.map(|seq| Frame {
            seq,
            at_ms: 1000 + seq,
            data: Bytes::from(format!("line {seq}\r\n")),
        })
        .collect()
    }

    fn fixture(dir: &Path) -> Vec<OldSession> {
        let sessions = vec![
            OldSession {
                id: "aaa".into(),
                record: b"r".to_vec(),
                stored: frames(1..=500),
                journaled: frames(480..=520),
                mark: 640,
            },
            OldSession {
                id: "bbb".into(),
                record: b"r".to_vec(),
                stored: frames(1..=10),
                // Seq 12 without 11: the journal has a hole.
                journaled: frames(12..=12),
                mark: 64,
            },
        ];
        write_data_dir(&dir.join("store"), &sessions).unwrap();
        sessions
    }

    #[test]
    fn the_previous_format_moves_into_the_log_and_resumes_if_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        fixture(dir.path());
        let store_dir = dir.path().join("store");
        let journal = legacy::journal_path(&store_dir);
        let out = dir.path().join("output");
        // An interrupted first try: half of a's frames already moved.
        {
            let (log, _) = OutputLog::open(&out, 4 << 10, u64::MAX, Arc::default()).unwrap();
            for f in frames(1..=250) {
                log.append("aaa", f.seq, f.at_ms, &f.data).unwrap();
            }
        }
        let store = Store::open(&store_dir).unwrap();
        let (log, _) = OutputLog::open(&out, 4 << 10, u64::MAX, Arc::default()).unwrap();
        let done = migrate(&store, &log, &journal).unwrap().unwrap();
        assert_eq!(done.sessions, 2);
        assert_eq!(done.frames, 270 + 10, "a's rest and b's stored frames");
        assert!(!done.whole, "b's journal has a hole");
        let got: Vec<Frame> = log.after("aaa", 0, usize::MAX).unwrap();
        assert_eq!(got, frames(1..=520), "every frame once, in order");
        let got = log.after("bbb", 0, usize::MAX).unwrap();
        assert_eq!(got, frames(1..=10));
        // The old copies are gone; a second start migrates nothing.
        assert!(store.legacy_output().unwrap().is_none());
        assert!(!journal.exists());
        assert_eq!(migrate(&store, &log, &journal).unwrap(), None);
    }
}
