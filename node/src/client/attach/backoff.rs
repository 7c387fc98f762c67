//! Reconnect pacing for `attach`: jittered exponential backoff, bounded,
//! reset once a connection has resumed the stream. A node that said it is
//! going away (close 1001: a restart or an upgrade) is tried again at a
//! quick, flat pace for a while, so the attach resumes within a few
//! hundred milliseconds of the node serving again.

use std::time::Duration;

/// The first retry waits about this long.
const FIRST: Duration = Duration::from_millis(100);
/// No retry waits longer than this.
const MAX: Duration = Duration::from_secs(8);
/// While the node is restarting: every retry waits about this long...
const RESTART_PACE: Duration = Duration::from_millis(200);
/// ...for this many retries (about 20 s), then the backoff grows as for
/// any lost link.
const RESTART_TRIES: u32 = 135;

#[derive(Debug, Default)]
pub struct Backoff {
    /// Retries since the stream last resumed.
    attempts: u32,
}

impl Backoff {
    /// The wait before the next retry: `FIRST` doubled per attempt up to
    /// `MAX`, then a random point in its upper half, so that many clients
    /// cut by one failure do not come back in step. While the node is
    /// `restarting` (it closed with 1001), `RESTART_PACE` for the first
    /// `RESTART_TRIES`.
    pub fn next_delay(&mut self, restarting: bool) -> Duration {
        let base = if restarting && self.attempts < RESTART_TRIES {
            RESTART_PACE
        } else {
            let doublings =
                self.attempts
                    .saturating_sub(if restarting { RESTART_TRIES } else { 0 });
            FIRST.saturating_mul(1 << doublings.min(16)).min(MAX)
        };
        self.attempts += 1;
        let half = base / 2;
        half + half.mul_f64(rand::random::<f64>())
    }

    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    pub fn reset(&mut self) {
        self.attempts = 0;
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
}
