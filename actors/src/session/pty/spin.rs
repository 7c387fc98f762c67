//! When a flood's reader waits on its CPU for the terminal's next push
//! instead of parking.
//!
//! A raw terminal's line discipline holds 4,095 bytes (`LDISC`). A read
//! that empties it while the program is still printing kicks the
//! terminal's flush worker, which moves the next bytes over some tens of
//! microseconds later. A reader that parks there is woken for each push:
//! about 250 sleeps and wake-ups a MiB, each of which costs more than the
//! wait itself on a virtual machine, where waking a vCPU is a trip
//! through the hypervisor (docs/benchmarks.md, issue 32, twenty-second
//! stop: a plain C reader of a `cat` flood went from 60 to 200 MB/s).
//!
//! So when the reads since the line discipline was last seen empty add up
//! to a full one, the reader waits at the next empty one for up to
//! `SPIN`, polling `FIONREAD` about once a microsecond (`within`), and
//! parks when the wait sees nothing come. Each wait needs a full line
//! discipline read since the last: a push that comes in pieces ends the
//! run, and the reader parks now and then. That is on purpose: a rule
//! that waited at every empty line discipline of a flood never parked,
//! took a CPU for the flood's reads alone, and an echo beside the flood
//! waited for a CPU (the same stop: p99 3.8 ms against 1.3). Nor does a
//! reader wait while keys for another of the node's programs came since
//! its own program's last, within `bulk::INTERACTIVE_FOR`
//! (`Typed::elsewhere_since`, which the reader gives `Spin::allow`): a
//! wait holds a CPU, and on a small host the echo of the person typing
//! needs it (p99 3.2 ms against 0.84 beside a flood on the same thread). A
//! keystroke's echo or a burst under 4,095 bytes never waits. A wait
//! that sees nothing come costs 50 us of CPU; misses in a row let 0, 1,
//! 3, 7, ... up to `MAX_SKIP` chances go by before the next wait, and a
//! wait that sees a push forgets them, so a program that prints just
//! what fills the terminal and pauses, again and again, waits at one
//! chance in `MAX_SKIP + 1`.

use std::time::{Duration, Instant};

/// The longest a reader waits on its CPU for the flush worker's push
/// (it comes within 20-30 us here; a wait that fails costs this much
/// CPU).
pub const SPIN: Duration = Duration::from_micros(50);
/// What Linux's line discipline holds of a raw terminal's output when
/// full (`N_TTY_BUF_SIZE` less the one slot it keeps): reads this long
/// since it was last seen empty found it full, so the program wrote more
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
    /// Bytes read since the line discipline was last seen empty.
    run: usize,
    /// Chances to let go before waiting again.
    skip: u32,
    /// What the next wait that sees nothing sets `skip` to.
    backoff: u32,
    /// Waits are off: someone types into another of the node's programs.
    off: bool,
    /// Waits so far, for tests.
    #[cfg(test)]
    pub waits: usize,
}

impl Spin {
    /// Whether waits may happen (not while someone types into another
    /// of the node's programs: a wait holds a CPU their echo needs).
    pub fn allow(&mut self, allowed: bool) {
        self.off = !allowed;
    }

    /// A read took `n` bytes.
    pub fn took(&mut self, n: usize) {
        self.run += n;
    }

    /// The line discipline is empty: whether to wait for the flush
    /// worker's push. Starts a new run either way.
    pub fn worth_waiting(&mut self) -> bool {
        if std::mem::take(&mut self.run) < LDISC || self.off {
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
        // Each empty line discipline starts a new run: 3 bytes short of
        // full do not add up with the 3 KiB before.
        spin.took(LDISC - 1);
        assert!(!spin.worth_waiting());
        // A flood: 4,095 bytes in reads of any size.
        spin.took(1000);
        spin.took(LDISC - 1000);
        assert!(spin.worth_waiting());
        // A push in a piece: the run it starts is short, no wait.
        spin.waited(true);
        spin.took(2000);
        assert!(!spin.worth_waiting(), "a run after a wait starts anew");
    }

    /// A run that fills the line discipline, then empty: whether it
    /// waited.
    fn full(spin: &mut Spin) -> bool {
        spin.took(LDISC);
        spin.worth_waiting()
    }

    /// Of `chances` runs that fill the line discipline, each of whose
    /// waits misses, the ones that waited.
    fn misses_only(chances: usize) -> Vec<usize> {
        let mut spin = Spin::default();
        (0..chances)
            .filter(|_| {
                let waited = full(&mut spin);
                if waited {
                    spin.waited(false);
                }
                waited
            })
            .collect()
    }

    #[test]
    fn waits_that_see_nothing_come_grow_rarer() {
        // Each miss in a row lets 0, 1, 3, 7, ... chances go by.
        assert_eq!(misses_only(40), vec![0, 1, 3, 7, 15, 31]);
        // Bounded: after the first misses, one wait in `MAX_SKIP + 1`.
        let chances = 10 * (MAX_SKIP as usize + 1);
        let waits = misses_only(chances).len();
        assert!(waits <= 10 + 6, "{waits} waits in {chances} chances");
    }

    #[test]
    fn a_wait_that_sees_a_push_forgets_the_misses() {
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
        assert_eq!(spin.waits, 20);
    }

    #[test]
    fn no_wait_while_waits_are_off() {
        let mut spin = Spin::default();
        spin.allow(false);
        assert!(!full(&mut spin));
        spin.allow(true);
        assert!(full(&mut spin));
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
