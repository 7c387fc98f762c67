//! The output log's bytes on disk, without I/O: a segment's header, its
//! records, and the sparse index written beside a segment. Everything
//! here is little-endian and checked: a reader stops at the first record
//! that does not check (a write a crash cut short) and says where.
//!
//! ```text
//! segment  NNNNNNNNNNNNNNNNNNNN.log   (NNN = the first seq it may hold)
//!   header   "TMSEG001" (8)  first seq (u64)
//!   record   len (u32, of data)  crc32 (u32, of seq ‖ at ‖ data)  seq (u64)  at ms (u64)  data
//!   record   ...
//! index    NNNNNNNNNNNNNNNNNNNN.idx   (written when the segment is sealed)
//!   "TMIDX001" (8)  covered (u64: the segment's length it describes)
//!   last seq (u64)  last at (u64)  entries (u32)
//!   entry    seq (u64)  at ms (u64)  offset (u64)   one per block (~64 KiB)
//!   crc32 (u32, of everything before it)
//! ```

use bytes::Bytes;

pub const SEGMENT_MAGIC: &[u8; 8] = b"TMSEG001";
pub const INDEX_MAGIC: &[u8; 8] = b"TMIDX001";
/// A segment's header: magic and first seq.
pub const HEADER: u64 = 16;
/// A record's fixed part before its data.
pub const RECORD: usize = 4 + 4 + 8 + 8;
/// A record's data, at most (a PTY read is far smaller; this bounds what
/// a damaged length can make a reader allocate).
pub const MAX_DATA: usize = 16 << 20;
/// An index entry starts a block at least this far after the last one.
pub const BLOCK: u64 = 64 << 10;
const INDEX_FIXED: usize = 8 + 8 + 8 + 8 + 4;
const ENTRY: usize = 24;

/// One frame as stored: its seq, when it was read (unix ms), its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub seq: u64,
    pub at_ms: u64,
    pub data: Bytes,
}

/// Where a block of records starts: the first record's seq and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub seq: u64,
    pub at_ms: u64,
    pub offset: u64,
}

/// A sealed segment's index as read from its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// The segment's length it describes: records past it (a segment
    /// written on after an index) are found by scanning from there.
    pub covered: u64,
    pub last_seq: u64,
    pub last_at: u64,
    pub entries: Vec<IndexEntry>,
}

pub fn segment_header(first_seq: u64) -> [u8; HEADER as usize] {
    let mut h = [0u8; HEADER as usize];
    h[..8].copy_from_slice(SEGMENT_MAGIC);
    h[8..].copy_from_slice(&first_seq.to_le_bytes());
    h
}

/// The first seq a segment header names, if it is one.
pub fn read_header(h: &[u8]) -> Option<u64> {
    (h.len() >= HEADER as usize && &h[..8] == SEGMENT_MAGIC).then(|| le64(&h[8..16]))
}

/// Appends one record to `buf`.
pub fn encode(buf: &mut Vec<u8>, seq: u64, at_ms: u64, data: &[u8]) {
    let start = buf.len();
    buf.extend_from_slice(&(data.len() as u32).to_le_bytes());
    buf.extend_from_slice(&[0u8; 4]);
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend_from_slice(&at_ms.to_le_bytes());
    buf.extend_from_slice(data);
    let crc = crc32fast::hash(&buf[start + 8..]);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// The record at the start of `bytes`: the frame and its length on disk;
/// `None` when it is cut short or does not check.
pub fn decode(bytes: &[u8]) -> Option<(Frame, usize)> {
    if bytes.len() < RECORD {
        return None;
    }
    let len = u32::from_le_bytes(bytes[..4].try_into().ok()?) as usize;
    if len > MAX_DATA || bytes.len() < RECORD + len {
        return None;
    }
    let crc = u32::from_le_bytes(bytes[4..8].try_into().ok()?);
    let body = &bytes[8..RECORD + len];
    if crc32fast::hash(body) != crc {
        return None;
    }
    let frame = Frame {
        seq: le64(&body[..8]),
        at_ms: le64(&body[8..16]),
        data: Bytes::copy_from_slice(&body[16..]),
    };
    Some((frame, RECORD + len))
}

/// The data length a record header announces (to know how much to read).
pub fn announced(header: &[u8]) -> Option<usize> {
    let len = u32::from_le_bytes(header.get(..4)?.try_into().ok()?) as usize;
    (len <= MAX_DATA).then_some(len)
}

/// Decodes the records in `bytes` (which start at a record), calling
/// `each` with every frame and its offset in `bytes`; answers where the
/// whole records end (a torn or damaged tail starts there).
pub fn scan(bytes: &[u8], mut each: impl FnMut(Frame, usize)) -> usize {
    let mut at = 0;
    while let Some((frame, len)) = decode(&bytes[at..]) {
        each(frame, at);
        at += len;
    }
    at
}

pub fn encode_index(index: &Index) -> Vec<u8> {
    let mut v = Vec::with_capacity(INDEX_FIXED + ENTRY * index.entries.len() + 4);
    v.extend_from_slice(INDEX_MAGIC);
    v.extend_from_slice(&index.covered.to_le_bytes());
    v.extend_from_slice(&index.last_seq.to_le_bytes());
    v.extend_from_slice(&index.last_at.to_le_bytes());
    v.extend_from_slice(&(index.entries.len() as u32).to_le_bytes());
    for e in &index.entries {
        v.extend_from_slice(&e.seq.to_le_bytes());
        v.extend_from_slice(&e.at_ms.to_le_bytes());
        v.extend_from_slice(&e.offset.to_le_bytes());
    }
    let crc = crc32fast::hash(&v);
    v.extend_from_slice(&crc.to_le_bytes());
    v
}

/// An index file's contents, when whole and ours.
pub fn decode_index(bytes: &[u8]) -> Option<Index> {
    if bytes.len() < INDEX_FIXED + 4 || &bytes[..8] != INDEX_MAGIC {
        return None;
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let count = u32::from_le_bytes(body[32..36].try_into().ok()?) as usize;
    if body.len() != INDEX_FIXED + count * ENTRY {
        return None;
    }
    let entries = body[INDEX_FIXED..]
        .chunks_exact(ENTRY)
        .map(|e| IndexEntry {
            seq: le64(&e[..8]),
            at_ms: le64(&e[8..16]),
            offset: le64(&e[16..24]),
        })
        .collect();
    let index = Index {
        covered: le64(&body[8..16]),
        last_seq: le64(&body[16..24]),
        last_at: le64(&body[24..32]),
        entries,
    };
    // Blocks inside the segment, in order: a reader sizes its reads by
    // them.
    let ordered = index.entries.windows(2).all(|w| w[0].offset < w[1].offset);
    let inside = index
        .entries
        .iter()
        .all(|e| e.offset >= HEADER && e.offset < index.covered);
    (ordered && inside).then_some(index)
}

/// A segment's file name: its first seq, zero-padded so names sort.
pub fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}.log")
}

pub fn index_name(first_seq: u64) -> String {
    format!("{first_seq:020}.idx")
}

/// The first seq a segment file name holds (`None`: not a segment).
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    // Seqs start at 1: a segment named 0 is none of ours.
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
        .filter(|first: &u64| *first > 0)
}

/// A session's folder name: the id itself when it is plain (letters,
/// digits, `-`, `_`), else `~` and its hex (never `..`, never a `/`).
pub fn folder_name(id: &str) -> String {
    let plain = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain {
        id.to_string()
    } else {
        format!("~{}", hex::encode(id.as_bytes()))
    }
}

/// The id a folder name stands for.
pub fn id_of_folder(name: &str) -> Option<String> {
    match name.strip_prefix('~') {
        Some(h) => String::from_utf8(hex::decode(h).ok()?).ok(),
        None => (!name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
        .then(|| name.to_string()),
    }
}

fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap_or_default())
}

/// One segment file as the log knows it.
#[derive(Debug, Clone)]
pub struct Segment {
    /// The seq in its name: no record in it is older.
    pub first_seq: u64,
    /// Its newest record's seq (`first_seq - 1` while it has none).
    pub last_seq: u64,
    /// When its newest record was read (unix ms; 0 while it has none).
    pub last_at: u64,
    /// Its length: the header and whole records.
    pub len: u64,
}

impl Segment {
    pub fn has_records(&self) -> bool {
        self.len > HEADER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_these_bytes() {
        let mut buf = Vec::new();
        encode(&mut buf, 7, 0x0102, b"hi");
        let crc = crc32fast::hash(&[7, 0, 0, 0, 0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, b'h', b'i']);
        let mut want = vec![2, 0, 0, 0];
        want.extend_from_slice(&crc.to_le_bytes());
        want.extend_from_slice(&[7, 0, 0, 0, 0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, b'h', b'i']);
        assert_eq!(buf, want);
        let (frame, len) = decode(&buf).unwrap();
        assert_eq!(
            (frame.seq, frame.at_ms, &frame.data[..], len),
            (7, 0x102, &b"hi"[..], 26)
        );
    }

    #[test]
    fn a_scan_stops_at_a_torn_or_damaged_record() {
        let mut buf = Vec::new();
        for seq in 1..=3 {
            encode(&mut buf, seq, 0, b"abcdef");
        }
        let whole = buf.len();
        let mut seqs = Vec::new();
        assert_eq!(scan(&buf, |f, _| seqs.push(f.seq)), whole);
        assert_eq!(seqs, [1, 2, 3]);
        // Cut in the last record: two whole ones.
        let cut = &buf[..whole - 3];
        assert_eq!(scan(cut, |_, _| {}), 2 * (RECORD + 6));
        // A flipped byte in the second: one.
        let mut bad = buf.clone();
        bad[RECORD + 6 + RECORD + 1] ^= 1;
        assert_eq!(scan(&bad, |_, _| {}), RECORD + 6);
        // A length past the bound never allocates.
        let mut huge = buf.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(scan(&huge, |_, _| {}), 0);
    }

    #[test]
    fn an_index_round_trips_and_a_damaged_one_is_refused() {
        let index = Index {
            covered: 90_000,
            last_seq: 40,
            last_at: 5,
            entries: vec![
                IndexEntry {
                    seq: 1,
                    at_ms: 2,
                    offset: 16,
                },
                IndexEntry {
                    seq: 30,
                    at_ms: 4,
                    offset: 70_000,
                },
            ],
        };
        let bytes = encode_index(&index);
        assert_eq!(decode_index(&bytes), Some(index));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert_eq!(decode_index(&bad), None, "byte {i}");
        }
        assert_eq!(decode_index(&bytes[..bytes.len() - 1]), None);
        // Whole but not sane: blocks out of order or outside the segment.
        for entries in [
            vec![
                IndexEntry {
                    seq: 1,
                    at_ms: 0,
                    offset: 70_000,
                },
                IndexEntry {
                    seq: 2,
                    at_ms: 0,
                    offset: 16,
                },
            ],
            vec![IndexEntry {
                seq: 1,
                at_ms: 0,
                offset: 9_000,
            }],
            vec![IndexEntry {
                seq: 1,
                at_ms: 0,
                offset: 3,
            }],
        ] {
            let bad = Index {
                covered: 9_000,
                last_seq: 2,
                last_at: 0,
                entries,
            };
            assert_eq!(decode_index(&encode_index(&bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn names_sort_by_seq_and_folders_never_escape() {
        assert_eq!(segment_name(42), "00000000000000000042.log");
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_name("42.log"), None);
        assert_eq!(
            parse_segment_name(&segment_name(0)),
            None,
            "seqs start at 1"
        );
        assert_eq!(parse_segment_name("0000000000000000004x.log"), None);
        assert!(segment_name(9) < segment_name(10));
        assert_eq!(folder_name("a1b2-c_3"), "a1b2-c_3");
        for id in ["..", "a/b", ".", "x y", "é"] {
            let f = folder_name(id);
            assert!(
                f.starts_with('~') && !f.contains('/') && !f.contains('.'),
                "{f}"
            );
            assert_eq!(id_of_folder(&f).as_deref(), Some(id));
        }
        assert_eq!(id_of_folder("a1b2"), Some("a1b2".into()));
        assert_eq!(id_of_folder(".."), None);
    }
}
