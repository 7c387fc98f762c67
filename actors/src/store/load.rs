//! What a starting node reads from its store: the output journal replayed
//! into the store first (frames a kill -9 caught before the store wrote
//! them), then every session not removed with its newest output, and the
//! seq each continues from: right after the last one sent when the journal
//! is whole (so a client resuming there gets every byte, no resync), above
//! the seq high-water mark when it is not (a seq is never given twice).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use termesh_transport::SessionInfo;

use super::handle::Restored;
use super::journal::{Frame, Journal, Replay};
use super::{Store, StoreError, Write};

/// The journal beside the store's directory.
pub fn journal_path(store_dir: &Path) -> PathBuf {
    let name = store_dir
        .file_name()
        .map_or_else(|| "store".into(), |n| n.to_string_lossy().into_owned());
    store_dir.with_file_name(format!("{name}.journal"))
}

/// Replays the journal at `journal` into `store`, then reads every
/// session not removed with the newest `tail_bytes` of its output.
pub fn load(
    store: &mut Store,
    journal: &Path,
    tail_bytes: usize,
) -> Result<Vec<Restored>, StoreError> {
    let replay = Journal::read(journal).map_err(|e| StoreError::Open {
        path: journal.display().to_string(),
        cause: e.to_string(),
    })?;
    let mut out = Vec::new();
    let mut floors = Vec::new();
    let mut replayed = 0usize;
    for (id, record, removed) in store.records()? {
        if removed {
            continue;
        }
        let Ok(info) = rmp_serde::from_slice::<SessionInfo>(&record) else {
            tracing::warn!(session = %id, "store: a session record that does not decode is skipped");
            continue;
        };
        let (frames, whole) = missing(store, &id, &replay)?;
        replayed += frames.len();
        if !frames.is_empty() {
            let session: Arc<str> = id.as_str().into();
            store.apply(
                frames
                    .into_iter()
                    .map(|f| Write::Output {
                        session: session.clone(),
                        seq: f.seq,
                        at_ms: f.at_ms,
                        data: f.data,
                    })
                    .collect(),
            )?;
        }
        let stored = store.last_seq(&id)?;
        let last_seq = if whole {
            stored.max(store.seq_floor(&id)?)
        } else {
            stored.max(store.seq_mark(&id)?)
        };
        let tail = store.output_tail(&id, tail_bytes)?;
        floors.push((id, last_seq));
        out.push(Restored {
            info,
            tail,
            last_seq,
        });
    }
    let floors: Vec<(&str, u64)> = floors.iter().map(|(id, s)| (id.as_str(), *s)).collect();
    store.set_floors(&floors)?;
    // What was replayed and the floors are on disk before the journal
    // that held them is emptied.
    store.flush()?;
    if replayed > 0 {
        tracing::info!(
            frames = replayed,
            "store: output the last run read but had not stored was replayed from the journal"
        );
    }
    Ok(out)
}

/// The journal's frames of `id` the store lacks, and whether the journal
/// accounts for every seq sent (it is whole and its frames follow the
/// store's without a hole).
fn missing(store: &Store, id: &str, replay: &Replay) -> Result<(Vec<Frame>, bool), StoreError> {
    // After the floor an earlier start continued from (its frames may not
    // have reached the store yet).
    let mut next = store.last_seq(id)?.max(store.seq_floor(id)?) + 1;
    let mut frames = Vec::new();
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
            return Ok((frames, false));
        }
        frames.push(frame.clone());
        next += 1;
    }
    Ok((frames, replay.complete))
}
