//! When a flood's reader waits on its CPU for the terminal's next push
//! instead of parking.
//!
//! A raw terminal's line discipline holds 4,095 bytes (`LDISC`). A read
//! that empties it while the program is still printing kicks the
//! terminal's flush worker, which moves the next bytes over some tens of
//! microseconds later, in pieces of up to about 2 KiB. A reader that
//! parks there is woken for each push: about 250 sleeps and wake-ups a
//! MiB, each of which costs more than the wait itself on a virtual
//! machine, where waking a vCPU is a trip through the hypervisor
//! (docs/benchmarks.md, issue 32, twenty-second stop: a plain C reader of
//! a `cat` flood went from 60 to 200 MB/s).
//!
//! So once the reads since the reader last parked add up to a full line
//! discipline, the reader waits at each empty one for up to `SPIN`,
//! polling `FIONREAD` about once a microsecond (`within`), and parks only
//! when a wait sees nothing come. A keystroke's echo or a burst under
//! 4,095 bytes never waits. A run's waits end in one that sees nothing
//! come (50 us of CPU): a flood's end, or a pause in it. A run whose
//! waits saw a push was worth that (each push saved a sleep and a
//! wake-up). A run whose only wait was a miss (a program that printed
//! just what fills the terminal, then paused) was not: after each such
//! miss but the first in a row, 1, 3, 7, ... up to `MAX_SKIP` chances go
//! by before the next wait, so a program that does that forever waits at
//! one chance in `MAX_SKIP + 1`; a wait that sees a push forgets them.

use std::time::{Duration, Instant};

/// The longest a reader waits on its CPU for the flush worker's push
/// (it comes within 20-30 us here; a wait that fails costs this much
/// CPU).
pub const SPIN: Duration = Duration::from_micros(50);
/// What Linux's line discipline holds of a raw terminal's output when
/// full (`N_TTY_BUF_SIZE` less the one slot it keeps): reads this long
/// since the reader last parked found it full, so the program wrote more
/// than it holds and the flush worker has the rest.
pub const LDISC: usize = 4095;
/// After waits that saw nothing come, at most this many chances in a row
/// are let go without waiting.
const MAX_SKIP: u32 = 63;
/// Between two polls of the line discipline: `FIONREAD` takes the
/// terminal's lock that the flush worker's push takes too.
const POLL_GAP: Duration = Duration::from_micros(1);

/// One reader's record of its runs and waits.
#[derive(Debug, Default)]
pub struct Spin {
    /// Bytes read since the reader last parked (or chose to).
    run: usize,
    /// Chances to let go before waiting again.
    skip: u32,
    /// What the next run whose only wait sees nothing sets `skip` to.
    backoff: u32,
    /// A wait of this run saw a push.
    pushed: bool,
    /// Waits so far, for tests.
    #[cfg(test)]
    pub waits: usize,
}

impl Spin {
    /// A read took `n` bytes.
    pub fn took(&mut self, n: usize) {
        self.run += n;
    }

    /// The line discipline is empty: whether to wait for the flush
    /// worker's push. When not, the reader parks, and a new run starts.
    pub fn worth_waiting(&mut self) -> bool {
        if self.run >= LDISC && (self.pushed || self.skip == 0) {
            return true;
        }
        if self.run >= LDISC {
            self.skip -= 1;
        }
        self.run = 0;
        self.pushed = false;
        false
    }

    /// A wait ended: with a push (the run goes on, the misses before are
    /// forgotten), or with nothing come in time (the reader parks: a new
    /// run starts).
    pub fn waited(&mut self, pushed: bool) {
        #[cfg(test)]
        {
            self.waits += 1;
        }
        if pushed {
            self.pushed = true;
            self.backoff = 0;
        } else {
            self.run = 0;
            if !std::mem::take(&mut self.pushed) {
                self.skip = self.backoff;
                self.backoff = (self.backoff * 2 + 1).min(MAX_SKIP);
            }
        }
    }
}

/// Polls `ready` about once per `POLL_GAP` until it says yes or `spin`
/// has passed: whether it did.
pub fn within(spin: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if ready() {
            return true;
        }
        let polled = Instant::now();
        if polled - start >= spin {
            return false;
        }
        while polled.elapsed() < POLL_GAP {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_run_that_filled_the_line_discipline_waits() {
        let mut spin = Spin::default();
        // An echo: a few bytes, then empty.
        spin.took(3);
        assert!(!spin.worth_waiting());
        // A burst of 3 KiB in two reads: the buffer never filled.
        spin.took(2048);
        spin.took(1024);
        assert!(!spin.worth_waiting());
        // Each choice to park starts a new run: 3 bytes more do not add
        // up with the 3 KiB before.
        spin.took(LDISC - 1);
        assert!(!spin.worth_waiting());
        // A flood: 4,095 bytes in reads of any size.
        spin.took(1000);
        spin.took(LDISC - 1000);
        assert!(spin.worth_waiting());
        // A push that came in pieces: the run goes on, so the empty line
        // discipline after a small piece is waited at too.
        spin.waited(true);
        spin.took(100);
        assert!(spin.worth_waiting());
        // Until a wait sees nothing: the reader parks, a new run starts.
        spin.waited(false);
        spin.took(100);
        assert!(!spin.worth_waiting());
    }

    /// A run that fills the line discipline, then empty: whether it
    /// waited.
    fn full(spin: &mut Spin) -> bool {
        spin.took(LDISC);
        spin.worth_waiting()
    }

    #[test]
    fn waits_that_see_nothing_come_grow_rarer() {
        // Each miss in a row lets 0, 1, 3, 7, ... chances go by.
        let mut spin = Spin::default();
        let at: Vec<usize> = (0..40)
            .filter(|_| {
                let waited = full(&mut spin);
                if waited {
                    spin.waited(false);
                }
                waited
            })
            .collect();
        assert_eq!(at, vec![0, 1, 3, 7, 15, 31]);
        // Bounded: after the first misses, one wait in `MAX_SKIP + 1`.
        let chances = 10 * (MAX_SKIP as usize + 1);
        let mut spin = Spin::default();
        let waits = (0..chances)
            .filter(|_| {
                let waited = full(&mut spin);
                if waited {
                    spin.waited(false);
                }
                waited
            })
            .count();
        assert!(waits <= 10 + 6, "{waits} waits in {chances} chances");
    }

    #[test]
    fn a_run_with_a_push_is_worth_its_miss() {
        // Bursts of a push then a miss: each waits, twice.
        let mut spin = Spin::default();
        for _ in 0..100 {
            assert!(full(&mut spin));
            spin.waited(true);
            assert!(spin.worth_waiting(), "the run goes on after a push");
            spin.waited(false);
        }
        assert_eq!(spin.waits, 200);
        // After misses alone, the first wait that sees a push forgets
        // them: the next run waits at once.
        let mut spin = Spin::default();
        for _ in 0..3 {
            assert!(full(&mut spin));
            spin.waited(false);
            while !full(&mut spin) {}
        }
        spin.waited(true);
        spin.waited(false);
        assert!(full(&mut spin), "no chance let go");
    }

    #[test]
    fn a_wait_ends_with_the_push_or_at_its_bound() {
        let mut polls = 0;
        assert!(within(Duration::from_secs(60), || {
            polls += 1;
            polls == 3
        }));
        assert_eq!(polls, 3, "stops polling once it came");
        assert!(!within(Duration::ZERO, || false), "nothing came");
    }
}
