//! The intake of the PTY's events: read in batches, applied in order, and
//! held while they may not be applied yet: output past the seqs the store
//! has reserved (a seq is never sent that a restart could give again), or
//! output that would evict frames a pending snapshot pins. While events
//! are held nothing more is read, so the program's writes block: nothing
//! is dropped. Frames come with their seqs, already in the output log
//! (`pty::Sequencer`): a frame held here survives a kill of the node.

use std::collections::VecDeque;

use crate::session::pty::PtyEvent;

/// Seqs reserved at a time in the store's high-water mark: a crash skips
/// at most this many seqs, and the next block is asked for half a block
/// ahead, so output never waits for the disk while it keeps up.
pub const SEQ_BLOCK: u64 = 4096;

/// Output applied in one turn of the session's thread: past it, with more
/// read, the session lets the thread's other sessions run first (a flood
/// read in batches of up to 16 frames of 64 KiB would otherwise keep a
/// session typed into on the same thread waiting for all of them).
pub const TURN_BYTES: usize = 64 * 1024;

/// Why intake stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Nothing stops it.
    Open,
    /// The next output needs seqs the store has not reserved yet.
    Seqs,
    /// The next output would evict frames a pending snapshot pins.
    Snapshot,
}

#[derive(Debug)]
pub struct Intake {
    held: VecDeque<PtyEvent>,
    stop: Stop,
    /// Seqs up to this one may be sent (`u64::MAX` without a store).
    seq_limit: u64,
    /// A reservation is on its way to the disk.
    reserving: bool,
    /// Output applied since the session last let others run.
    turn: usize,
}

/// What to do next with the PTY's events.
#[derive(Debug)]
pub enum Next {
    /// Apply this event.
    Apply(PtyEvent),
    /// Reserve seqs through this one (`reserved` when it is durable);
    /// nothing is applied meanwhile.
    Reserve(u64),
    /// Wait: for a reservation under way, or for the pending snapshot
    /// (`unpause`).
    Wait,
    /// Everything read is applied: read more.
    Read,
    /// A turn's output is applied (`TURN_BYTES`): let the thread's other
    /// work run, then go on.
    Yield,
}

impl Intake {
    pub fn new(seq_limit: u64) -> Intake {
        Intake {
            held: VecDeque::new(),
            stop: Stop::Open,
            seq_limit,
            reserving: false,
            turn: 0,
        }
    }

    /// Events read from the PTY, to apply in order.
    pub fn read(&mut self, batch: impl IntoIterator<Item = PtyEvent>) {
        self.held.extend(batch);
    }

    /// The next thing to do, given the last seq sent and whether an output
    /// of that many bytes would evict pinned frames.
    pub fn next(&mut self, last_seq: u64, would_pause: impl Fn(usize) -> bool) -> Next {
        if self.held.is_empty() {
            self.stop = Stop::Open;
            return Next::Read;
        }
        if self.turn >= TURN_BYTES {
            self.turn = 0;
            return Next::Yield;
        }
        let event = self.held.pop_front().expect("not empty: looked above");
        if let PtyEvent::Output { data, .. } = &event {
            let len = data.len();
            if last_seq >= self.seq_limit {
                self.held.push_front(event);
                self.stop = Stop::Seqs;
                return self.reserve(last_seq).map_or(Next::Wait, Next::Reserve);
            }
            if would_pause(len) {
                self.held.push_front(event);
                self.stop = Stop::Snapshot;
                return Next::Wait;
            }
            self.turn += len;
        }
        self.stop = Stop::Open;
        Next::Apply(event)
    }

    /// Output `seq` was sent: seqs through the next block are reserved
    /// once it is half used (`Some(upto)`: reserve them now).
    pub fn sent(&mut self, seq: u64) -> Option<u64> {
        if seq + SEQ_BLOCK / 2 >= self.seq_limit {
            self.reserve(seq)
        } else {
            None
        }
    }

    /// Starts a reservation above `last_seq` unless one is under way (or
    /// no store counts seqs).
    pub fn reserve(&mut self, last_seq: u64) -> Option<u64> {
        if self.reserving || self.seq_limit == u64::MAX {
            return None;
        }
        self.reserving = true;
        Some(last_seq + SEQ_BLOCK)
    }

    /// The reservation through `upto` is durable (`true`), or failed (it is
    /// asked again when intake next runs).
    pub fn reserved(&mut self, upto: u64, ok: bool) {
        self.reserving = false;
        if ok {
            self.seq_limit = self.seq_limit.max(upto);
        }
    }

    /// The pending snapshot was delivered: answers whether intake waited
    /// for it (then run it again).
    pub fn unpause(&mut self) -> bool {
        std::mem::replace(&mut self.stop, Stop::Open) == Stop::Snapshot
    }

    /// Seqs through this one may be sent.
    pub fn seq_limit(&self) -> u64 {
        self.seq_limit
    }

    /// The ring was refilled from the store up to `last_seq`: seqs above it
    /// need a reservation again.
    pub fn limit_to(&mut self, last_seq: u64) {
        self.seq_limit = last_seq;
    }

    /// A new run of the program: nothing of the last one is held.
    pub fn restart(&mut self) {
        self.held.clear();
        self.stop = Stop::Open;
    }
}
