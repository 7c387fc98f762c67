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
//! thread (`pty::io::Lane`) and its terminal's foreground process group
//! is demoted, in two steps:
//!
//! - **nice** `BULK_NICE` at once, even while it was typed into within
//!   `INTERACTIVE_FOR` (a build started by a key). A nice value lowers a
//!   share but starves nobody (nice 10 beside nice 0 is about a tenth of
//!   a core), so a job that prints little has stopped flooding: while
//!   the job has only its nice value, the first second it is not bulk
//!   gives nice 0 back, and a program a person just typed into answers
//!   them at full weight once its flood ends. A typed-into job is reniced
//!   only where the node may give nice 0 back (root, or `CAP_SYS_NICE`,
//!   or an `RLIMIT_NICE` that allows it, which its programs inherit);
//!   elsewhere it keeps its weight.
//! - **the `termesh-bulk` CPU cgroup** (where the node may use one:
//!   `cpu_group`; its tasks run only when nothing else wants a CPU),
//!   once nobody typed into it for `INTERACTIVE_FOR`. A job starved there
//!   may print nothing to say its flood ended, so this step, and the nice
//!   value with it, lasts until the next key, and is never taken while a
//!   key counts.
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

use nix::unistd::Pid;

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

/// One session's output rate, and the group it reniced.
#[derive(Debug)]
pub struct Flow {
    since: Instant,
    bytes: u64,
    /// Output since the last input.
    burst: Burst,
    /// Over `BULK_RATE` in the last full second, and not interactive.
    bulk: bool,
    /// The group given `BULK_NICE`, while it is. Alone (not `moved`), it
    /// ends at the first second the program is not bulk: a nice value
    /// starves nobody, so a job that prints little has stopped flooding.
    niced: Option<i32>,
    /// The group in the bulk cgroup (`cpu_group`) and the cgroup it came
    /// from, while it is there.
    moved: Option<(i32, std::path::PathBuf)>,
    /// Giving a group its nice value back was refused (no privilege):
    /// not tried again.
    cannot_restore: bool,
    /// The session looks for input on a timer (`watch_typing`).
    watching: bool,
}

impl Default for Flow {
    fn default() -> Self {
        Flow {
            since: Instant::now(),
            bytes: 0,
            burst: Burst::default(),
            bulk: false,
            niced: None,
            moved: None,
            cannot_restore: false,
            watching: false,
        }
    }
}

impl Flow {
    /// `n` bytes of output from the program (`pid` leads its session;
    /// `foreground` asks its terminal's foreground group, only when it is
    /// needed): once a second, decides bulk or not.
    pub fn output(
        &mut self,
        n: usize,
        typed: &Typed,
        pid: i32,
        foreground: impl FnOnce() -> Option<i32>,
    ) {
        self.output_at(n, typed, pid, foreground, Instant::now());
    }

    fn output_at(
        &mut self,
        n: usize,
        typed: &Typed,
        pid: i32,
        foreground: impl FnOnce() -> Option<i32>,
        now: Instant,
    ) {
        self.input_at(typed, pid, now);
        self.bytes += n as u64;
        self.burst.count(n);
        let elapsed = now.saturating_duration_since(self.since);
        if elapsed < Duration::from_secs(1) {
            return;
        }
        let rate = self.bytes as f64 / elapsed.as_secs_f64();
        self.since = now;
        self.bytes = 0;
        self.bulk = is_bulk(rate, self.burst.interactive(typed));
        // The job demoted has ended: a later one may be.
        if self.niced.is_some_and(|group| !in_session(group, pid)) {
            self.niced = None;
            self.cannot_restore = false;
        }
        if self
            .moved
            .as_ref()
            .is_some_and(|(group, _)| !in_session(*group, pid))
        {
            self.moved = None;
        }
        // Its reads go to the bulk thread past the burst, and it gets a
        // lower nice value, which ends with the flood (the module's doc);
        // the bulk cgroup, where a starved job may print nothing to say
        // it stopped flooding, only once nobody typed into it for
        // `INTERACTIVE_FOR`.
        let recent = typed.recent();
        if !self.bulk && self.moved.is_none() {
            self.give_nice_back(pid);
        }
        if !self.bulk || (recent && !may_lower_nice()) {
            return;
        }
        let Some(group) = self
            .niced
            .or(self.moved.as_ref().map(|(group, _)| *group))
            .or_else(|| flooding_group(pid, foreground()))
        else {
            return;
        };
        if self.niced.is_none() && renice(group, BULK_NICE).is_ok() {
            tracing::debug!(
                pid,
                group,
                rate,
                "a flooding program gets a lower CPU weight"
            );
            self.niced = Some(group);
        }
        if recent {
            return;
        }
        if self.moved.is_none() {
            if let Some(bulk) = super::cpu_group::bulk_group() {
                match bulk.enter(group) {
                    Ok(from) => self.moved = Some((group, from)),
                    Err(e) => tracing::debug!(group, "a flooding group stays in its cgroup: {e}"),
                }
            }
        }
    }

    /// A look while the job has a nice value only (not the bulk cgroup):
    /// a second without output ends its flood too.
    pub fn tick(&mut self, typed: &Typed, pid: i32, foreground: impl FnOnce() -> Option<i32>) {
        self.tick_at(typed, pid, foreground, Instant::now());
    }

    fn tick_at(
        &mut self,
        typed: &Typed,
        pid: i32,
        foreground: impl FnOnce() -> Option<i32>,
        now: Instant,
    ) {
        if self.niced.is_some() && self.moved.is_none() {
            self.output_at(0, typed, pid, foreground, now);
        }
    }

    /// The program flooded over the last full second and is not
    /// interactive: its output is read on the bulk thread
    /// (`pty::io::Lane`).
    pub fn is_bulk(&self) -> bool {
        self.bulk
    }

    /// Its job has a lower CPU weight now (reniced or in the bulk
    /// cgroup): the session looks for input (`typed`) without waiting for
    /// output, which a job starved by busy cores may not make.
    pub fn demoted(&self) -> bool {
        self.moved.is_some() || (self.niced.is_some() && !self.cannot_restore)
    }

    /// A look for input should be set up: the job is demoted and none
    /// is set up (`looked` when it has run).
    pub fn watch_typing(&mut self) -> bool {
        let start = self.demoted() && !self.watching;
        self.watching |= start;
        start
    }

    /// The look for input set up by `watch_typing` ran.
    pub fn looked(&mut self) {
        self.watching = false;
    }

    /// Looks for input since the last look: when some came, the program
    /// is interactive (its rate is measured afresh from now, so it stays
    /// so for a second at least); its job leaves the bulk cgroup and gets
    /// nice 0 back, if it is still the program's (a group id the job left
    /// behind may be another's now). Answers whether input came.
    pub fn input(&mut self, typed: &Typed, pid: i32) -> bool {
        self.input_at(typed, pid, Instant::now())
    }

    fn input_at(&mut self, typed: &Typed, pid: i32, now: Instant) -> bool {
        if !self.burst.input_came(typed) {
            return false;
        }
        self.since = now;
        self.bytes = 0;
        self.typed(pid);
        true
    }

    fn typed(&mut self, pid: i32) {
        self.bulk = false;
        if let Some((group, from)) = self.moved.take() {
            if let (true, Some(bulk)) = (in_session(group, pid), super::cpu_group::bulk_group()) {
                if let Err(e) = bulk.leave(group, &from) {
                    tracing::debug!(group, "cannot move a group back to its cgroup: {e}");
                }
            }
        }
        self.give_nice_back(pid);
    }

    /// The reniced group gets nice 0 back, if it is still the program's
    /// (a group id the job left behind may be another's now).
    fn give_nice_back(&mut self, pid: i32) {
        let Some(group) = self.niced else {
            return;
        };
        if !in_session(group, pid) {
            self.niced = None;
            return;
        }
        if self.cannot_restore {
            return;
        }
        match renice(group, 0) {
            Ok(()) => self.niced = None,
            Err(e) => {
                tracing::debug!(group, "cannot give a reniced group nice 0 back: {e}");
                self.cannot_restore = true;
            }
        }
    }
}

/// This process may lower a nice value it raised (root, `CAP_SYS_NICE`,
/// or an `RLIMIT_NICE` that reaches nice 0), asked once.
fn may_lower_nice() -> bool {
    static MAY: OnceLock<bool> = OnceLock::new();
    *MAY.get_or_init(|| {
        // `CAP_SYS_NICE` is bit 23 of the effective set.
        let capable = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let caps = s.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
                u64::from_str_radix(caps.trim(), 16).ok()
            })
            .is_some_and(|caps| caps & (1 << 23) != 0);
        // The limit is 20 - the lowest nice value allowed.
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nice).current;
        capable || rustix::process::geteuid().is_root() || limit.is_none_or(|l| l >= 20)
    })
}

/// A second's output `rate` makes the program bulk unless it is
/// interactive.
fn is_bulk(rate: f64, interactive: bool) -> bool {
    !interactive && rate >= BULK_RATE as f64
}

/// Group `group`'s leader is in the session `pid` leads.
fn in_session(group: i32, pid: i32) -> bool {
    nix::unistd::getsid(Some(Pid::from_raw(group))).is_ok_and(|s| s.as_raw() == pid)
}

/// The terminal's foreground group when it belongs to the program's
/// session (a shell's running job), else the program's own group.
fn flooding_group(pid: i32, foreground: Option<i32>) -> Option<i32> {
    match foreground {
        Some(fg) if in_session(fg, pid) => Some(fg),
        _ => in_session(pid, pid).then_some(pid),
    }
}

/// Gives process group `group` nice `nice`, and its session's autogroup
/// too where the kernel schedules by autogroup (`kernel.sched_autogroup_
/// enabled`, tasks outside any CPU cgroup: there a nice value weighs only
/// against the same session's processes, and every session, the node's
/// included, gets an equal share of the CPU).
fn renice(group: i32, nice: i32) -> std::io::Result<()> {
    let leader = rustix::process::Pid::from_raw(group).ok_or(std::io::ErrorKind::InvalidInput)?;
    rustix::process::setpriority_pgrp(Some(leader), nice)?;
    // Absent without autogroup support; refused like a nice value.
    if let Ok(mut autogroup) = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{group}/autogroup"))
    {
        use std::io::Write;
        let _ = autogroup.write_all(nice.to_string().as_bytes());
    }
    Ok(())
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

    /// A key: `Typed` moves on (by a millisecond at least).
    fn key(t: &Typed) {
        let seen = t.at();
        while t.at() == seen {
            t.now();
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_flood_started_by_a_key_is_bulk_at_its_first_second_past_the_burst() {
        // No such process: nothing is reniced, only the rule runs.
        let pid = i32::MAX;
        let (t, mut f) = (Typed::default(), Flow::default());
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let out = |f: &mut Flow, n: usize, ms: u64| f.output_at(n, &t, pid, || None, at(ms));
        key(&t);
        out(&mut f, 100 << 10, 0);
        out(&mut f, 100 << 10, 500);
        assert!(!f.is_bulk(), "no second's rate yet");
        out(&mut f, 2 << 20, 1_001);
        assert!(f.is_bulk(), "typed a second ago, but 2 MiB since the key");

        // A key brings it back at once and for a second at least, however
        // much it prints meanwhile.
        key(&t);
        out(&mut f, 4 << 20, 1_100);
        assert!(!f.is_bulk(), "typed into");
        out(&mut f, 4 << 20, 2_050);
        assert!(!f.is_bulk(), "the rate is measured afresh from the key");
        out(&mut f, 1 << 20, 2_101);
        assert!(f.is_bulk(), "a second past the key, past its burst");

        // Typed into and printing less than its burst each time: never bulk.
        let (t, mut f) = (Typed::default(), Flow::default());
        for round in 0..5u64 {
            key(&t);
            let start = round * 1_100;
            f.output_at(200 << 10, &t, pid, || None, at(start));
            f.output_at(1 << 10, &t, pid, || None, at(start + 1_050));
            assert!(!f.is_bulk(), "round {round}: a screen per key");
        }
    }

    #[test]
    fn a_key_started_flood_is_niced_until_it_stops_flooding() {
        // A program leading a session of its own, as a session's is.
        let mut leader = std::process::Command::new("setsid")
            .args(["sleep", "30"])
            .spawn()
            .unwrap();
        let pid = leader.id() as i32;
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let (t, mut f) = (Typed::default(), Flow::default());
        let mut nice = Vec::new();
        // `setsid` has made the session once `sleep` runs in it.
        while !in_session(pid, pid) && t0.elapsed() < Duration::from_secs(10) {
            std::thread::yield_now();
        }
        key(&t);
        f.output_at(1 << 10, &t, pid, || None, at(0));
        f.output_at(2 << 20, &t, pid, || None, at(1_001));
        nice.push(crate::os::nice_of(pid));
        let flooding = (f.is_bulk(), f.demoted());
        // A quiet second: the flood ended, the weight comes back.
        f.output_at(1 << 10, &t, pid, || None, at(2_002));
        nice.push(crate::os::nice_of(pid));
        let calm = (f.is_bulk(), f.demoted());
        // Again, and this time it ends with no output at all.
        f.output_at(2 << 20, &t, pid, || None, at(3_003));
        nice.push(crate::os::nice_of(pid));
        f.tick_at(&t, pid, || None, at(3_500));
        nice.push(crate::os::nice_of(pid));
        f.tick_at(&t, pid, || None, at(4_004));
        nice.push(crate::os::nice_of(pid));
        let silent = (f.is_bulk(), f.demoted());
        let _ = leader.kill();
        let _ = leader.wait();
        if !may_lower_nice() {
            // Not tried where nice 0 could not come back.
            assert_eq!(nice, [Some(0); 5], "{flooding:?}");
            return;
        }
        assert_eq!(flooding, (true, true), "2 MiB in a second past the key");
        assert_eq!(calm, (false, false), "1 KiB in a second");
        assert_eq!(silent, (false, false), "a second with no output");
        let n = Some(BULK_NICE);
        assert_eq!(nice, [n, Some(0), n, n, Some(0)]);
    }

    #[test]
    fn a_group_is_in_the_session_its_leader_is_in() {
        // A group of its own whose leader lives while it is asked (the
        // test's own group leader may have exited: a shell's `( ... ) &`).
        use std::os::unix::process::CommandExt;
        let mut leader = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let group = leader.id() as i32;
        let sid = nix::unistd::getsid(None).unwrap().as_raw();
        let ours = in_session(group, sid);
        let other = in_session(group, sid + 1);
        let _ = leader.kill();
        let _ = leader.wait();
        assert!(ours, "the leader is in this process's session");
        assert!(!other, "another session");
        assert!(!in_session(group, sid), "a group whose leader is gone");
    }
}
