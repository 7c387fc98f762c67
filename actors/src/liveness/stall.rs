//! Host-stall crediting: how long this node itself could not run. A loaded
//! host (a build starving the CPU, memory reclaim, a SIGSTOP) makes every
//! client look silent; liveness decisions subtract the stall credited since
//! the last sign of life, so a starved node never blames a healthy peer.
//!
//! `StallTracker` is the pure logic (inputs: each tick's real interval and
//! the PSI reading; output: the credit). `StallClock` is the shared, cheap
//! to read handle: the credited total plus the lateness of a tick that is
//! overdue right now, so a reader that runs before the watchdog after a
//! stall already sees that stall.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Credits the stall of each watchdog tick.
#[derive(Debug, Clone)]
pub struct StallTracker {
    tick: Duration,
    /// The previous PSI `some total`, to credit its growth.
    last_psi: Option<Duration>,
    total: Duration,
}

impl StallTracker {
    pub fn new(tick: Duration) -> Self {
        StallTracker {
            tick,
            last_psi: None,
            total: Duration::ZERO,
        }
    }

    /// One tick. `elapsed` is the real time since the previous tick (the
    /// tick was due after `tick`); `psi_total` is the PSI memory `some
    /// total` now, when readable. Credits the larger of the tick's lateness
    /// and the PSI growth (max, not sum: both measure the same stall), the
    /// growth capped at `elapsed` (no more stall than time passed), and
    /// returns the credit.
    pub fn tick(&mut self, elapsed: Duration, psi_total: Option<Duration>) -> Duration {
        let lateness = elapsed.saturating_sub(self.tick);
        let growth = match (self.last_psi, psi_total) {
            (Some(before), Some(now)) => now.saturating_sub(before).min(elapsed),
            _ => Duration::ZERO,
        };
        if psi_total.is_some() {
            self.last_psi = psi_total;
        }
        let credit = lateness.max(growth);
        self.total += credit;
        credit
    }

    pub fn total(&self) -> Duration {
        self.total
    }
}

/// Parses the `some ... total=N` line of a PSI file (N in microseconds).
pub fn parse_psi_some_total(text: &str) -> Option<Duration> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    let total = line
        .split_whitespace()
        .find_map(|field| field.strip_prefix("total="))?;
    total.parse::<u64>().ok().map(Duration::from_micros)
}

/// A point on the stall clock: `StallClock::since` measures from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StallMark(u64);

/// The node's credited stall, shared by every actor (atomics only).
#[derive(Debug, Clone)]
pub struct StallClock(Arc<ClockInner>);

#[derive(Debug)]
struct ClockInner {
    base: Instant,
    tick_us: u64,
    /// Credited stall in µs; only the watchdog writes it.
    total_us: AtomicU64,
    /// When the watchdog last ticked, in µs after `base`.
    last_tick_us: AtomicU64,
}

impl StallClock {
    pub fn new(tick: Duration) -> Self {
        StallClock(Arc::new(ClockInner {
            base: Instant::now(),
            tick_us: tick.as_micros() as u64,
            total_us: AtomicU64::new(0),
            last_tick_us: AtomicU64::new(0),
        }))
    }

    /// The watchdog's report after a tick at `at`.
    pub fn record(&self, at: Instant, total: Duration) {
        let inner = &self.0;
        inner
            .total_us
            .store(total.as_micros() as u64, Ordering::Release);
        inner.last_tick_us.store(self.micros(at), Ordering::Release);
    }

    /// Credited stall so far, not counting an overdue tick.
    pub fn total(&self) -> Duration {
        Duration::from_micros(self.0.total_us.load(Ordering::Acquire))
    }

    pub fn mark(&self) -> StallMark {
        StallMark(self.now_us(Instant::now()))
    }

    /// Stall credited since `mark`, including the lateness of a tick that
    /// is overdue now (the watchdog may not have run yet after a stall).
    pub fn since(&self, mark: StallMark) -> Duration {
        Duration::from_micros(self.now_us(Instant::now()).saturating_sub(mark.0))
    }

    fn now_us(&self, now: Instant) -> u64 {
        let inner = &self.0;
        let total = inner.total_us.load(Ordering::Acquire);
        let last = inner.last_tick_us.load(Ordering::Acquire);
        let overdue = self
            .micros(now)
            .saturating_sub(last)
            .saturating_sub(inner.tick_us);
        total + overdue
    }

    fn micros(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.0.base).as_micros() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(100);
    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn on_time_ticks_credit_nothing() {
        let mut t = StallTracker::new(TICK);
        for _ in 0..10 {
            assert_eq!(t.tick(TICK, None), Duration::ZERO);
        }
        assert_eq!(t.tick(ms(90), None), Duration::ZERO, "early is not late");
        assert_eq!(t.total(), Duration::ZERO);
    }

    #[test]
    fn lateness_is_credited() {
        let mut t = StallTracker::new(TICK);
        assert_eq!(t.tick(ms(5100), None), ms(5000));
        assert_eq!(t.tick(ms(130), None), ms(30));
        assert_eq!(t.total(), ms(5030));
    }

    #[test]
    fn psi_growth_counts_from_the_second_reading() {
        let mut t = StallTracker::new(TICK);
        // The first reading is a baseline, however large.
        assert_eq!(t.tick(TICK, Some(ms(90_000))), Duration::ZERO);
        assert_eq!(t.tick(TICK, Some(ms(90_060))), ms(60));
        assert_eq!(t.total(), ms(60));
    }

    #[test]
    fn the_larger_of_lateness_and_psi_not_the_sum() {
        let mut t = StallTracker::new(TICK);
        t.tick(TICK, Some(ms(0)));
        // 400 ms late, PSI grew 250 ms: 400.
        assert_eq!(t.tick(ms(500), Some(ms(250))), ms(400));
        // 50 ms late, PSI grew 300 ms: 300.
        assert_eq!(t.tick(ms(150), Some(ms(550))), ms(150), "capped at elapsed");
        assert_eq!(t.tick(ms(400), Some(ms(850))), ms(300));
        assert_eq!(t.total(), ms(850));
    }

    #[test]
    fn psi_that_goes_backwards_or_vanishes_credits_nothing() {
        let mut t = StallTracker::new(TICK);
        t.tick(TICK, Some(ms(1000)));
        assert_eq!(t.tick(TICK, Some(ms(10))), Duration::ZERO);
        assert_eq!(t.tick(TICK, None), Duration::ZERO);
        // A reading after a gap still measures from the last one seen.
        assert_eq!(t.tick(TICK, Some(ms(60))), ms(50));
    }

    #[test]
    fn psi_file_parses() {
        let text = "some avg10=0.00 avg60=0.00 avg300=0.00 total=123456\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=99\n";
        assert_eq!(
            parse_psi_some_total(text),
            Some(Duration::from_micros(123_456))
        );
        assert_eq!(parse_psi_some_total("full total=5\n"), None);
        assert_eq!(parse_psi_some_total("some total=x\n"), None);
        assert_eq!(parse_psi_some_total(""), None);
    }

    #[test]
    fn clock_counts_credit_and_overdue_ticks() {
        let clock = StallClock::new(TICK);
        let start = clock.0.base;
        // A tick recorded "now" with 2 s of credit: a mark taken before
        // the record sees the 2 s.
        let mark = clock.mark();
        clock.record(Instant::now(), ms(2000));
        let since = clock.since(mark);
        assert!(since >= ms(2000) && since < ms(2100), "{since:?}");
        // A tick overdue by 3 s counts before the watchdog reports it.
        clock.record(start, ms(2000));
        let overdue = clock.now_us(start + ms(3100)) - clock.now_us(start);
        assert_eq!(overdue, 3_000_000);
        // And reporting it does not count it twice.
        let before = clock.now_us(start + ms(3100));
        clock.record(start + ms(3100), ms(5000));
        assert_eq!(clock.now_us(start + ms(3100)), before);
    }
}
