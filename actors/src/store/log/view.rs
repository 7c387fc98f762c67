//! Reading one session's log without holding its lock: a `View` is its
//! segments as they stood when it was taken (lengths of whole records
//! only, so a read never meets a record being written), read by blocks:
//! forwards from a seq a block at a time, backwards from a seq (or its
//! tail) up to `SPAN` of blocks per read. A segment deleted by retention
//! meanwhile reads as empty.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use super::cache::IndexCache;
use super::format::{self, Frame, IndexEntry};
use super::scan;
pub use super::scan::read_up_to;
use super::session::{Segment, SessionLog};

/// The most a backward read takes at once (a single block larger than
/// this is read whole, alone). Blocks are read newest first,
/// so a read of one block (64 KiB) at a time, at falling offsets, got no
/// readahead from the kernel: on a disk that does few operations a
/// second, a search's backward scan ran at 64 KiB per operation
/// (docs/benchmarks.md, issue 32, twenty-first stop).
const SPAN: u64 = 1 << 20;

#[derive(Debug, Clone)]
pub struct View {
    dir: PathBuf,
    segments: Vec<Segment>,
    /// The blocks of the segment being written, by its first seq.
    active: Option<(u64, Arc<Vec<IndexEntry>>)>,
}

/// Frames read backwards: oldest first, and whether older ones remain.
#[derive(Debug, Default)]
pub struct Page {
    pub frames: Vec<Frame>,
    pub more: bool,
}

impl View {
    pub fn of(log: &SessionLog) -> View {
        View {
            dir: log.dir().to_path_buf(),
            segments: log.segments().to_vec(),
            active: log
                .active_index()
                .map(|(first, entries)| (first, Arc::new(entries.to_vec()))),
        }
    }

    /// Frames after `after`, oldest first, up to `max_bytes` of data (at
    /// least one frame when there is one).
    pub fn after(
        &self,
        after: u64,
        max_bytes: usize,
        cache: &IndexCache,
    ) -> io::Result<Vec<Frame>> {
        let target = after.saturating_add(1);
        let start = self
            .segments
            .iter()
            .rposition(|s| s.first_seq <= target)
            .unwrap_or(0);
        let mut out = Vec::new();
        let mut bytes = 0;
        for (i, segment) in self.segments.iter().enumerate().skip(start) {
            if !segment.has_records() || segment.last_seq < target {
                continue;
            }
            let blocks = self.blocks(segment, cache)?;
            let first_block = if i == start {
                blocks.iter().rposition(|e| e.seq <= target).unwrap_or(0)
            } else {
                0
            };
            for k in first_block..blocks.len() {
                for frame in self.read_blocks(segment, &blocks, k..k + 1)? {
                    if frame.seq < target {
                        continue;
                    }
                    if !out.is_empty() && bytes + frame.data.len() > max_bytes {
                        return Ok(out);
                    }
                    bytes += frame.data.len();
                    out.push(frame);
                }
            }
        }
        Ok(out)
    }

    /// The newest frames before `before` holding at most `max_bytes` of
    /// data (at least one when there is one), oldest first.
    pub fn before(&self, before: u64, max_bytes: usize, cache: &IndexCache) -> io::Result<Page> {
        let mut newest_first = Vec::new();
        let mut bytes = 0;
        for segment in self.segments.iter().rev() {
            if !segment.has_records() || segment.first_seq >= before {
                continue;
            }
            let blocks = self.blocks(segment, cache)?;
            let Some(last) = blocks.iter().rposition(|e| e.seq < before) else {
                continue;
            };
            // Blocks `j..k` are read next, in one read as large as what
            // the page may still take.
            let mut k = last + 1;
            while k > 0 {
                let want = (max_bytes.saturating_sub(bytes) as u64).clamp(1, SPAN);
                let end = block_end(segment, &blocks, k - 1);
                let mut j = k - 1;
                while j > 0 && end.saturating_sub(blocks[j - 1].offset) <= want {
                    j -= 1;
                }
                let frames = self.read_blocks(segment, &blocks, j..k)?;
                k = j;
                for frame in frames.into_iter().rev().filter(|f| f.seq < before) {
                    if !newest_first.is_empty() && bytes + frame.data.len() > max_bytes {
                        newest_first.reverse();
                        return Ok(Page {
                            frames: newest_first,
                            more: true,
                        });
                    }
                    bytes += frame.data.len();
                    newest_first.push(frame);
                }
            }
        }
        newest_first.reverse();
        Ok(Page {
            frames: newest_first,
            more: false,
        })
    }

    /// The segment's blocks: the active one's from memory, a sealed
    /// one's from its index file (cached), or by a scan when its index is
    /// missing or behind.
    fn blocks(&self, segment: &Segment, cache: &IndexCache) -> io::Result<Arc<Vec<IndexEntry>>> {
        if let Some((first, entries)) = &self.active {
            if *first == segment.first_seq {
                return Ok(entries.clone());
            }
        }
        let path = self.dir.join(format::segment_name(segment.first_seq));
        if let Some(entries) = cache.get(&path, segment.len) {
            return Ok(entries);
        }
        let index_path = self.dir.join(format::index_name(segment.first_seq));
        let entries = match scan::read_index(&index_path) {
            Some(i) if i.covered == segment.len => i.entries,
            found => match scan::scan_segment_readonly(&path, segment.first_seq, found) {
                Ok(entries) => entries,
                Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(e),
            },
        };
        Ok(cache.put(path, segment.len, entries))
    }

    /// The frames of blocks `range` (consecutive), in one read.
    fn read_blocks(
        &self,
        segment: &Segment,
        blocks: &[IndexEntry],
        range: std::ops::Range<usize>,
    ) -> io::Result<Vec<Frame>> {
        let start = blocks[range.start].offset;
        let end = block_end(segment, blocks, range.end - 1);
        if end <= start {
            return Ok(Vec::new());
        }
        let path = self.dir.join(format::segment_name(segment.first_seq));
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut bytes = vec![0u8; (end - start) as usize];
        let got = read_up_to(&file, &mut bytes, start)?;
        bytes.truncate(got);
        // Each block on its own: a damaged record hides the rest of its
        // block only, as when blocks were read one at a time.
        let mut frames = Vec::new();
        for b in range {
            let from = ((blocks[b].offset - start) as usize).min(bytes.len());
            let to = ((block_end(segment, blocks, b) - start) as usize).min(bytes.len());
            format::scan(&bytes[from..to.max(from)], |frame, _| frames.push(frame));
        }
        Ok(frames)
    }
}

/// Where block `k` of `segment` ends.
fn block_end(segment: &Segment, blocks: &[IndexEntry], k: usize) -> u64 {
    blocks.get(k + 1).map_or(segment.len, |e| e.offset)
}
