//! The bulk reader thread's nice value: `BULK_NICE_STEPS` below the
//! process's while someone typed on the node within `INTERACTIVE_FOR`,
//! the process's own otherwise, where the node may take it back up. On a
//! node nobody types on, a flood's reads then weigh as much as the node's
//! own work for it (shipping it): at nice 10 they were the slowest stage
//! of that pipeline, a tenth to a quarter off the flood's rate for
//! nobody's sake (docs/benchmarks.md, issue 32). Where the node may not
//! take a lowered value back (an unprivileged node at nice -10 with an
//! `RLIMIT_NICE` reaching 0 only, as the shipped unit runs), the thread
//! stays lowered from its start, as it always was before.

use std::cell::Cell;

use crate::session::bulk::Typed;

/// How far below the process the bulk readers' thread runs while someone
/// types on the node: a flood's reads (and the kernel's copying done in
/// their name) weigh a tenth of a keystroke's path on a busy core. A nice
/// value, not the idle class: the reader holds its session's seqs and log
/// locks while it writes a frame, and an idle-class thread preempted
/// there could hold them for as long as the cores stay busy.
pub const BULK_NICE_STEPS: i32 = 10;

/// Where the bulk thread's nice value stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Weight {
    /// The process's own.
    Base,
    /// `BULK_NICE_STEPS` below it.
    Lowered,
    /// Lowered for good: taking it back up is refused.
    Kept,
}

thread_local! {
    /// The bulk thread's (set as it starts, weighed before each read).
    static WEIGHT: Cell<Weight> = const { Cell::new(Weight::Kept) };
}

/// On the bulk thread as it starts: tries lowering and taking back; where
/// the node may not, the thread stays lowered (`Kept`).
pub fn start() {
    let reversible = renice(BULK_NICE_STEPS) && renice(0);
    let weight = if reversible {
        Weight::Base
    } else {
        renice(BULK_NICE_STEPS);
        Weight::Kept
    };
    WEIGHT.with(|w| w.set(weight));
}

/// On the bulk thread before each read: its weight for whether someone
/// typed on the node (`typed`).
pub fn weigh(typed: &Typed) {
    WEIGHT.with(|w| w.set(next(w.get(), typed.recent(), renice)));
}

/// The weight after a look at whether someone types (`typing`), renicing
/// the thread by `renice` (steps below the process: whether the kernel
/// took it).
fn next(now: Weight, typing: bool, mut renice: impl FnMut(i32) -> bool) -> Weight {
    match (now, typing) {
        (Weight::Base, true) => match renice(BULK_NICE_STEPS) {
            true => Weight::Lowered,
            false => Weight::Base,
        },
        (Weight::Lowered, false) => match renice(0) {
            true => Weight::Base,
            false => Weight::Kept,
        },
        (same, _) => same,
    }
}

fn renice(steps: i32) -> bool {
    crate::os::renice_thread(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_weight_follows_typing_and_stays_low_once_it_cannot_come_back() {
        let asked = std::cell::RefCell::new(Vec::new());
        let kernel = |ok: bool| {
            let asked = &asked;
            move |steps: i32| {
                asked.borrow_mut().push(steps);
                ok
            }
        };
        assert_eq!(next(Weight::Base, false, kernel(true)), Weight::Base);
        assert_eq!(next(Weight::Base, true, kernel(true)), Weight::Lowered);
        assert_eq!(next(Weight::Lowered, true, kernel(true)), Weight::Lowered);
        assert_eq!(next(Weight::Lowered, false, kernel(true)), Weight::Base);
        // Refused: lowering is tried again at the next look; taking back
        // is not.
        assert_eq!(next(Weight::Base, true, kernel(false)), Weight::Base);
        assert_eq!(next(Weight::Lowered, false, kernel(false)), Weight::Kept);
        assert_eq!(next(Weight::Kept, false, kernel(true)), Weight::Kept);
        assert_eq!(next(Weight::Kept, true, kernel(true)), Weight::Kept);
        assert_eq!(
            asked.into_inner(),
            [10, 0, 10, 0],
            "only changes go to the kernel"
        );
    }

    #[test]
    fn the_bulk_thread_starts_at_the_process_weight_where_it_may_come_back() {
        let own = crate::os::nice_of(std::process::id() as i32).unwrap();
        let (weight, nice) = std::thread::spawn(|| {
            start();
            let tid = rustix::thread::gettid().as_raw_nonzero().get();
            (WEIGHT.with(Cell::get), crate::os::nice_of(tid))
        })
        .join()
        .unwrap();
        match weight {
            Weight::Base => assert_eq!(nice, Some(own)),
            Weight::Kept => assert_eq!(nice, Some((own + BULK_NICE_STEPS).min(19))),
            Weight::Lowered => panic!("lowered with nobody typing"),
        }
    }
}
