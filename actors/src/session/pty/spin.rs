//! When a flood's reader waits on its CPU for the terminal's next push
//! instead of parking.
//!
//! The line discipline holds 4 KiB (`LDISC`). A read
//! that empties it while the program is still printing kicks the
//! terminal's flush worker, which moves the next 4 KiB over a few tens of
//! microseconds later. A reader that parks there is woken for each push:
//! about 250 sleeps and wake-ups a MiB, each of which costs more than the
//! wait itself on a virtual machine, where waking a vCPU is a trip
//! through the hypervisor (docs/benchmarks.md, issue 32, twenty-second
//! stop: a plain C reader of a `cat` flood went from 60 to 200 MB/s).
//! So after a run of reads that found the line discipline full, the
//! reader polls it (`FIONREAD`, which never waits) for up to `SPIN`
//! before it parks. A keystroke's echo or a short burst never fills it,
//! so it never spins; a wait that sees nothing come (the burst ended at
//! a full buffer) makes the next ones rarer, so a program that prints 4
//! KiB at a time with pauses between costs at most one wait in
//! `MAX_SKIP + 1` of its bursts.

use std::time::{Duration, Instant};

/// The longest a reader waits on its CPU for the flush worker's push
/// (measured here: it comes within 20-30 us; a wait that fails costs
/// this much CPU).
pub const SPIN: Duration = Duration::from_micros(50);
/// What Linux's line discipline holds of a raw terminal's output when
/// full (`N_TTY_BUF_SIZE` less the one slot it keeps): a run of reads
/// this long since it was last seen empty found it full, so the program
/// wrote more than it holds and the flush worker has the rest.
pub const LDISC: usize = 4095;
/// After waits that saw nothing come, at most this many chances in a row
/// are let go without waiting.
const MAX_SKIP: u32 = 63;

/// One reader's record of its runs and waits.
#[derive(Debug, Default)]
pub struct Spin {
    /// Bytes read since the line discipline was last seen empty.
    run: usize,
    /// Chances to let go before waiting again.
    skip: u32,
    /// What the next wait that sees nothing sets `skip` to.
    backoff: u32,
    /// Waits so far, for tests.
    #[cfg(test)]
    pub waits: usize,
}

impl Spin {
    /// A wake-up's first read took `n` bytes (the line discipline was
    /// empty before it: the reader had parked, or its last run ended).
    pub fn woke(&mut self, n: usize) {
        self.run = n;
    }

    /// A read took `n` bytes more.
    pub fn took(&mut self, n: usize) {
        self.run += n;
    }

    /// The line discipline is empty: whether to wait for the flush
    /// worker's push. Starts a new run either way.
    pub fn worth_waiting(&mut self) -> bool {
        if std::mem::take(&mut self.run) < LDISC {
            return false;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }

    /// A wait ended: with a push, or with nothing come in time.
    pub fn waited(&mut self, pushed: bool) {
        #[cfg(test)]
        {
            self.waits += 1;
        }
        if pushed {
            self.backoff = 0;
        } else {
            self.skip = self.backoff;
            self.backoff = (self.backoff * 2 + 1).min(MAX_SKIP);
        }
    }
}

/// Polls `ready` until it says yes or `spin` has passed: whether it did.
pub fn within(spin: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if ready() {
            return true;
        }
        if start.elapsed() >= spin {
            return false;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_run_that_filled_the_line_discipline_waits() {
        let mut spin = Spin::default();
        // An echo: a few bytes, then empty.
        spin.woke(3);
        assert!(!spin.worth_waiting());
        // A burst of 3 KiB in two reads: the buffer never filled.
        spin.woke(2048);
        spin.took(1024);
        assert!(!spin.worth_waiting());
        // A flood: 4 KiB in reads of any size.
        spin.woke(1000);
        spin.took(LDISC - 1000);
        assert!(spin.worth_waiting());
        // Each empty line discipline starts a new run.
        assert!(!spin.worth_waiting(), "nothing read since");
    }

    #[test]
    fn waits_that_see_nothing_come_grow_rarer_until_one_sees_a_push() {
        let mut spin = Spin::default();
        let full = |spin: &mut Spin| {
            spin.woke(LDISC);
            spin.worth_waiting()
        };
        // The first miss costs no chance; each further miss in a row
        // lets 1, 3, 7, ... go by.
        let mut waits = Vec::new();
        for _ in 0..40 {
            let waited = full(&mut spin);
            waits.push(waited);
            if waited {
                spin.waited(false);
            }
        }
        let at: Vec<usize> = (0..40).filter(|&i| waits[i]).collect();
        assert_eq!(at, vec![0, 1, 3, 7, 15, 31]);
        // Bounded: at most one wait in `MAX_SKIP + 1` chances.
        let mut spin = Spin::default();
        let mut waited = 0;
        for _ in 0..10 * (MAX_SKIP as usize + 1) {
            if full(&mut spin) {
                waited += 1;
                spin.waited(false);
            }
        }
        assert!(waited <= 10 + 7, "{waited} waits");
        // A push resets it: the next full run waits, and so on.
        let mut spin = Spin::default();
        for _ in 0..5 {
            assert!(full(&mut spin));
            spin.waited(false);
            assert!(full(&mut spin));
            spin.waited(false);
            assert!(!full(&mut spin), "two misses in a row let one go");
            assert!(full(&mut spin));
            spin.waited(true);
            assert!(full(&mut spin), "a push restores waiting at once");
            spin.waited(true);
        }
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
