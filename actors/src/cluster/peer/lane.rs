//! Which of a link's two data streams carries a session's output to the
//! peer's mirror: the fast one while someone types into the session, until
//! it has printed `INTERACTIVE_BURST` since (`session::bulk::Burst`), the bulk
//! one otherwise, so an echo never waits behind another session's flood
//! queued on the link. The streams are
//! read side by side at the peer, so a session changes streams only when
//! nothing it sent is still on its way: its mirror has acked its last
//! seq, and nothing without a seq (an event, a resync) followed it.

use crate::directory::registry::SessionHandle;
use crate::session::bulk::{Burst, Typed};
use crate::session::SubId;

/// One of this node's sessions the peer mirrors.
pub struct Upstream {
    pub sub: SubId,
    pub handle: SessionHandle,
    typed: Typed,
    /// Output sent since the last input.
    burst: Burst,
    lane: Lane,
}

#[derive(Debug, Default, PartialEq)]
struct Lane {
    fast: bool,
    /// The last seq sent, and the mirror's last ack.
    sent: u64,
    acked: u64,
    /// Something without a seq was sent after `sent`.
    unsettled: bool,
}

impl Lane {
    /// The stream for the next message (`seq`: an output frame's).
    fn pick(&mut self, interactive: bool, seq: Option<u64>) -> bool {
        if interactive != self.fast && self.acked >= self.sent && !self.unsettled {
            self.fast = interactive;
        }
        match seq {
            Some(seq) => {
                self.sent = seq;
                self.unsettled = false;
            }
            None => self.unsettled = true,
        }
        self.fast
    }
}

impl Upstream {
    pub fn new(sub: SubId, handle: SessionHandle) -> Upstream {
        Upstream {
            sub,
            typed: handle.shared.typed.clone(),
            handle,
            burst: Burst::default(),
            lane: Lane::default(),
        }
    }

    /// The mirror absorbed output through `seq`.
    pub fn acked(&mut self, seq: u64) {
        self.lane.acked = self.lane.acked.max(seq);
    }

    /// Whether the next message (`seq` and `len`: an output frame's) takes
    /// the fast stream.
    pub fn fast(&mut self, seq: Option<u64>, len: usize) -> bool {
        self.burst.input_came(&self.typed);
        let interactive = self.burst.interactive(&self.typed);
        self.burst.count(len);
        self.lane.pick(interactive, seq)
    }

    /// A new subscription of the same mirror (`handle`: the session's
    /// now, which a revive renews), replaying after `from_seq`: the stream
    /// stays until the mirror acks what the new subscription sends (an
    /// ack from before it says nothing about the replayed frames).
    pub fn resubscribed(&mut self, sub: SubId, handle: SessionHandle, from_seq: Option<u64>) {
        self.sub = sub;
        self.typed = handle.shared.typed.clone();
        self.handle = handle;
        self.lane.acked = from_seq.unwrap_or(0).min(self.lane.acked);
        self.lane.unsettled = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_changes_streams_only_once_all_it_sent_is_acked() {
        let mut lane = Lane::default();
        assert!(!lane.pick(false, None), "subscribed: bulk");
        assert!(!lane.pick(false, Some(1)));
        assert!(!lane.pick(false, Some(2)));
        // Typed into, but 2 is on its way: stays.
        assert!(!lane.pick(true, Some(3)));
        lane.acked = 2;
        assert!(!lane.pick(true, Some(4)), "3 is still on its way");
        lane.acked = 4;
        assert!(lane.pick(true, Some(5)), "all acked: the fast stream");
        assert!(lane.pick(true, Some(6)));
        // No longer typed into: back once 6 is acked, and not while an
        // event sent after it may be on its way.
        lane.acked = 6;
        assert!(lane.pick(true, None), "an event on the fast stream");
        assert!(lane.pick(false, Some(7)), "the event is unacked");
        lane.acked = 7;
        assert!(!lane.pick(false, Some(8)));
    }
}
