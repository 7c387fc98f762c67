//! The replay ring: a session's bounded window of recent output frames.
//!
//! Invariants: frames are contiguous (`oldest_seq..=last_seq`), bounded by
//! bytes and by count, oldest evicted first, and at least one frame is kept
//! even when it alone exceeds the byte bound. Each frame records the total
//! output bytes through it (`end_offset`), which flow control uses to count
//! bytes in flight between two seqs without walking frames.

use std::collections::VecDeque;

use bytes::Bytes;

/// One chunk of session output with its seq, assigned once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub seq: u64,
    pub data: Bytes,
    /// Session output bytes through the end of this frame.
    pub end_offset: u64,
}

impl Frame {
    /// Session output bytes before this frame.
    pub fn start_offset(&self) -> u64 {
        self.end_offset - self.data.len() as u64
    }
}

/// Frames after the requested seq have been evicted (or it is in the future).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooOld {
    pub last_seq: u64,
}

#[derive(Debug)]
pub struct Ring {
    frames: VecDeque<Frame>,
    /// Sum of `data.len()` over `frames`.
    bytes: usize,
    max_bytes: usize,
    max_frames: usize,
    /// Seq of the newest frame ever pushed (0: none); survives eviction.
    last_seq: u64,
    /// Output bytes ever pushed.
    end_offset: u64,
    /// While set, frames after this seq are not evicted (a snapshot at this
    /// seq is being computed and its successors must survive it). The owner
    /// stops pushing when `over_bounds()` instead.
    pin: Option<u64>,
    /// The frames held end before `last_seq`: the seqs between were skipped
    /// (`skip_to`), so no replay crosses them; the frames stay for the
    /// screen until the next push.
    gap: bool,
}

impl Ring {
    pub fn new(max_bytes: usize, max_frames: usize) -> Self {
        Ring {
            frames: VecDeque::new(),
            bytes: 0,
            max_bytes: max_bytes.max(1),
            max_frames: max_frames.max(1),
            last_seq: 0,
            end_offset: 0,
            pin: None,
            gap: false,
        }
    }

    /// An empty ring whose next frame is `seq + 1` (a mirror starting where
    /// its owner is, or a session continuing above stored seqs).
    pub fn starting_at(seq: u64, max_bytes: usize, max_frames: usize) -> Self {
        let mut ring = Ring::new(max_bytes, max_frames);
        ring.last_seq = seq;
        ring
    }

    /// Stores `data` as frame `seq`, which must follow the last one
    /// (`Err` names the seq expected).
    pub fn push_at(&mut self, seq: u64, data: Bytes) -> Result<Frame, u64> {
        if seq != self.last_seq + 1 {
            return Err(self.last_seq + 1);
        }
        Ok(self.push(data))
    }

    /// Drops every frame and continues after `seq`: the frames between
    /// were skipped. Offsets keep counting (they only measure distances).
    pub fn jump_to(&mut self, seq: u64) {
        self.frames.clear();
        self.bytes = 0;
        self.gap = false;
        self.last_seq = seq;
    }

    /// Continues after `seq` (above `last_seq`), keeping the frames held
    /// for the screen: a restarted node skips the seqs it may have sent
    /// unstored. No replay crosses the skip; the next push drops them.
    pub fn skip_to(&mut self, seq: u64) {
        if seq <= self.last_seq {
            return;
        }
        self.gap = !self.frames.is_empty();
        self.last_seq = seq;
    }

    /// Assigns the next seq to `data`, stores it and evicts what no longer fits.
    pub fn push(&mut self, data: Bytes) -> Frame {
        if self.gap {
            self.frames.clear();
            self.bytes = 0;
            self.gap = false;
        }
        self.last_seq += 1;
        self.end_offset += data.len() as u64;
        let frame = Frame {
            seq: self.last_seq,
            data,
            end_offset: self.end_offset,
        };
        self.bytes += frame.data.len();
        self.frames.push_back(frame.clone());
        self.evict();
        frame
    }

    fn evict(&mut self) {
        while self.over_bounds() {
            let front = self.frames.front().expect("over bounds implies frames");
            if self.pin.is_some_and(|pin| front.seq > pin) {
                break;
            }
            let old = self.frames.pop_front().expect("non-empty");
            self.bytes -= old.data.len();
        }
    }

    /// Whether pushing `len` more bytes would evict a pinned frame: the
    /// owner then waits for the pin to go instead of pushing.
    pub fn would_evict_pinned(&self, len: usize) -> bool {
        let Some(pin) = self.pin else {
            return false;
        };
        let (mut bytes, mut count) = (self.bytes + len, self.frames.len() + 1);
        for frame in &self.frames {
            if count <= 1 || (bytes <= self.max_bytes && count <= self.max_frames) {
                return false;
            }
            if frame.seq > pin {
                return true;
            }
            bytes -= frame.data.len();
            count -= 1;
        }
        false
    }

    /// Whether the ring holds more than its bounds.
    pub fn over_bounds(&self) -> bool {
        self.frames.len() > 1
            && (self.bytes > self.max_bytes || self.frames.len() > self.max_frames)
    }

    /// Keeps the frames after `seq` until unpinned (`None`), which evicts
    /// what the bounds no longer allow.
    pub fn set_pin(&mut self, pin: Option<u64>) {
        self.pin = pin;
        self.evict();
    }

    pub fn pin(&self) -> Option<u64> {
        self.pin
    }

    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// First seq still held; `last_seq + 1` when none is.
    pub fn oldest_seq(&self) -> u64 {
        self.frames.front().map_or(self.last_seq + 1, |f| f.seq)
    }

    /// First seq a replay can start at (`oldest_seq`, or `last_seq + 1`
    /// while the frames held end before a skip).
    pub fn first_resumable(&self) -> u64 {
        if self.gap {
            self.last_seq + 1
        } else {
            self.oldest_seq()
        }
    }

    /// The frames held after `after`, in order, a skip or not (for the
    /// screen model, which stands at `last_seq` after them).
    pub fn held_after(&self, after: u64) -> impl Iterator<Item = &Frame> + '_ {
        let skip = self
            .frames
            .front()
            .map_or(0, |f| after.saturating_add(1).saturating_sub(f.seq));
        self.frames
            .iter()
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
    }

    pub fn end_offset(&self) -> u64 {
        self.end_offset
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub fn get(&self, seq: u64) -> Option<&Frame> {
        let first = self.frames.front()?.seq;
        let index = usize::try_from(seq.checked_sub(first)?).ok()?;
        self.frames.get(index)
    }

    /// Output bytes through the end of `seq`, when the ring can tell exactly.
    pub fn offset_after(&self, seq: u64) -> Option<u64> {
        if seq == self.last_seq {
            return Some(self.end_offset);
        }
        if let Some(frame) = self.get(seq) {
            return Some(frame.end_offset);
        }
        // The frame just before the oldest: its end is the oldest's start.
        self.get(seq.checked_add(1)?).map(Frame::start_offset)
    }

    /// The frames after `after`, in order, or `TooOld` when some of them
    /// have been evicted or `after` is beyond the last seq.
    pub fn replay_from(&self, after: u64) -> Result<impl Iterator<Item = &Frame> + '_, TooOld> {
        let too_old = TooOld {
            last_seq: self.last_seq,
        };
        if after > self.last_seq
            || after + 1 < self.oldest_seq()
            || (self.gap && after < self.last_seq)
        {
            return Err(too_old);
        }
        let skip = (after + 1 - self.oldest_seq()) as usize;
        Ok(self.frames.iter().skip(skip))
    }

    /// All frames held, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Frame> + '_ {
        self.frames.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn b(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[test]
    fn a_skip_keeps_the_frames_for_the_screen_but_no_replay_crosses_it() {
        let mut r = Ring::new(100, 10);
        r.push(b(1));
        r.push(b(1));
        r.skip_to(10);
        assert_eq!(r.last_seq(), 10);
        assert_eq!(r.held_after(0).map(|f| f.seq).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(r.held_after(1).map(|f| f.seq).collect::<Vec<_>>(), [2]);
        for after in [0, 1, 2, 9] {
            assert!(r.replay_from(after).is_err(), "{after}");
        }
        assert_eq!(r.replay_from(10).unwrap().count(), 0);
        assert_eq!(r.first_resumable(), 11);
        assert!(r.get(3).is_none());
        // The next frame follows the skip; the old ones go.
        assert_eq!(r.push(b(1)).seq, 11);
        assert_eq!(r.replay_from(10).unwrap().count(), 1);
        assert_eq!(r.oldest_seq(), 11);
        // Never back.
        r.skip_to(5);
        assert_eq!(r.last_seq(), 11);
    }

    #[test]
    fn the_largest_seq_is_too_old_not_an_overflow() {
        let mut r = Ring::new(100, 10);
        r.push(b(3));
        assert_eq!(r.offset_after(u64::MAX), None);
        assert!(r.replay_from(u64::MAX).is_err());
        assert!(r.get(u64::MAX).is_none());
    }

    #[test]
    fn empty_ring() {
        let r = Ring::new(100, 10);
        assert_eq!((r.last_seq(), r.oldest_seq()), (0, 1));
        assert_eq!(r.replay_from(0).unwrap().count(), 0);
        assert_eq!(r.replay_from(1).err(), Some(TooOld { last_seq: 0 }));
    }

    #[test]
    fn evicts_by_bytes_and_keeps_one() {
        let mut r = Ring::new(10, 100);
        r.push(b(4));
        r.push(b(4));
        r.push(b(4));
        assert_eq!((r.oldest_seq(), r.last_seq(), r.bytes()), (2, 3, 8));
        r.push(b(50));
        assert_eq!((r.oldest_seq(), r.len()), (4, 1));
        assert_eq!(
            r.replay_from(3).unwrap().map(|f| f.seq).collect::<Vec<_>>(),
            vec![4]
        );
        assert!(r.replay_from(2).is_err());
    }

    #[test]
    fn evicts_by_frames() {
        let mut r = Ring::new(1000, 2);
        for _ in 0..5 {
            r.push(b(1));
        }
        assert_eq!((r.oldest_seq(), r.len()), (4, 2));
    }

    #[test]
    fn pinned_frames_survive_until_unpinned() {
        let mut r = Ring::new(10, 100);
        r.push(b(4));
        r.push(b(4));
        r.set_pin(Some(2));
        assert!(
            !r.would_evict_pinned(4),
            "frames up to the pin can still go"
        );
        r.push(b(4));
        r.push(b(4));
        assert_eq!((r.oldest_seq(), r.last_seq()), (3, 4));
        assert!(r.would_evict_pinned(4), "seq 3 is after the pin");
        r.push(b(4));
        assert!(r.over_bounds(), "a push past the check keeps pinned frames");
        assert_eq!(r.oldest_seq(), 3);
        r.set_pin(None);
        assert!(!r.over_bounds());
        assert_eq!(r.oldest_seq(), 4);
    }

    #[test]
    fn offsets() {
        let mut r = Ring::new(6, 100);
        r.push(b(3));
        r.push(b(3));
        r.push(b(3));
        assert_eq!(r.oldest_seq(), 2);
        assert_eq!(r.offset_after(3), Some(9));
        assert_eq!(r.offset_after(2), Some(6));
        assert_eq!(r.offset_after(1), Some(3));
        assert_eq!(r.offset_after(0), None);
    }

    proptest! {
        #[test]
        fn ring_invariants(sizes in proptest::collection::vec(1usize..50, 1..200), max_bytes in 1usize..300, max_frames in 1usize..40, probe in 0u64..250) {
            let mut r = Ring::new(max_bytes, max_frames);
            let mut total = 0u64;
            for (i, n) in sizes.iter().enumerate() {
                let f = r.push(b(*n));
                total += *n as u64;
                prop_assert_eq!(f.seq, i as u64 + 1);
                prop_assert_eq!(f.end_offset, total);
            }
            prop_assert!(!r.is_empty());
            prop_assert!(r.len() == 1 || (r.bytes() <= max_bytes && r.len() <= max_frames));
            let seqs: Vec<u64> = r.iter().map(|f| f.seq).collect();
            prop_assert_eq!(seqs.first().copied(), Some(r.oldest_seq()));
            prop_assert_eq!(seqs.last().copied(), Some(r.last_seq()));
            prop_assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
            let replayed = r.replay_from(probe).map(|frames| frames.map(|f| f.seq).collect::<Vec<u64>>());
            match replayed {
                Ok(got) => {
                    let want: Vec<u64> = (probe + 1..=r.last_seq()).collect();
                    prop_assert_eq!(got, want);
                }
                Err(e) => {
                    prop_assert_eq!(e.last_seq, r.last_seq());
                    prop_assert!(probe > r.last_seq() || probe + 1 < r.oldest_seq());
                }
            }
        }
    }
}
