//! Keeping the renderer's screen model equal to the node's across a
//! resize. A terminal that grows taller pulls rows back from its history,
//! which the client's model does not keep; so after a `resized` event the
//! attach asks for the session's screen and takes it in place of its own
//! model at the snapshot's seq: output already shown past that seq is
//! replayed on it (kept since the resize, bounded), and a snapshot ahead of
//! what was shown waits until the stream reaches its seq.

/// Output kept while a screen is awaited; past this the resync is given
/// up (the model stays as it is, close to the node's).
const MAX_KEPT: usize = 4 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snap {
    pub seq: u64,
    pub cols: u16,
    pub rows: u16,
    pub data: Vec<u8>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Apply {
    /// Take `snap` as the model, then feed `replay`.
    Now { snap: Snap, replay: Vec<Vec<u8>> },
    /// The snapshot is ahead of the stream: it is applied when the
    /// stream's seq reaches it (`Resync::output`).
    Wait,
    /// The output since the snapshot was not kept: nothing to do.
    GiveUp,
}

#[derive(Debug)]
pub struct Resync {
    /// The request id of the awaited `screen`.
    pub id: u64,
    /// Outputs shown since the resize, by seq.
    kept: Vec<(u64, Vec<u8>)>,
    bytes: usize,
    /// The newest seq shown when the resync started.
    since: u64,
    ahead: Option<Snap>,
}

impl Resync {
    pub fn new(id: u64, since: u64) -> Resync {
        Resync {
            id,
            kept: Vec::new(),
            bytes: 0,
            since,
            ahead: None,
        }
    }

    /// Output `seq` was shown. Returns the snapshot to take now when it is
    /// the one waited for; `Err` when too much output went by.
    pub fn output(&mut self, seq: u64, data: &[u8]) -> Result<Option<Snap>, ()> {
        if self.ahead.as_ref().is_some_and(|s| s.seq == seq) {
            return Ok(self.ahead.take());
        }
        if self.ahead.is_none() {
            self.bytes += data.len();
            if self.bytes > MAX_KEPT {
                return Err(());
            }
            self.kept.push((seq, data.to_vec()));
        }
        Ok(None)
    }

    /// The screen arrived; the stream has shown up to `shown`.
    pub fn snapshot(&mut self, snap: Snap, shown: u64) -> Apply {
        if snap.seq > shown {
            self.ahead = Some(snap);
            return Apply::Wait;
        }
        // The kept outputs must reach back to just after the snapshot.
        let first = self.kept.first().map_or(shown + 1, |(seq, _)| *seq);
        if snap.seq < self.since || first > snap.seq + 1 {
            return Apply::GiveUp;
        }
        let replay = self
            .kept
            .drain(..)
            .filter(|(seq, _)| *seq > snap.seq)
            .map(|(_, data)| data)
            .collect();
        Apply::Now { snap, replay }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(seq: u64) -> Snap {
        Snap {
            seq,
            cols: 10,
            rows: 5,
            data: b"s".to_vec(),
        }
    }

    #[test]
    fn a_snapshot_behind_the_stream_is_taken_with_what_came_after_it() {
        let mut r = Resync::new(7, 10);
        for seq in 11..=14 {
            assert_eq!(r.output(seq, &[seq as u8]), Ok(None));
        }
        assert_eq!(
            r.snapshot(snap(12), 14),
            Apply::Now {
                snap: snap(12),
                replay: vec![vec![13], vec![14]]
            }
        );
    }

    #[test]
    fn a_snapshot_ahead_waits_for_its_seq() {
        let mut r = Resync::new(7, 10);
        assert_eq!(r.snapshot(snap(12), 10), Apply::Wait);
        assert_eq!(r.output(11, b"x"), Ok(None));
        assert_eq!(r.output(12, b"y"), Ok(Some(snap(12))));
    }

    #[test]
    fn a_snapshot_from_before_the_resize_or_a_flood_gives_up() {
        let mut r = Resync::new(7, 10);
        assert_eq!(r.snapshot(snap(9), 10), Apply::GiveUp);
        let mut r = Resync::new(7, 10);
        let big = vec![0u8; 1 << 20];
        let over = (11..20).any(|seq| r.output(seq, &big).is_err());
        assert!(over, "bounded");
    }
}
