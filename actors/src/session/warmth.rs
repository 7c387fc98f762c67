//! The node-wide CPU budget for keeping screen models warm in the
//! background: passes that feed a model the output it has not seen yet,
//! so the next snapshot costs milliseconds instead of a replay of the ring.
//! One background pass runs at a time, and together they take at most
//! `WARM_SHARE` of one core; a snapshot someone waits for never waits for
//! this budget. Pure bookkeeping over instants; the session runs the passes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The share of one core that background warming may take.
pub const WARM_SHARE: f64 = 0.25;
/// Output a model may lag behind before a background pass is worth it.
pub const WARM_LAG: u64 = 64 << 10;
/// The most output one background pass feeds (a snapshot asked for
/// meanwhile waits at most for this much).
pub const WARM_STEP: u64 = 256 << 10;

/// When the next background pass may start.
#[derive(Debug)]
pub struct Budget {
    share: f64,
    next_free: Option<Instant>,
    running: bool,
}

impl Budget {
    pub const fn new(share: f64) -> Self {
        Budget {
            share,
            next_free: None,
            running: false,
        }
    }

    /// Takes the budget for a pass starting `now`, or says how long to
    /// wait (another pass is running: a short while).
    pub fn begin(&mut self, now: Instant) -> Result<(), Duration> {
        if self.running {
            return Err(Duration::from_millis(5));
        }
        if let Some(free) = self.next_free {
            if free > now {
                return Err(free - now);
            }
        }
        self.running = true;
        Ok(())
    }

    /// A pass that began at `started` took `took`: the next one waits so
    /// that passes take at most the share.
    pub fn end(&mut self, started: Instant, took: Duration) {
        self.running = false;
        let rest = took.mul_f64(1.0 / self.share - 1.0);
        self.next_free = Some(started + took + rest);
    }
}

static BUDGET: Mutex<Budget> = Mutex::new(Budget::new(WARM_SHARE));

/// Takes the node's budget for a background pass now, or says how long to
/// wait before asking again.
pub fn begin() -> Result<Ticket, Duration> {
    let now = Instant::now();
    lock().begin(now).map(|()| Ticket { started: now })
}

/// A background pass under way: dropping it gives the budget back, charged
/// with the time it took.
#[derive(Debug)]
pub struct Ticket {
    started: Instant,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let took = self.started.elapsed();
        lock().end(self.started, took);
    }
}

fn lock() -> std::sync::MutexGuard<'static, Budget> {
    // The budget holds plain values: one a panicking holder left is fine.
    BUDGET
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_take_at_most_the_share() {
        let t0 = Instant::now();
        let mut b = Budget::new(0.25);
        assert_eq!(b.begin(t0), Ok(()));
        assert!(b.begin(t0).is_err(), "one pass at a time");
        b.end(t0, Duration::from_millis(10));
        // 10 ms of work at a quarter share: the next pass 40 ms after the
        // first began.
        let wait = b.begin(t0 + Duration::from_millis(10)).unwrap_err();
        assert_eq!(wait, Duration::from_millis(30));
        assert_eq!(b.begin(t0 + Duration::from_millis(40)), Ok(()));
        b.end(t0 + Duration::from_millis(40), Duration::from_millis(1));
        assert_eq!(b.begin(t0 + Duration::from_millis(44)), Ok(()));
    }
}
