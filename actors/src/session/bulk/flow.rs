//! One session's output rate and the CPU weight of its flooding job:
//! bulk or not each second, the job's nice value and its move into the
//! bulk cgroup, and giving both back (the rule: `bulk`'s doc).

use std::time::{Duration, Instant};

use nix::unistd::Pid;

use super::{is_bulk, Burst, Typed, BULK_NICE, CALM_RATE};

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
    /// ends at the first second under `CALM_RATE`: a nice value starves
    /// nobody, so a job that prints little has stopped flooding.
    niced: Option<Niced>,
    /// The group in the bulk cgroup (`cpu_group`) and the cgroup it came
    /// from, while it is there.
    moved: Option<(i32, std::path::PathBuf)>,
    /// Giving a group its nice value back was refused (no privilege):
    /// not tried again.
    cannot_restore: bool,
    /// The session looks for input on a timer (`watch_typing`).
    watching: bool,
}

/// A group given `BULK_NICE`, and the nice value its leader had (given
/// back).
#[derive(Debug, Clone, Copy)]
struct Niced {
    group: i32,
    was: i32,
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
        if self.niced.is_some_and(|n| !in_session(n.group, pid)) {
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
        if rate < CALM_RATE as f64 && self.moved.is_none() {
            self.give_nice_back(pid);
        }
        if !self.bulk || (recent && !crate::os::may_lower_nice()) {
            return;
        }
        let Some(group) = self
            .niced
            .map(|n| n.group)
            .or(self.moved.as_ref().map(|(group, _)| *group))
            .or_else(|| flooding_group(pid, foreground()))
        else {
            return;
        };
        if self.niced.is_none() {
            self.niced = lower(group);
            if self.niced.is_some() {
                tracing::debug!(
                    pid,
                    group,
                    rate,
                    "a flooding program gets a lower CPU weight"
                );
            }
        }
        if recent {
            return;
        }
        if self.moved.is_none() {
            if let Some(bulk) = crate::session::cpu_group::bulk_group() {
                match bulk.enter(group) {
                    Ok(from) => self.moved = Some((group, from)),
                    Err(e) => tracing::debug!(group, "a flooding group stays in its cgroup: {e}"),
                }
            }
        }
    }

    /// A look while the job has a nice value only (not the bulk cgroup):
    /// a second without output ends its flood too (`CALM_RATE`).
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
    /// (`pty::Lane`).
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
    /// its nice value back, if it is still the program's (a group id the
    /// job left behind may be another's now).
    pub fn input(&mut self, typed: &Typed, pid: i32) {
        self.input_at(typed, pid, Instant::now());
    }

    fn input_at(&mut self, typed: &Typed, pid: i32, now: Instant) {
        if !self.burst.input_came(typed) {
            return;
        }
        self.since = now;
        self.bytes = 0;
        self.typed(pid);
    }

    fn typed(&mut self, pid: i32) {
        self.bulk = false;
        if let Some((group, from)) = self.moved.take() {
            if let (true, Some(bulk)) = (
                in_session(group, pid),
                crate::session::cpu_group::bulk_group(),
            ) {
                if let Err(e) = bulk.leave(group, &from) {
                    tracing::debug!(group, "cannot move a group back to its cgroup: {e}");
                }
            }
        }
        self.give_nice_back(pid);
    }

    /// The reniced group gets its nice value back, if it is still the
    /// program's (a group id the job left behind may be another's now).
    fn give_nice_back(&mut self, pid: i32) {
        let Some(Niced { group, was }) = self.niced else {
            return;
        };
        if !in_session(group, pid) {
            self.niced = None;
            self.cannot_restore = false;
            return;
        }
        if self.cannot_restore {
            return;
        }
        match renice(group, was) {
            Ok(()) => self.niced = None,
            Err(e) => {
                tracing::debug!(group, "cannot give a reniced group nice 0 back: {e}");
                self.cannot_restore = true;
            }
        }
    }
}

/// Gives `group` `BULK_NICE`, unless its leader runs there or lower
/// already (a `nice -n 19 make`): what it had, to give back. A group is
/// reniced member by member, so one that is refused (another user's
/// process in it) leaves the others reniced: they get their value back
/// at once.
fn lower(group: i32) -> Option<Niced> {
    let was = crate::os::nice_of(group)?;
    if was >= BULK_NICE {
        return None;
    }
    match renice(group, BULK_NICE) {
        Ok(()) => Some(Niced { group, was }),
        Err(e) => {
            tracing::debug!(group, "a flooding group keeps its CPU weight: {e}");
            let _ = renice(group, was);
            None
        }
    }
}

/// A second's output `rate` makes the program bulk unless it is
/// interactive.
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
        while !in_session(pid, pid) {
            assert!(t0.elapsed() < Duration::from_secs(30), "no session");
            std::thread::yield_now();
        }
        key(&t);
        f.output_at(1 << 10, &t, pid, || None, at(0));
        f.output_at(2 << 20, &t, pid, || None, at(1_001));
        nice.push(crate::os::nice_of(pid));
        let flooding = (f.is_bulk(), f.demoted());
        // A second slower than a flood but not calm: the weight stays low.
        f.output_at(512 << 10, &t, pid, || None, at(2_002));
        nice.push(crate::os::nice_of(pid));
        let slower = (f.is_bulk(), f.demoted());
        // A quiet second: the flood ended, the weight comes back.
        f.output_at(1 << 10, &t, pid, || None, at(3_003));
        nice.push(crate::os::nice_of(pid));
        let calm = (f.is_bulk(), f.demoted());
        // Again, and this time it ends with no output at all.
        f.output_at(2 << 20, &t, pid, || None, at(4_004));
        nice.push(crate::os::nice_of(pid));
        f.tick_at(&t, pid, || None, at(4_500));
        nice.push(crate::os::nice_of(pid));
        f.tick_at(&t, pid, || None, at(5_005));
        nice.push(crate::os::nice_of(pid));
        let silent = (f.is_bulk(), f.demoted());
        // A job its person niced themselves keeps its own value.
        rustix::process::setpriority_process(rustix::process::Pid::from_raw(pid), 19).unwrap();
        f.output_at(2 << 20, &t, pid, || None, at(6_006));
        nice.push(crate::os::nice_of(pid));
        let own = (f.is_bulk(), f.demoted());
        let _ = leader.kill();
        let _ = leader.wait();
        if !crate::os::may_lower_nice() {
            // Not tried where the nice value could not come back.
            let at_0 = [Some(0); 6];
            assert_eq!(nice, [&at_0[..], &[Some(19)]].concat(), "{flooding:?}");
            return;
        }
        assert_eq!(flooding, (true, true), "2 MiB in a second past the key");
        assert_eq!(slower, (false, true), "512 KiB in a second");
        assert_eq!(calm, (false, false), "1 KiB in a second");
        assert_eq!(silent, (false, false), "a second with no output");
        assert_eq!(own, (true, false), "its own nice 19");
        let n = Some(BULK_NICE);
        assert_eq!(nice, [n, n, Some(0), n, n, Some(0), Some(19)]);
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
