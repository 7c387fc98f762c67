//! A node's CPU budget for keeping screen models warm in the
//! background: passes that feed a model the output it has not seen yet,
//! so the next snapshot costs milliseconds instead of a replay of the ring.
//! One background pass runs at a time, and together they take at most
//! `WARM_SHARE` of one core; a snapshot someone waits for never waits for
//! this budget. Pure bookkeeping over instants; the session runs the passes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The share of one core that background warming may take.
pub const WARM_SHARE: f64 = 0.25;
/// Output a model may lag behind before a background pass is worth it.
pub const WARM_LAG: u64 = 64 << 10;
/// The most output one background pass feeds (a snapshot asked for
/// meanwhile waits for it at most `screen_cache::OVERTAKE_AFTER`).
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

    /// A pass ended at `now` after using `cpu` of a core: the next one
    /// waits so that passes take at most the share of one core.
    pub fn end(&mut self, now: Instant, cpu: Duration) {
        self.running = false;
        self.next_free = Some(now + cpu.mul_f64(1.0 / self.share - 1.0));
    }
}

/// A node's warming budget, shared by its sessions (`SessionSettings`).
#[derive(Debug, Clone)]
pub struct Warmth(Arc<Mutex<Budget>>);

impl Default for Warmth {
    fn default() -> Self {
        Warmth(Arc::new(Mutex::new(Budget::new(WARM_SHARE))))
    }
}

impl Warmth {
    /// Takes the budget for a background pass now, or says how long to
    /// wait before asking again.
    pub fn begin(&self) -> Result<Ticket, Duration> {
        lock(&self.0).begin(Instant::now()).map(|()| Ticket {
            budget: self.0.clone(),
            cpu_at: None,
            used: Duration::ZERO,
        })
    }
}

/// A background pass under way. `start` and `stop` on the thread that
/// does the work measure the CPU it used there (no lock: that thread is in
/// the idle class, and a lock it held while preempted would stall every
/// session that asks the budget); dropping the ticket charges it, on the
/// session's thread (a ticket of a pass that panicked charges what was
/// measured, nothing).
#[derive(Debug)]
pub struct Ticket {
    budget: Arc<Mutex<Budget>>,
    cpu_at: Option<Duration>,
    used: Duration,
}

impl Ticket {
    /// The work starts on this thread.
    pub fn start(&mut self) {
        self.cpu_at = thread_cpu();
    }

    /// The work is done: measures this thread's CPU since `start`.
    pub fn stop(&mut self) {
        self.used = match (self.cpu_at.take(), thread_cpu()) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => Duration::ZERO,
        };
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        lock(&self.budget).end(Instant::now(), self.used);
    }
}

/// CPU time the calling thread has used.
fn thread_cpu() -> Option<Duration> {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).ok()?;
    Some(Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32))
}

fn lock(budget: &Mutex<Budget>) -> std::sync::MutexGuard<'_, Budget> {
    // The budget holds plain values: one a panicking holder left is fine.
    budget
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_take_at_most_the_share() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut b = Budget::new(0.25);
        assert_eq!(b.begin(t0), Ok(()));
        assert!(b.begin(t0).is_err(), "one pass at a time");
        // 10 ms of CPU at a quarter share: 30 ms of rest after it ends.
        b.end(t0 + ms(12), ms(10));
        assert_eq!(b.begin(t0 + ms(12)).unwrap_err(), ms(30));
        assert_eq!(b.begin(t0 + ms(42)), Ok(()));
        b.end(t0 + ms(43), ms(1));
        assert_eq!(b.begin(t0 + ms(46)), Ok(()));
    }

    #[test]
    fn a_ticket_charges_the_cpu_of_its_thread() {
        let own = Warmth::default();
        let mut ticket = own.begin().unwrap();
        ticket.start();
        let until = Instant::now() + Duration::from_millis(20);
        let mut spins = 0u64;
        while Instant::now() < until {
            spins = std::hint::black_box(spins + 1);
        }
        ticket.stop();
        drop(ticket);
        // The spin's CPU was charged: the next pass has to wait.
        let wait = own.begin().unwrap_err();
        assert!(wait > Duration::ZERO);
    }
}
