//! Per-subscriber flow-control accounting (PROTOCOL.md section 8).
//!
//! The session pushes frames while the bytes sent after the last ack are
//! fewer than the window, so in flight there is at most the window plus one
//! frame. (Requiring each frame to fit would deadlock: a client holding less
//! than the quarter window it acks at, facing a frame that does not fit,
//! would wait for data while the server waits for an ack.) Acks are
//! cumulative. Bytes in flight are the
//! difference of two output offsets; the offset of an acked seq comes from
//! the ring, or, when that frame has left the ring, from a small list of
//! checkpoints kept here (bounded; a lower bound, so the count errs towards
//! "more in flight", never past the window).

use std::collections::VecDeque;

use crate::output::ring::{Frame, Ring};

/// Checkpoints kept per subscriber; when full, every other one is dropped.
const MAX_CHECKPOINTS: usize = 256;

#[derive(Debug, Clone)]
pub struct Credit {
    window: u64,
    sent_seq: u64,
    sent_offset: u64,
    acked_seq: u64,
    acked_offset: u64,
    /// (seq, end offset) of sent, unacknowledged frames, sparse when decimated;
    /// the newest sent frame is always last.
    checkpoints: VecDeque<(u64, u64)>,
}

impl Credit {
    /// Nothing sent yet; delivery starts after `seq`, whose end is `offset`.
    pub fn new(window: u64, seq: u64, offset: u64) -> Self {
        Credit {
            window: window.max(1),
            sent_seq: seq,
            sent_offset: offset,
            acked_seq: seq,
            acked_offset: offset,
            checkpoints: VecDeque::new(),
        }
    }

    /// Forget what was in flight and continue after `seq` (resume, snapshot).
    pub fn reset_to(&mut self, seq: u64, offset: u64) {
        *self = Credit::new(self.window, seq, offset);
    }

    pub fn window(&self) -> u64 {
        self.window
    }

    pub fn sent_seq(&self) -> u64 {
        self.sent_seq
    }

    pub fn acked_seq(&self) -> u64 {
        self.acked_seq
    }

    pub fn in_flight(&self) -> u64 {
        self.sent_offset - self.acked_offset
    }

    /// Whether another frame may be sent now (the window is not full).
    pub fn is_open(&self) -> bool {
        self.in_flight() < self.window
    }

    pub fn on_sent(&mut self, frame: &Frame) {
        debug_assert_eq!(frame.seq, self.sent_seq + 1, "frames go out in order");
        self.sent_seq = frame.seq;
        self.sent_offset = frame.end_offset;
        self.checkpoints.push_back((frame.seq, frame.end_offset));
        if self.checkpoints.len() > MAX_CHECKPOINTS {
            let last = self.checkpoints.pop_back().expect("non-empty");
            let kept: VecDeque<_> = self.checkpoints.iter().copied().step_by(2).collect();
            self.checkpoints = kept;
            self.checkpoints.push_back(last);
        }
    }

    /// Applies a cumulative ack; returns whether credit grew.
    pub fn on_ack(&mut self, seq: u64, ring: &Ring) -> bool {
        let seq = seq.min(self.sent_seq);
        if seq <= self.acked_seq {
            return false;
        }
        let offset = if seq == self.sent_seq {
            self.sent_offset
        } else {
            ring.offset_after(seq).unwrap_or_else(|| {
                self.checkpoints
                    .iter()
                    .take_while(|(s, _)| *s <= seq)
                    .last()
                    .map_or(self.acked_offset, |(_, o)| *o)
            })
        };
        self.acked_seq = seq;
        self.acked_offset = offset.clamp(self.acked_offset, self.sent_offset);
        while self.checkpoints.front().is_some_and(|(s, _)| *s <= seq) {
            self.checkpoints.pop_front();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use proptest::prelude::*;

    fn ring_with(sizes: &[usize]) -> (Ring, Vec<Frame>) {
        let mut ring = Ring::new(1 << 30, 1 << 20);
        let frames = sizes
            .iter()
            .map(|n| ring.push(Bytes::from(vec![0; *n])))
            .collect();
        (ring, frames)
    }

    #[test]
    fn window_bounds_sending() {
        let (ring, frames) = ring_with(&[40, 40, 40]);
        let mut c = Credit::new(100, 0, 0);
        assert!(c.is_open());
        c.on_sent(&frames[0]);
        c.on_sent(&frames[1]);
        assert!(c.is_open(), "80 < 100: one more frame may go");
        c.on_sent(&frames[2]);
        assert!(!c.is_open(), "120 >= 100");
        assert!(c.on_ack(1, &ring));
        assert_eq!(c.in_flight(), 80);
        assert!(c.is_open());
        assert!(!c.on_ack(1, &ring), "a repeated ack changes nothing");
    }

    #[test]
    fn oversized_frame_goes_when_idle() {
        let (ring, frames) = ring_with(&[500]);
        let mut c = Credit::new(100, 0, 0);
        assert!(c.is_open());
        c.on_sent(&frames[0]);
        assert!(!c.is_open());
        c.on_ack(1, &ring);
        assert_eq!(c.in_flight(), 0);
    }

    #[test]
    fn ack_beyond_sent_acks_everything() {
        let (ring, frames) = ring_with(&[10, 10]);
        let mut c = Credit::new(100, 0, 0);
        c.on_sent(&frames[0]);
        c.on_ack(99, &ring);
        assert_eq!((c.acked_seq(), c.in_flight()), (1, 0));
    }

    #[test]
    fn ack_of_evicted_frame_uses_checkpoints() {
        let mut ring = Ring::new(20, 1000);
        let mut c = Credit::new(1000, 0, 0);
        for _ in 0..10 {
            let f = ring.push(Bytes::from(vec![0; 10]));
            c.on_sent(&f);
        }
        assert_eq!(ring.oldest_seq(), 9);
        c.on_ack(5, &ring);
        assert_eq!(c.in_flight(), 50);
    }

    proptest! {
        /// Whatever the acks and evictions: in-flight never exceeds the window
        /// plus one frame, never under-counts the true unacknowledged bytes,
        /// and acking everything empties it.
        #[test]
        fn accounting_is_safe(sizes in proptest::collection::vec(1usize..400, 1..600), window in 1u64..2000, ring_bytes in 1usize..3000, acks in proptest::collection::vec(0u64..700, 0..300)) {
            let mut ring = Ring::new(ring_bytes, 1 << 20);
            let mut c = Credit::new(window, 0, 0);
            let mut acks = acks.into_iter();
            let mut end_offsets = vec![0u64]; // index: seq
            for n in sizes {
                let f = ring.push(Bytes::from(vec![0; n]));
                end_offsets.push(f.end_offset);
                if c.sent_seq() + 1 == f.seq && c.is_open() {
                    c.on_sent(&f);
                    prop_assert!(c.in_flight() < window + n as u64);
                }
                if let Some(a) = acks.next() {
                    c.on_ack(a, &ring);
                    let true_in_flight = end_offsets[c.sent_seq() as usize] - end_offsets[c.acked_seq() as usize];
                    prop_assert!(c.in_flight() >= true_in_flight);
                }
            }
            let sent = c.sent_seq();
            c.on_ack(sent, &ring);
            prop_assert_eq!(c.in_flight(), 0);
        }
    }
}
