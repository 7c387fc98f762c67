//! Interactive or bulk: the rule that decides whose output and whose
//! program go first, and the CPU weight of a program that floods.
//!
//! A session is **interactive** while input reached it within
//! `INTERACTIVE_FOR` (a person types, reads what came, types again) and
//! it has printed less than `INTERACTIVE_BURST` since (`Burst`: a build
//! started by a keystroke is bulk after its first screens); its output
//! goes ahead of bulk output on each connection that typed into it
//! (`front::connection::lanes`) and on the mesh (`cluster::peer::lane`).
//! A program that is not interactive and prints more than `BULK_RATE`
//! over a second is **bulk**: its output is read on the node's bulk
//! thread (`pty::Lane`) and its terminal's foreground process group
//! is demoted, in two steps:
//!
//! - **nice** `BULK_NICE` at once, even while it was typed into within
//!   `INTERACTIVE_FOR` (a build started by a key), unless its leader runs
//!   there or lower already (a `nice -n 19 make` keeps its own). A nice
//!   value lowers a share but starves nobody (nice 10 beside nice 0 is
//!   about a tenth of a core), so a job that prints little has stopped
//!   flooding: while the job has only its nice value, the first second
//!   under `CALM_RATE` gives it back, and a program a person just typed
//!   into answers them at full weight once its flood ends. A typed-into
//!   job is reniced only where the node may give the value back
//!   (`os::may_lower_nice`); elsewhere it keeps its weight.
//! - **the `termesh-bulk` CPU cgroup** (where the node may use one:
//!   `cpu_group`; its tasks run only when nothing else wants a CPU),
//!   once nobody typed into it for `INTERACTIVE_FOR`, and only while
//!   someone typed into another of the node's sessions within it: alone
//!   on the node, a flood there would wait behind the node's own work
//!   for it (its reads, shipping it) and run a quarter slower for nobody's
//!   sake (docs/benchmarks.md, issue 32). A job starved there may print
//!   nothing to say its flood ended, so this step, and the nice value
//!   with it, lasts until the next key into it, or until nobody has typed
//!   on the node for `INTERACTIVE_FOR` (it leaves and keeps its nice
//!   value while it floods); it is never taken while a key counts.
//!
//! So on a saturated machine the program you type into (and the node
//! serving you) runs first, while on an idle machine the flood is as fast
//! as before. Input undoes it: the reads come home at once, and within
//! `feed::TYPING_CHECK` (the session looks for input while the job is
//! demoted, since a starved job may print nothing) the group leaves the
//! cgroup and gets nice 0 back where the node may lower a nice value;
//! elsewhere a reniced group stays so until it exits (a shell's next
//! command starts at the shell's own nice value, since the group reniced
//! is the job that flooded).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

mod flow;
mod host;

pub use flow::Flow;

/// How long after its last input a session stays interactive.
pub const INTERACTIVE_FOR: Duration = Duration::from_secs(10);
/// Output over one second past which a program that is not interactive is
/// bulk.
pub const BULK_RATE: u64 = 1 << 20;
/// Output of a typed-into session since its last input past which it goes
/// as bulk again (until the next input): a build started by a keystroke
/// is bulk after its first screens.
pub const INTERACTIVE_BURST: u64 = 256 << 10;
/// The nice value of a bulk program's foreground group.
pub const BULK_NICE: i32 = 10;
/// Output over one second under which a job with only its nice value
/// lowered has stopped flooding and gets it back: well under `BULK_RATE`,
/// so a flood the lower weight (or a busy node) slows a little does not
/// go back and forth every second.
pub const CALM_RATE: u64 = BULK_RATE / 8;

/// Milliseconds on a monotonic clock (since this process first asked),
/// from 1: 0 means never.
fn mono_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    start.elapsed().as_millis() as u64 + 1
}

/// When input last reached a session's program, shared by its input
/// queue (which writes it) and the session (which reads it).
#[derive(Debug, Clone, Default)]
pub struct Typed(Arc<AtomicU64>);

impl Typed {
    pub fn now(&self) {
        self.0.store(mono_ms(), Ordering::Relaxed);
    }

    /// Marks each of `marks` with one reading of the clock (the same key
    /// reaching a program, its session and the node: equal marks).
    pub fn now_all(marks: &[&Typed]) {
        let now = mono_ms();
        for mark in marks {
            mark.0.store(now, Ordering::Relaxed);
        }
    }

    /// This (the node's mark) took input after `own`'s last, within
    /// `INTERACTIVE_FOR`: someone types into another of the node's
    /// programs.
    pub fn elsewhere_since(&self, own: &Typed) -> bool {
        self.elsewhere_since_at(own, mono_ms())
    }

    fn elsewhere_since_at(&self, own: &Typed, now_ms: u64) -> bool {
        self.recent_at(now_ms) && self.at() > own.at()
    }

    /// When input last came (a number that changes at each input; 0:
    /// never).
    pub fn at(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Input came within `INTERACTIVE_FOR`.
    pub fn recent(&self) -> bool {
        self.recent_at(mono_ms())
    }

    fn recent_at(&self, now_ms: u64) -> bool {
        let at = self.0.load(Ordering::Relaxed);
        at != 0 && now_ms.saturating_sub(at) < INTERACTIVE_FOR.as_millis() as u64
    }
}

/// Output since a session's last input: with `Typed`, the interactive
/// rule (input within `INTERACTIVE_FOR`, less than `INTERACTIVE_BURST`
/// printed since).
#[derive(Debug, Default, Clone)]
pub struct Burst {
    /// The input it counts from (`Typed::at`).
    at: u64,
    bytes: u64,
}

impl Burst {
    /// Input came since the last look: the count starts again (answers
    /// whether it did).
    pub fn input_came(&mut self, typed: &Typed) -> bool {
        let at = typed.at();
        let came = at != self.at;
        if came {
            self.at = at;
            self.bytes = 0;
        }
        came
    }

    /// The session is interactive now (before `count`ing what it prints
    /// next).
    pub fn interactive(&self, typed: &Typed) -> bool {
        typed.recent() && self.bytes < INTERACTIVE_BURST
    }

    pub fn count(&mut self, len: usize) {
        self.bytes += len as u64;
    }
}

fn is_bulk(rate: f64, interactive: bool) -> bool {
    !interactive && rate >= BULK_RATE as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_is_recent_until_the_interactive_time_passes() {
        let t = Typed::default();
        assert!(!t.recent(), "never typed");
        t.now();
        assert!(t.recent());
        let typed_at = t.0.load(Ordering::Relaxed);
        let window = INTERACTIVE_FOR.as_millis() as u64;
        assert!(t.recent_at(typed_at + window - 1));
        assert!(!t.recent_at(typed_at + window), "typed long ago");
    }

    #[test]
    fn typing_elsewhere_is_input_to_the_node_after_this_programs_last() {
        let (node, own) = (Typed::default(), Typed::default());
        let window = INTERACTIVE_FOR.as_millis() as u64;
        assert!(!node.elsewhere_since_at(&own, 1), "nobody typed");
        // A key for this program marks both alike.
        Typed::now_all(&[&node, &own]);
        let at = node.at();
        assert_eq!(at, own.at());
        assert!(!node.elsewhere_since_at(&own, at), "its own key");
        // A key for another program, later.
        node.0.store(at + 5, Ordering::Relaxed);
        assert!(node.elsewhere_since_at(&own, at + 5));
        assert!(
            !node.elsewhere_since_at(&own, at + 5 + window),
            "typed elsewhere long ago"
        );
        // This program typed into again.
        Typed::now_all(&[&node, &own]);
        assert!(!node.elsewhere_since(&own));
    }

    #[test]
    fn bulk_is_a_fast_printer_nobody_typed_into() {
        let fast = BULK_RATE as f64 * 2.0;
        assert!(is_bulk(fast, false));
        assert!(!is_bulk(fast, true), "typed into");
        assert!(!is_bulk(BULK_RATE as f64 / 2.0, false), "a trickle");
    }

    #[test]
    fn a_typed_session_is_interactive_until_its_burst() {
        let t = Typed::default();
        let mut b = Burst::default();
        assert!(!b.input_came(&t), "no input yet");
        assert!(!b.interactive(&t), "never typed into");
        t.now();
        assert!(b.input_came(&t));
        assert!(!b.input_came(&t), "the same input, seen");
        b.count(INTERACTIVE_BURST as usize - 1);
        assert!(b.interactive(&t), "within its burst");
        b.count(1);
        assert!(
            !b.interactive(&t),
            "a build started by a keystroke, past its first screens"
        );
        // The next key starts the count again (`Typed` moves on by a
        // millisecond at least).
        let seen = t.at();
        while t.at() == seen {
            t.now();
            std::hint::spin_loop();
        }
        assert!(b.input_came(&t));
        assert!(b.interactive(&t), "typed into again");
    }
}
