//! Reconnect pacing for `attach`: jittered exponential backoff, bounded,
//! reset once a connection has resumed the stream.

use std::time::Duration;

/// The first retry waits about this long.
const FIRST: Duration = Duration::from_millis(250);
/// No retry waits longer than this.
const MAX: Duration = Duration::from_secs(8);

#[derive(Debug, Default)]
pub struct Backoff {
    /// Retries since the stream last resumed.
    attempts: u32,
}

impl Backoff {
    /// The wait before the next retry: `FIRST` doubled per attempt up to
    /// `MAX`, then a random point in its upper half, so that many clients
    /// cut by one failure do not come back in step.
    pub fn next_delay(&mut self) -> Duration {
        let base = FIRST.saturating_mul(1 << self.attempts.min(16)).min(MAX);
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
        let delays: Vec<Duration> = (0..12).map(|_| b.next_delay()).collect();
        assert_eq!(b.attempts(), 12);
        for (i, d) in delays.iter().enumerate() {
            let base = FIRST.saturating_mul(1 << i).min(MAX);
            assert!(*d >= base / 2 && *d <= base, "attempt {i}: {d:?}");
        }
        assert!(delays.iter().all(|d| *d <= MAX));
        // Ten seconds of retries are a handful, not thousands.
        let mut spent = Duration::ZERO;
        let mut b = Backoff::default();
        let mut tries = 0;
        while spent < Duration::from_secs(10) {
            spent += b.next_delay();
            tries += 1;
        }
        assert!(tries <= 12, "{tries} retries in 10 s");
        b.reset();
        assert_eq!(b.attempts(), 0);
        assert!(b.next_delay() <= FIRST);
    }
}
