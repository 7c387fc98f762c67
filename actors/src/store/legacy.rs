//! The previous release's output format, read once to migrate it
//! (`migrate`): output frames in sled's `output` tree and, beside the
//! store, `store.journal`, where every frame was written before its seq
//! was sent (a header, then two halves of records, each half ended by a
//! zero length). Also writes a data dir in that format, for the tests
//! that check the migration (`write_data_dir`).
//!
//! Journal record: length (u32 LE, of what follows the checksum), CRC-32
//! (u32 LE), seq (u64 LE), stored-at ms (u64 LE), id length (u8), id,
//! data.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::log::view::read_up_to;
use super::log::Frame;

const MAGIC: &[u8; 8] = b"TMJRNL01";
const HEADER: u64 = 4096;
/// Bytes per half, as the previous release wrote them.
const HALF: u64 = 16 << 20;
/// Fixed part of a record before the id: length, crc, seq, at ms, id length.
const FIXED: usize = 4 + 4 + 8 + 8 + 1;

/// What a journal held.
#[derive(Debug, Default)]
pub struct Replay {
    /// The journal existed and was whole: every frame sent since it began
    /// is in it or in the store.
    pub complete: bool,
    /// Frames by session, oldest first.
    pub frames: HashMap<String, Vec<Frame>>,
}

/// The journal beside the store's directory.
pub fn journal_path(store_dir: &Path) -> PathBuf {
    let name = store_dir
        .file_name()
        .map_or_else(|| "store".into(), |n| n.to_string_lossy().into_owned());
    store_dir.with_file_name(format!("{name}.journal"))
}

/// Reads the journal at `path` (none there: an empty, incomplete replay).
pub fn read_journal(path: &Path) -> std::io::Result<Replay> {
    let Ok(file) = File::open(path) else {
        return Ok(Replay::default());
    };
    let mut header = [0u8; 40];
    if file.read_exact_at(&mut header, 0).is_err() || &header[..8] != MAGIC {
        return Ok(Replay::default());
    }
    let half = u64::from_le_bytes(header[8..16].try_into().unwrap_or_default());
    if half != HALF {
        return Ok(Replay::default());
    }
    let generations = [0, 1].map(|i| {
        let at = 16 + 8 * i;
        u64::from_le_bytes(header[at..at + 8].try_into().unwrap_or_default())
    });
    let overwritten = header[32..40] != [0u8; 8];
    let mut replay = Replay {
        complete: !overwritten,
        frames: HashMap::new(),
    };
    let mut order = [0usize, 1];
    order.sort_by_key(|i| generations[*i]);
    for i in order {
        let mut bytes = vec![0u8; half as usize];
        let got = read_up_to(&file, &mut bytes, HEADER + i as u64 * half)?;
        bytes.truncate(got);
        for (id, frame) in records(&bytes) {
            replay.frames.entry(id).or_default().push(frame);
        }
    }
    for frames in replay.frames.values_mut() {
        frames.sort_by_key(|f| f.seq);
        frames.dedup_by_key(|f| f.seq);
    }
    Ok(replay)
}

/// The records of one half, up to its end mark (or the first record that
/// does not check).
fn records(bytes: &[u8]) -> Vec<(String, Frame)> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default()) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap_or_default());
        let body = at + 8;
        if len < FIXED - 8 || body + len > bytes.len() {
            break;
        }
        let record = &bytes[body..body + len];
        if crc32fast::hash(record) != crc {
            break;
        }
        let seq = u64::from_le_bytes(record[..8].try_into().unwrap_or_default());
        let at_ms = u64::from_le_bytes(record[8..16].try_into().unwrap_or_default());
        let id_len = record[16] as usize;
        if 17 + id_len > record.len() {
            break;
        }
        let id = String::from_utf8_lossy(&record[17..17 + id_len]).into_owned();
        let data = Bytes::copy_from_slice(&record[17 + id_len..]);
        out.push((id, Frame { seq, at_ms, data }));
        at = body + len;
    }
    out
}

/// One session of a data dir in the previous format.
#[derive(Debug, Clone)]
pub struct OldSession {
    pub id: String,
    /// Its record, as the store keeps it (`rmp_serde` of `SessionInfo`).
    pub record: Vec<u8>,
    /// Frames in sled's output tree.
    pub stored: Vec<Frame>,
    /// Frames only in the journal (a kill -9 before the store wrote them).
    pub journaled: Vec<Frame>,
    /// Its seq high-water mark.
    pub mark: u64,
}

/// Writes a store in `store_dir` and its journal as the previous release
/// did: the fixture the migration's tests start from.
pub fn write_data_dir(store_dir: &Path, sessions: &[OldSession]) -> std::io::Result<()> {
    // No background flusher; sled's I/O threads may still hold the
    // database (and its lock) a moment after it is dropped: waited for
    // below, so the store opened next never finds it locked.
    let db = sled::Config::new()
        .path(store_dir)
        .flush_every_ms(None)
        .open()
        .map_err(std::io::Error::other)?;
    let tree = |name: &str| db.open_tree(name).map_err(std::io::Error::other);
    let (records, output, marks) = (tree("sessions")?, tree("output")?, tree("seq_marks")?);
    let mut journal = Vec::new();
    for s in sessions {
        let k = super::key(&s.id).map_err(std::io::Error::other)?;
        records
            .insert(&k, s.record.clone())
            .map_err(std::io::Error::other)?;
        marks
            .insert(&k, &s.mark.to_be_bytes())
            .map_err(std::io::Error::other)?;
        for f in &s.stored {
            let mut key = k.clone();
            key.extend_from_slice(&f.seq.to_be_bytes());
            output
                .insert(key, super::stamped(f.at_ms, &f.data))
                .map_err(std::io::Error::other)?;
        }
        for f in &s.journaled {
            let mut rec = Vec::new();
            rec.extend_from_slice(&f.seq.to_le_bytes());
            rec.extend_from_slice(&f.at_ms.to_le_bytes());
            rec.push(s.id.len() as u8);
            rec.extend_from_slice(s.id.as_bytes());
            rec.extend_from_slice(&f.data);
            journal.extend_from_slice(&(rec.len() as u32).to_le_bytes());
            journal.extend_from_slice(&crc32fast::hash(&rec).to_le_bytes());
            journal.extend_from_slice(&rec);
        }
    }
    db.flush().map_err(std::io::Error::other)?;
    drop((records, output, marks, db));
    wait_unlocked(&store_dir.join("db"))?;
    journal.extend_from_slice(&[0u8; 4]);
    let mut header = vec![0u8; HEADER as usize];
    header[..8].copy_from_slice(MAGIC);
    header[8..16].copy_from_slice(&HALF.to_le_bytes());
    header[16..24].copy_from_slice(&1u64.to_le_bytes());
    header[24..32].copy_from_slice(&2u64.to_le_bytes());
    let file = File::create(journal_path(store_dir))?;
    file.write_all_at(&header, 0)?;
    file.write_all_at(&[0u8; 4], HEADER)?;
    // The half written last (generation 2) holds the frames.
    file.write_all_at(&journal, HEADER + HALF)?;
    Ok(())
}

/// Returns once nobody holds sled's lock on `db` (its file lock, which
/// sled's I/O threads keep until their last write ends), within 30 s.
fn wait_unlocked(db: &Path) -> std::io::Result<()> {
    use nix::fcntl::{Flock, FlockArg};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut file = File::open(db)?;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            // Dropped: the lock taken is given back.
            Ok(_locked) => return Ok(()),
            Err((_, errno)) if std::time::Instant::now() > deadline => {
                return Err(std::io::Error::other(format!(
                    "{} stayed locked for 30 s ({errno})",
                    db.display()
                )))
            }
            Err((back, _)) => file = back,
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_written_as_before_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let frame = |seq: u64| Frame {
            seq,
            at_ms: seq * 10,
            data: Bytes::from(format!("frame {seq}")),
        };
        let s = OldSession {
            id: "a1".into(),
            record: b"{}".to_vec(),
            stored: vec![frame(1)],
            journaled: vec![frame(3), frame(2)],
            mark: 64,
        };
        write_data_dir(&store, &[s]).unwrap();
        let replay = read_journal(&journal_path(&store)).unwrap();
        assert!(replay.complete);
        let seqs: Vec<u64> = replay.frames["a1"].iter().map(|f| f.seq).collect();
        assert_eq!(seqs, [2, 3], "sorted by seq");
        assert_eq!(replay.frames["a1"][0], frame(2));
        // Damage the last record: it ends the half.
        let path = journal_path(&store);
        let len = std::fs::metadata(&path).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(b"X", len - 6).unwrap();
        let replay = read_journal(&path).unwrap();
        assert_eq!(replay.frames["a1"].len(), 1);
    }
}
