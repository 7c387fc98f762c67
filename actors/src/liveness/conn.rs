//! When a silent peer is stale or may be reaped: pure logic over the time
//! since the last sign of life, minus the host stall credited since then
//! (PROTOCOL.md section 9). Stale is a mark, never a teardown; only a
//! connection that holds nothing (no subscription) is ever reaped.

use std::time::{Duration, Instant};

use crate::liveness::stall::{StallClock, StallMark};

/// One peer's liveness state.
#[derive(Debug, Clone)]
pub struct Liveness {
    last_heard: Instant,
    /// The stall clock when last heard: stall since then is not silence.
    mark: StallMark,
    stale: bool,
}

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Alive,
    /// Silent past the stale bound for the first time this episode.
    BecameStale,
    /// Still stale (already reported).
    Stale,
    /// Silent past the reap bound and holding nothing: close it.
    Reap,
}

impl Liveness {
    pub fn new(clock: &StallClock) -> Self {
        Liveness {
            last_heard: Instant::now(),
            mark: clock.mark(),
            stale: false,
        }
    }

    /// A sign of life; returns whether this ends a stale episode.
    pub fn heard(&mut self, clock: &StallClock) -> bool {
        self.last_heard = Instant::now();
        self.mark = clock.mark();
        std::mem::take(&mut self.stale)
    }

    pub fn is_stale(&self) -> bool {
        self.stale
    }

    /// Silence since the last sign of life that the node was awake for.
    pub fn silent(&self, clock: &StallClock) -> Duration {
        self.last_heard
            .elapsed()
            .saturating_sub(clock.since(self.mark))
    }

    /// Judges `silent` (from `silent()`); `reapable` when the peer holds
    /// nothing a close would lose.
    pub fn check(
        &mut self,
        silent: Duration,
        stale_after: Duration,
        reap_after: Duration,
        reapable: bool,
    ) -> Verdict {
        if reapable && silent > reap_after {
            return Verdict::Reap;
        }
        if silent > stale_after {
            if self.stale {
                return Verdict::Stale;
            }
            self.stale = true;
            return Verdict::BecameStale;
        }
        Verdict::Alive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STALE: Duration = Duration::from_secs(45);
    const REAP: Duration = Duration::from_secs(120);

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn stale_once_per_episode_then_recovers() {
        let clock = StallClock::new(Duration::from_millis(100));
        let mut l = Liveness::new(&clock);
        assert_eq!(l.check(s(10), STALE, REAP, false), Verdict::Alive);
        assert_eq!(l.check(s(46), STALE, REAP, false), Verdict::BecameStale);
        assert_eq!(l.check(s(60), STALE, REAP, false), Verdict::Stale);
        assert!(l.is_stale());
        assert!(l.heard(&clock), "hearing ends the episode");
        assert!(!l.heard(&clock), "only once");
        assert_eq!(l.check(s(46), STALE, REAP, false), Verdict::BecameStale);
    }

    #[test]
    fn only_a_peer_holding_nothing_is_reaped() {
        let clock = StallClock::new(Duration::from_millis(100));
        let mut l = Liveness::new(&clock);
        assert_eq!(l.check(s(121), STALE, REAP, false), Verdict::BecameStale);
        assert_eq!(l.check(s(10_000), STALE, REAP, false), Verdict::Stale);
        assert_eq!(l.check(s(119), STALE, REAP, true), Verdict::Stale);
        assert_eq!(l.check(s(121), STALE, REAP, true), Verdict::Reap);
    }

    #[test]
    fn credited_stall_is_not_silence() {
        let clock = StallClock::new(Duration::from_millis(100));
        let l = Liveness::new(&clock);
        // The node was stalled for 10 minutes (as the watchdog reports it).
        clock.record(Instant::now(), Duration::from_secs(600));
        assert!(l.silent(&clock) < Duration::from_secs(1));
    }
}
