//! The store's journal: every output frame is written here (one `pwrite`,
//! so it is in the kernel's page cache at once) before its seq is sent to
//! anyone, and replayed into the store when the node starts. A node killed
//! with -9 thus loses none of the output it read and sent, even what the
//! store had not written yet, and its seqs continue exactly after the last
//! one sent: a client resuming with `from_seq` gets every byte, without a
//! resync. (A machine crash may lose the page cache; then the seq
//! high-water mark keeps seqs from being given twice.)
//!
//! The file (`store.journal` beside the store) has a header and two
//! halves. Frames go into one half, one record after another, each
//! followed by an end mark; when a half is full the journal switches to
//! the other, which it may only overwrite once the store has made
//! everything in it durable: the switch away from a half asks the store
//! for that (`Durable`), and the switch back waits for it (a disk that
//! slow holds the output, as the store's backlog does).
//!
//! Record: length (u32 LE, of what follows the checksum), CRC-32 (u32 LE),
//! seq (u64 LE), stored-at ms (u64 LE), id length (u8), id, data.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bytes::Bytes;

const MAGIC: &[u8; 8] = b"TMJRNL01";
/// Header: magic, half size, the generation of each half, and a flag set
/// when a half was overwritten before it was durable.
const HEADER: u64 = 4096;
/// Bytes per half.
pub const HALF: u64 = 16 << 20;
/// Fixed part of a record before the id: length, crc, seq, at ms, id length.
const FIXED: usize = 4 + 4 + 8 + 8 + 1;
/// How long a switch waits for the store to make a half durable before it
/// overwrites it anyway (and says so: the journal is then incomplete).
const DURABLE_WAIT: Duration = Duration::from_secs(30);

/// Set once the store has made a half's frames durable.
#[derive(Debug, Default)]
pub struct Durable {
    done: Mutex<bool>,
    signal: Condvar,
}

impl Durable {
    fn is_set(&self) -> bool {
        *self.done.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set(&self) {
        *self.done.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.signal.notify_all();
    }

    /// Waits until set; `false` after `limit`.
    fn wait(&self, limit: Duration) -> bool {
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        let (done, _) = self
            .signal
            .wait_timeout_while(done, limit, |d| !*d)
            .unwrap_or_else(|p| p.into_inner());
        *done
    }
}

/// One frame found in the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub seq: u64,
    pub at_ms: u64,
    pub data: Bytes,
}

/// What a journal held when it was opened.
#[derive(Debug, Default)]
pub struct Replay {
    /// The journal existed and was whole: every frame sent since it began
    /// is in it or in the store.
    pub complete: bool,
    /// Frames by session, oldest first.
    pub frames: HashMap<String, Vec<Frame>>,
}

#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
    half: u64,
    current: usize,
    offset: u64,
    generation: u64,
    buf: Vec<u8>,
    /// The other half: durable once this is set.
    other: Option<Arc<Durable>>,
    /// A write failed: the journal is gone (unlinked), so the next start
    /// trusts the high-water mark; nothing more is written.
    broken: bool,
    /// Since when output has been held for the other half to be durable.
    pressed_since: Option<std::time::Instant>,
}

impl Journal {
    /// Opens the journal at `path` (created when absent): answers it,
    /// emptied, and what it held. Call `Journal::open` only after what it
    /// held is in the store.
    pub fn read(path: &Path) -> std::io::Result<Replay> {
        let Ok(file) = File::open(path) else {
            return Ok(Replay::default());
        };
        let mut header = [0u8; 40];
        if file.read_exact_at(&mut header, 0).is_err() || &header[..8] != MAGIC {
            return Ok(Replay::default());
        }
        let half = u64::from_le_bytes(header[8..16].try_into().unwrap_or_default());
        if half != HALF {
            // Not one this node wrote: as if there were none.
            return Ok(Replay::default());
        }
        let generations = [0, 1].map(|i| {
            let at = 16 + 8 * i;
            u64::from_le_bytes(header[at..at + 8].try_into().unwrap_or_default())
        });
        let overwritten = header[32..40] != [0u8; 8];
        let mut replay = Replay {
            complete: half > 0 && !overwritten,
            frames: HashMap::new(),
        };
        let mut order = [0usize, 1];
        order.sort_by_key(|i| generations[*i]);
        for i in order {
            let mut bytes = vec![0u8; half as usize];
            let start = HEADER + i as u64 * half;
            let got = match read_up_to(&file, &mut bytes, start) {
                Ok(got) => got,
                Err(e) => {
                    tracing::warn!(path = %path.display(), "the journal cannot be read ({e}): seqs continue above the high-water mark");
                    return Ok(Replay::default());
                }
            };
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

    /// A new, empty journal at `path` (what was there is gone).
    pub fn open(path: &Path) -> std::io::Result<Journal> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        // Both halves allocated now: a frame's write never needs a block
        // of a full disk. A file system without `fallocate` (FUSE, some
        // network mounts) gets a sparse file: a write that then finds the
        // disk full drops the journal (`append`).
        if let Err(e) = nix::fcntl::fallocate(
            std::os::fd::AsRawFd::as_raw_fd(&file),
            nix::fcntl::FallocateFlags::empty(),
            0,
            (HEADER + 2 * HALF) as i64,
        ) {
            tracing::warn!(path = %path.display(), "the journal's space cannot be allocated ahead ({e}): it is written as it goes");
        }
        let mut header = vec![0u8; HEADER as usize];
        header[..8].copy_from_slice(MAGIC);
        header[8..16].copy_from_slice(&HALF.to_le_bytes());
        header[16..24].copy_from_slice(&1u64.to_le_bytes());
        header[24..32].copy_from_slice(&2u64.to_le_bytes());
        // Both halves end at once; generation 2 (half 1) is the one
        // written first.
        file.write_all_at(&[0u8; 4], HEADER)?;
        file.write_all_at(&[0u8; 4], HEADER + HALF)?;
        file.write_all_at(&header, 0)?;
        let durable = Arc::new(Durable::default());
        durable.set();
        Ok(Journal {
            file,
            path: path.to_path_buf(),
            half: HALF,
            current: 1,
            offset: 0,
            generation: 2,
            buf: Vec::new(),
            other: Some(durable),
            broken: false,
            pressed_since: None,
        })
    }

    /// Writes one frame of `id`. When the current half is full, switches
    /// to the other (waiting until the store made it durable) and calls
    /// `flush_behind` with what the store must set once the half left
    /// behind is durable.
    pub fn append(
        &mut self,
        id: &str,
        seq: u64,
        at_ms: u64,
        data: &[u8],
        flush_behind: impl FnOnce(Arc<Durable>),
    ) -> std::io::Result<()> {
        if self.broken {
            return Ok(());
        }
        let written = self
            .encode(id, seq, at_ms, data)
            .and_then(|()| self.put(flush_behind));
        if let Err(e) = &written {
            // A frame it does not hold would be a seq the next start does
            // not know was sent: the journal goes, and with it the trust.
            self.broken = true;
            let _ = std::fs::remove_file(&self.path);
            tracing::error!(path = %self.path.display(), "the output journal failed ({e}) and is dropped: after a crash now, seqs continue above the high-water mark");
        }
        written
    }

    /// The current half is nearly full and the other one is not durable
    /// yet: output should wait (as for the store's backlog) rather than
    /// reach a switch that would have to wait. At most `DURABLE_WAIT`: a
    /// store that cannot make it durable (a failed disk) must not hold the
    /// programs forever; the switch then overwrites it and says so.
    pub fn pressed(&mut self) -> bool {
        let waiting = self.filling() && self.other.as_ref().is_some_and(|d| !d.is_set());
        if !waiting {
            return false;
        }
        let since = *self
            .pressed_since
            .get_or_insert_with(std::time::Instant::now);
        since.elapsed() < DURABLE_WAIT
    }

    /// The current half is past three quarters full (only an append
    /// changes that): `pressed` may be true.
    pub fn filling(&self) -> bool {
        !self.broken && self.offset > self.half / 4 * 3
    }

    /// The record of one frame, with the end mark after it, in `buf`.
    fn encode(&mut self, id: &str, seq: u64, at_ms: u64, data: &[u8]) -> std::io::Result<()> {
        let id = &id.as_bytes()[..id.len().min(255)];
        let len = FIXED + id.len() + data.len();
        if len as u64 + 4 > self.half {
            return Err(std::io::Error::other("a frame larger than the journal"));
        }
        self.buf.clear();
        self.buf
            .extend_from_slice(&((len - 8) as u32).to_le_bytes());
        self.buf.extend_from_slice(&[0u8; 4]);
        self.buf.extend_from_slice(&seq.to_le_bytes());
        self.buf.extend_from_slice(&at_ms.to_le_bytes());
        self.buf.push(id.len() as u8);
        self.buf.extend_from_slice(id);
        self.buf.extend_from_slice(data);
        let crc = crc32fast::hash(&self.buf[8..]);
        self.buf[4..8].copy_from_slice(&crc.to_le_bytes());
        // The end mark after it: a reader stops there, never at a record
        // an earlier round of this half left behind.
        self.buf.extend_from_slice(&[0u8; 4]);
        Ok(())
    }

    /// Writes the record in `buf` at the end of the current half, after a
    /// switch to the other when it does not fit.
    fn put(&mut self, flush_behind: impl FnOnce(Arc<Durable>)) -> std::io::Result<()> {
        let len = self.buf.len() as u64 - 4;
        if self.offset + len + 4 > self.half {
            self.switch(flush_behind)?;
        }
        let at = HEADER + self.current as u64 * self.half + self.offset;
        self.file.write_all_at(&self.buf, at)?;
        self.offset += len;
        Ok(())
    }

    fn switch(&mut self, flush_behind: impl FnOnce(Arc<Durable>)) -> std::io::Result<()> {
        let next = 1 - self.current;
        let durable = self.other.take().unwrap_or_default();
        let waited = self
            .pressed_since
            .take()
            .map_or(Duration::ZERO, |t| t.elapsed());
        if !durable.wait(DURABLE_WAIT.saturating_sub(waited)) {
            tracing::error!(
                path = %self.path.display(),
                "the store did not make the journal's older half durable within {DURABLE_WAIT:?}: \
                 overwriting it; after a crash now, seqs continue above the high-water mark"
            );
            self.file.write_all_at(&1u64.to_le_bytes(), 32)?;
        }
        self.generation += 1;
        self.file
            .write_all_at(&self.generation.to_le_bytes(), 16 + 8 * next as u64)?;
        self.file
            .write_all_at(&[0u8; 4], HEADER + next as u64 * self.half)?;
        let behind = Arc::new(Durable::default());
        flush_behind(behind.clone());
        self.other = Some(behind);
        self.current = next;
        self.offset = 0;
        Ok(())
    }
}

/// Reads as much of `buf` as the file has at `at`.
fn read_up_to(file: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The records of one half, up to its end mark (or the first record that
/// does not check: a write the kill cut short).
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

#[cfg(test)]
mod tests {
    use super::*;

    fn flushed(d: Arc<Durable>) {
        d.set();
    }

    #[test]
    fn frames_written_are_read_back_in_seq_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        assert!(!Journal::read(&path).unwrap().complete, "no journal yet");
        let mut j = Journal::open(&path).unwrap();
        j.append("a", 1, 10, b"one", flushed).unwrap();
        j.append("b", 1, 11, b"uno", flushed).unwrap();
        j.append("a", 2, 12, b"two", flushed).unwrap();
        drop(j);
        let replay = Journal::read(&path).unwrap();
        assert!(replay.complete);
        let seqs = |id: &str| -> Vec<(u64, Vec<u8>)> {
            replay.frames[id]
                .iter()
                .map(|f| (f.seq, f.data.to_vec()))
                .collect()
        };
        assert_eq!(seqs("a"), vec![(1, b"one".to_vec()), (2, b"two".to_vec())]);
        assert_eq!(seqs("b"), vec![(1, b"uno".to_vec())]);
        assert_eq!(replay.frames["a"][1].at_ms, 12);
        // Opening again starts empty.
        drop(Journal::open(&path).unwrap());
        assert!(Journal::read(&path).unwrap().frames.is_empty());
    }

    #[test]
    fn a_record_cut_short_ends_the_half() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut j = Journal::open(&path).unwrap();
        j.append("a", 1, 0, b"whole", flushed).unwrap();
        j.append("a", 2, 0, b"cut short", flushed).unwrap();
        // Damage the second record's last byte (a write the kill cut).
        let at = HEADER + HALF + (FIXED + 1 + 5 + FIXED + 1 + 8) as u64;
        j.file.write_all_at(b"X", at).unwrap();
        let replay = Journal::read(&path).unwrap();
        let seqs: Vec<u64> = replay.frames["a"].iter().map(|f| f.seq).collect();
        assert_eq!(seqs, vec![1]);
    }

    #[test]
    fn a_switch_asks_for_durability_and_keeps_both_halves_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut j = Journal::open(&path).unwrap();
        let frame = vec![b'x'; 1 << 20];
        let asked = std::cell::Cell::new(0);
        let mut seq = 0;
        // A half and a bit: one switch, the older half's frames still read.
        while asked.get() == 0 || seq < 20 {
            seq += 1;
            j.append("a", seq, 0, &frame, |d| {
                asked.set(asked.get() + 1);
                d.set();
            })
            .unwrap();
        }
        assert_eq!(asked.get(), 1);
        let replay = Journal::read(&path).unwrap();
        let seqs: Vec<u64> = replay.frames["a"].iter().map(|f| f.seq).collect();
        assert_eq!(seqs, (1..=seq).collect::<Vec<_>>());
    }

    #[test]
    fn output_is_pressed_while_the_half_left_behind_is_not_durable() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j")).unwrap();
        let frame = vec![b'x'; 1 << 20];
        let behind = std::cell::RefCell::new(None);
        let mut seq = 0;
        let mut append = |j: &mut Journal| {
            seq += 1;
            j.append("a", seq, 0, &frame, |d| *behind.borrow_mut() = Some(d))
                .unwrap();
        };
        // The first half: the other one starts durable, nothing presses.
        while behind.borrow().is_none() {
            append(&mut j);
            assert!(!j.pressed(), "frame {seq}");
        }
        // Past three quarters of the second half with the first one not
        // yet durable: pressed.
        while !j.filling() {
            assert!(!j.pressed());
            append(&mut j);
        }
        assert!(j.pressed(), "the store has not made the first half durable");
        behind.borrow().as_ref().unwrap().set();
        assert!(!j.pressed(), "durable now");
        // A broken journal never holds output.
        j.broken = true;
        assert!(!j.filling() && !j.pressed());
    }
}
