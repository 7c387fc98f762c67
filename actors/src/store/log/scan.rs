//! Reading a segment from disk without trusting it: its index file (when
//! whole and sane), and a scan of its records past what the index covers,
//! stopping at the first record that does not check (a torn tail), with
//! the blocks found on the way. Bounded: a file far larger than a segment
//! is read no further than `MAX_SCAN`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::format::{self, Index, IndexEntry, Segment, BLOCK, HEADER};

/// What a scan of one segment reads at most (twice the largest segment
/// and a record).
const MAX_SCAN: u64 = 2 * super::SEGMENT_BYTES + format::MAX_DATA as u64;

/// A segment's index file, when it is whole.
pub fn read_index(path: &Path) -> Option<Index> {
    let bytes = std::fs::read(path).ok()?;
    format::decode_index(&bytes)
}

/// Reads a segment past what `index` covers (all of it without one):
/// answers the segment as its whole records make it, with its blocks. A
/// segment without a whole header holds nothing: it is made one header
/// long (the caller cuts what follows).
pub fn scan_segment(
    path: &Path,
    first_seq: u64,
    index: Option<Index>,
) -> io::Result<(Segment, Vec<IndexEntry>)> {
    let (segment, entries, header_ok) = scan(path, first_seq, index)?;
    if !header_ok {
        file_rewrite_header(path, first_seq)?;
    }
    Ok((segment, entries))
}

/// The blocks of a segment, read without changing it.
pub fn scan_segment_readonly(
    path: &Path,
    first_seq: u64,
    index: Option<Index>,
) -> io::Result<Vec<IndexEntry>> {
    Ok(scan(path, first_seq, index)?.1)
}

fn scan(
    path: &Path,
    first_seq: u64,
    index: Option<Index>,
) -> io::Result<(Segment, Vec<IndexEntry>, bool)> {
    let file = File::open(path)?;
    let mut segment = Segment {
        first_seq,
        last_seq: first_seq - 1,
        last_at: 0,
        len: HEADER,
    };
    let mut entries = Vec::new();
    let mut header = [0u8; HEADER as usize];
    let header_ok = file.read_exact_at(&mut header, 0).is_ok()
        && format::read_header(&header) == Some(first_seq);
    if !header_ok {
        return Ok((segment, entries, false));
    }
    if let Some(i) = index {
        segment.len = i.covered.max(HEADER);
        segment.last_seq = i.last_seq;
        segment.last_at = i.last_at;
        entries = i.entries;
    }
    // A segment is at most its size and one record past it; a file far
    // larger is damage, read no further than that bound.
    let total = file.metadata()?.len().min(segment.len + MAX_SCAN);
    let mut rest = vec![0u8; total.saturating_sub(segment.len) as usize];
    let got = read_up_to(&file, &mut rest, segment.len)?;
    rest.truncate(got);
    let start = segment.len;
    let whole = format::scan(&rest, |frame, at| {
        let offset = start + at as u64;
        if entries.last().is_none_or(|e| offset - e.offset >= BLOCK) {
            entries.push(IndexEntry {
                seq: frame.seq,
                at_ms: frame.at_ms,
                offset,
            });
        }
        segment.last_seq = frame.seq;
        segment.last_at = frame.at_ms;
    });
    segment.len = start + whole as u64;
    Ok((segment, entries, true))
}

fn file_rewrite_header(path: &Path, first_seq: u64) -> io::Result<()> {
    let file = OpenOptions::new().write(true).open(path)?;
    file.set_len(0)?;
    file.write_all_at(&format::segment_header(first_seq), 0)
}

/// Reads as much of `buf` as the file has at `at`.
pub fn read_up_to(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
