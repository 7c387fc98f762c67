//! Reconnect pacing for `attach`: jittered exponential backoff, bounded,
//! reset once a connection has resumed the stream. A node that said it is
//! going away (close 1001: a restart or an upgrade) is tried again at a
//! quick, flat pace for a while (a refused connect costs the node's host
//! nothing but a reset), so the attach resumes within about 100 ms of the
//! node serving again.

use std::time::Duration;

/// The first retry waits about this long.
const FIRST: Duration = Duration::from_millis(100);
/// No retry waits longer than this.
const MAX: Duration = Duration::from_secs(8);
/// While the node is restarting: every retry waits about this long...
const RESTART_PACE: Duration = Duration::from_millis(100);
/// ...for this many retries (about 20 s), then the backoff grows as for
/// any lost link.
const RESTART_TRIES: u32 = 270;

#[derive(Debug, Default)]
pub struct Backoff {
    /// Backed-off retries since the stream last resumed.
    attempts: u32,
    /// Retries at the restart pace since then (counted apart: they do not
    /// lengthen the backoff that follows them).
    restart_tries: u32,
}

impl Backoff {
    /// The wait before the next retry: `FIRST` doubled per attempt up to
    /// `MAX`, then a random point in its upper half, so that many clients
    /// cut by one failure do not come back in step. While the node is
    /// `restarting` (it closed with 1001), `RESTART_PACE` for the first
    /// `RESTART_TRIES`.
    pub fn next_delay(&mut self, restarting: bool) -> Duration {
        let base = if restarting && self.restart_tries < RESTART_TRIES {
            self.restart_tries += 1;
            RESTART_PACE
        } else {
            let base = FIRST.saturating_mul(1 << self.attempts.min(16)).min(MAX);
            self.attempts += 1;
            base
        };
        let half = base / 2;
        half + half.mul_f64(rand::random::<f64>())
    }

    /// Retries since the stream last resumed, of either kind.
    pub fn attempts(&self) -> u32 {
        self.attempts + self.restart_tries
    }

    pub fn reset(&mut self) {
        *self = Backoff::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_a_bound_with_jitter_and_resets() {
        let mut b = Backoff::default();
        let delays: Vec<Duration> = (0..12).map(|_| b.next_delay(false)).collect();
        assert_eq!(b.attempts(), 12);
        for (i, d) in delays.iter().enumerate() {
            let base = FIRST.saturating_mul(1 << i).min(MAX);
            assert!(*d >= base / 2 && *d <= base, "attempt {i}: {d:?}");
        }
        assert!(
            delays[0] <= Duration::from_millis(100),
            "the first is quick"
        );
        assert!(delays.iter().all(|d| *d <= MAX));
        // Ten seconds of retries are a handful, not thousands.
        let mut spent = Duration::ZERO;
        let mut b = Backoff::default();
        let mut tries = 0;
        while spent < Duration::from_secs(10) {
            spent += b.next_delay(false);
            tries += 1;
        }
        assert!(tries <= 14, "{tries} retries in 10 s");
        b.reset();
        assert_eq!(b.attempts(), 0);
        assert!(b.next_delay(false) <= FIRST);
    }

    #[test]
    fn a_restarting_node_is_tried_at_a_flat_quick_pace_then_backed_off() {
        let mut b = Backoff::default();
        let mut spent = Duration::ZERO;
        for i in 0..RESTART_TRIES {
            let d = b.next_delay(true);
            assert!(
                d >= RESTART_PACE / 2 && d <= RESTART_PACE,
                "retry {i}: {d:?}"
            );
            spent += d;
        }
        // A restart of up to ~13 s (the pace's low half) is met within
        // `RESTART_PACE` of the node serving.
        assert!(spent >= Duration::from_secs(13), "{spent:?}");
        // Past it, a node that does not come back is backed off from.
        let later: Vec<Duration> = (0..10).map(|_| b.next_delay(true)).collect();
        assert!(
            later[0] <= FIRST && later[9] > Duration::from_secs(2),
            "{later:?}"
        );
    }

    #[test]
    fn retries_at_the_restart_pace_do_not_lengthen_a_later_backoff() {
        let mut b = Backoff::default();
        for _ in 0..10 {
            b.next_delay(true);
        }
        // The node served, then the link was lost before a resume: the
        // backoff starts from its first step.
        assert!(b.next_delay(false) <= FIRST);
        assert_eq!(b.attempts(), 11);
    }
}
