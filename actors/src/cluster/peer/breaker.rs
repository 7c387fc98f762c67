//! The peer breaker, as pure logic: consecutive unanswered requests (pings
//! included) to one peer make a streak; at `STREAK` the link is dropped and
//! made again, unless this node itself was stalled for `HOLD_STALL` or more
//! over the streak (then the peer is not to blame: the link is held and
//! the streak starts over). Stall is the node's credited host stall total
//! (`StallClock::total`), read when each request was sent and now.

use std::time::Duration;

/// Consecutive unanswered requests that trip the breaker.
pub const STREAK: u32 = 6;
/// This node's own stall over a streak that holds the link instead.
pub const HOLD_STALL: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not yet: the streak is shorter than `STREAK`.
    Wait(u32),
    /// Drop the link and make it again.
    Trip,
    /// This node was stalled this long over the streak: keep the link.
    Hold(Duration),
}

#[derive(Debug, Default)]
pub struct Breaker {
    streak: u32,
    /// The stall total when the streak's first request was sent.
    first_sent_at: Option<Duration>,
}

impl Breaker {
    /// The peer answered something: the streak is over.
    pub fn answered(&mut self) {
        *self = Breaker::default();
    }

    /// A request sent when the stall total was `sent_at` went unanswered;
    /// the stall total is `now`.
    pub fn timed_out(&mut self, sent_at: Duration, now: Duration) -> Verdict {
        let first = *self.first_sent_at.get_or_insert(sent_at);
        self.streak += 1;
        if self.streak < STREAK {
            return Verdict::Wait(self.streak);
        }
        let stalled = now.saturating_sub(first);
        *self = Breaker::default();
        if stalled >= HOLD_STALL {
            Verdict::Hold(stalled)
        } else {
            Verdict::Trip
        }
    }

    pub fn streak(&self) -> u32 {
        self.streak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn six_in_a_row_trip_unless_this_node_stalled() {
        let mut b = Breaker::default();
        for i in 1..STREAK {
            assert_eq!(b.timed_out(S(0), S(1)), Verdict::Wait(i));
        }
        assert_eq!(b.timed_out(S(0), S(4)), Verdict::Trip);
        assert_eq!(b.streak(), 0, "a verdict starts over");

        // The node stalled 7 s over the streak: held, not tripped.
        for _ in 1..STREAK {
            b.timed_out(S(10), S(10));
        }
        assert_eq!(b.timed_out(S(12), S(17)), Verdict::Hold(S(7)));

        // An answer breaks a streak.
        for _ in 1..STREAK {
            b.timed_out(S(20), S(20));
        }
        b.answered();
        assert_eq!(b.timed_out(S(20), S(20)), Verdict::Wait(1));
    }
}
