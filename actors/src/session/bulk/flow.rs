//! One session's output rate and the CPU weight of its flooding job:
//! bulk or not each second, the job's nice value and its move into the
//! bulk cgroup, and giving both back (the rule: `bulk`'s doc). Plain
//! logic: the system's part is a `Host`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::host::{Host, Os};
use super::{is_bulk, Burst, Typed, BULK_NICE, CALM_RATE};

/// One session's output rate, and the weight its job has.
#[derive(Debug)]
pub struct Flow {
    since: Instant,
    bytes: u64,
    /// Output since the last input.
    burst: Burst,
    /// Over `BULK_RATE` in the last full second, and not interactive.
    bulk: bool,
    weight: Weight,
    /// The session looks for input on a timer (`watch_typing`).
    watching: bool,
}

/// The weight of the program's flooding job.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum Weight {
    /// As the program started it.
    #[default]
    Full,
    /// Process group `group` is demoted (with its nice value, in the bulk
    /// cgroup, or both; never neither).
    Demoted {
        group: i32,
        nice: Nice,
        /// The cgroup it came from, while it is in the bulk cgroup
        /// (`cpu_group`).
        moved: Option<PathBuf>,
    },
}

/// A demoted group's nice value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nice {
    /// Its own (the rule did not change it).
    Own,
    /// `BULK_NICE`, and the value its leader had (given back). Alone (not
    /// moved), it ends at the first second under `CALM_RATE`: a nice
    /// value starves nobody, so a job that prints little has stopped
    /// flooding.
    Lowered { was: i32 },
    /// `BULK_NICE`, and giving the value back was refused (no privilege):
    /// not tried again; it lasts as long as the group.
    Kept,
}

impl Default for Flow {
    fn default() -> Self {
        Flow {
            since: Instant::now(),
            bytes: 0,
            burst: Burst::default(),
            bulk: false,
            weight: Weight::Full,
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
        self.output_at(&mut Os, n, typed, pid, foreground, Instant::now());
    }

    fn output_at(
        &mut self,
        host: &mut impl Host,
        n: usize,
        typed: &Typed,
        pid: i32,
        foreground: impl FnOnce() -> Option<i32>,
        now: Instant,
    ) {
        self.input_at(host, typed, pid, now);
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
        if self.group().is_some_and(|g| !host.in_session(g, pid)) {
            self.weight = Weight::Full;
        }
        // Its reads go to the bulk thread past the burst, and it gets a
        // lower nice value, which ends with the flood (the module's doc);
        // the bulk cgroup, where a starved job may print nothing to say
        // it stopped flooding, only once nobody typed into it for
        // `INTERACTIVE_FOR`.
        let recent = typed.recent();
        if rate < CALM_RATE as f64 && !self.moved() {
            self.give_nice_back(host, pid);
        }
        if !self.bulk || (recent && !host.may_lower_nice()) {
            return;
        }
        let Some(group) = self
            .group()
            .or_else(|| flooding_group(host, pid, foreground()))
        else {
            return;
        };
        let (mut nice, mut moved) = match std::mem::take(&mut self.weight) {
            Weight::Full => (Nice::Own, None),
            Weight::Demoted { nice, moved, .. } => (nice, moved),
        };
        if nice == Nice::Own {
            nice = lower(host, group);
            if nice != Nice::Own {
                tracing::debug!(
                    pid,
                    group,
                    rate,
                    "a flooding program gets a lower CPU weight"
                );
            }
        }
        if !recent && moved.is_none() {
            match host.enter_bulk(group) {
                Some(Ok(from)) => moved = Some(from),
                Some(Err(e)) => {
                    tracing::debug!(group, "a flooding group stays in its cgroup: {e}")
                }
                None => {}
            }
        }
        self.weight = Weight::demoted(group, nice, moved);
    }

    /// A look while the job has a nice value only (not the bulk cgroup):
    /// a second without output ends its flood too (`CALM_RATE`).
    pub fn tick(&mut self, typed: &Typed, pid: i32, foreground: impl FnOnce() -> Option<i32>) {
        self.tick_at(&mut Os, typed, pid, foreground, Instant::now());
    }

    fn tick_at(
        &mut self,
        host: &mut impl Host,
        typed: &Typed,
        pid: i32,
        foreground: impl FnOnce() -> Option<i32>,
        now: Instant,
    ) {
        if self.group().is_some() && !self.moved() {
            self.output_at(host, 0, typed, pid, foreground, now);
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
        match &self.weight {
            Weight::Full => false,
            Weight::Demoted { nice, moved, .. } => {
                moved.is_some() || matches!(nice, Nice::Lowered { .. })
            }
        }
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
        self.input_at(&mut Os, typed, pid, Instant::now());
    }

    fn input_at(&mut self, host: &mut impl Host, typed: &Typed, pid: i32, now: Instant) {
        if !self.burst.input_came(typed) {
            return;
        }
        self.since = now;
        self.bytes = 0;
        self.bulk = false;
        if let Weight::Demoted { group, moved, .. } = &mut self.weight {
            if let Some(from) = moved.take() {
                if host.in_session(*group, pid) {
                    if let Err(e) = host.leave_bulk(*group, &from) {
                        tracing::debug!(group, "cannot move a group back to its cgroup: {e}");
                    }
                }
            }
        }
        self.give_nice_back(host, pid);
    }

    /// The demoted group, if any.
    fn group(&self) -> Option<i32> {
        match self.weight {
            Weight::Full => None,
            Weight::Demoted { group, .. } => Some(group),
        }
    }

    fn moved(&self) -> bool {
        matches!(&self.weight, Weight::Demoted { moved: Some(_), .. })
    }

    /// The reniced group gets its nice value back, if it is still the
    /// program's (a group id the job left behind may be another's now).
    fn give_nice_back(&mut self, host: &mut impl Host, pid: i32) {
        let Weight::Demoted { group, nice, moved } = std::mem::take(&mut self.weight) else {
            return;
        };
        if !host.in_session(group, pid) {
            return;
        }
        let nice = match nice {
            Nice::Lowered { was } => match host.renice(group, was) {
                Ok(()) => Nice::Own,
                Err(e) => {
                    tracing::debug!(
                        group,
                        "cannot give a reniced group its nice value back: {e}"
                    );
                    Nice::Kept
                }
            },
            other => other,
        };
        self.weight = Weight::demoted(group, nice, moved);
    }
}

impl Weight {
    /// `group` with `nice` and `moved`: `Full` when neither is changed.
    fn demoted(group: i32, nice: Nice, moved: Option<PathBuf>) -> Weight {
        if nice == Nice::Own && moved.is_none() {
            Weight::Full
        } else {
            Weight::Demoted { group, nice, moved }
        }
    }
}

/// Gives `group` `BULK_NICE`, unless its leader runs there or lower
/// already (a `nice -n 19 make`): what it had, to give back. A group is
/// reniced member by member, so one that is refused (another user's
/// process in it) leaves the others reniced: they get their value back
/// at once.
fn lower(host: &mut impl Host, group: i32) -> Nice {
    let Some(was) = host.nice_of(group) else {
        return Nice::Own;
    };
    if was >= BULK_NICE {
        return Nice::Own;
    }
    match host.renice(group, BULK_NICE) {
        Ok(()) => Nice::Lowered { was },
        Err(e) => {
            tracing::debug!(group, "a flooding group keeps its CPU weight: {e}");
            let _ = host.renice(group, was);
            Nice::Own
        }
    }
}

/// The terminal's foreground group when it belongs to the program's
/// session (a shell's running job), else the program's own group.
fn flooding_group(host: &impl Host, pid: i32, foreground: Option<i32>) -> Option<i32> {
    match foreground {
        Some(fg) if host.in_session(fg, pid) => Some(fg),
        _ => host.in_session(pid, pid).then_some(pid),
    }
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
        let out =
            |f: &mut Flow, n: usize, ms: u64| f.output_at(&mut Os, n, &t, pid, || None, at(ms));
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
            f.output_at(&mut Os, 200 << 10, &t, pid, || None, at(start));
            f.output_at(&mut Os, 1 << 10, &t, pid, || None, at(start + 1_050));
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
        while !Os.in_session(pid, pid) {
            assert!(t0.elapsed() < Duration::from_secs(30), "no session");
            std::thread::yield_now();
        }
        key(&t);
        f.output_at(&mut Os, 1 << 10, &t, pid, || None, at(0));
        f.output_at(&mut Os, 2 << 20, &t, pid, || None, at(1_001));
        nice.push(crate::os::nice_of(pid));
        let flooding = (f.is_bulk(), f.demoted());
        // A second slower than a flood but not calm: the weight stays low.
        f.output_at(&mut Os, 512 << 10, &t, pid, || None, at(2_002));
        nice.push(crate::os::nice_of(pid));
        let slower = (f.is_bulk(), f.demoted());
        // A quiet second: the flood ended, the weight comes back.
        f.output_at(&mut Os, 1 << 10, &t, pid, || None, at(3_003));
        nice.push(crate::os::nice_of(pid));
        let calm = (f.is_bulk(), f.demoted());
        // Again, and this time it ends with no output at all.
        f.output_at(&mut Os, 2 << 20, &t, pid, || None, at(4_004));
        nice.push(crate::os::nice_of(pid));
        f.tick_at(&mut Os, &t, pid, || None, at(4_500));
        nice.push(crate::os::nice_of(pid));
        f.tick_at(&mut Os, &t, pid, || None, at(5_005));
        nice.push(crate::os::nice_of(pid));
        let silent = (f.is_bulk(), f.demoted());
        // A job its person niced themselves keeps its own value.
        rustix::process::setpriority_process(rustix::process::Pid::from_raw(pid), 19).unwrap();
        f.output_at(&mut Os, 2 << 20, &t, pid, || None, at(6_006));
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

    /// The system as the rule sees it: groups by their session and nice
    /// value, what it refuses, the bulk cgroup's groups.
    #[derive(Debug)]
    struct Model {
        /// Group -> (session, nice).
        groups: std::collections::HashMap<i32, (i32, i32)>,
        may_lower: bool,
        /// `renice` to this value fails: after renicing the group when
        /// `partly` (a member that is another user's was refused), else
        /// before.
        refuse: Option<i32>,
        partly: bool,
        /// The bulk cgroup's groups; `None`: the node has no bulk cgroup.
        bulk: Option<Vec<i32>>,
    }

    impl Model {
        fn new(groups: &[(i32, i32, i32)]) -> Model {
            Model {
                groups: groups.iter().map(|&(g, s, n)| (g, (s, n))).collect(),
                may_lower: true,
                refuse: None,
                partly: false,
                bulk: Some(Vec::new()),
            }
        }

        fn nice(&self, group: i32) -> i32 {
            self.groups[&group].1
        }

        fn moved(&self, group: i32) -> bool {
            self.bulk.as_ref().is_some_and(|b| b.contains(&group))
        }
    }

    impl Host for Model {
        fn in_session(&self, group: i32, pid: i32) -> bool {
            self.groups.get(&group).is_some_and(|&(s, _)| s == pid)
        }
        fn nice_of(&self, pid: i32) -> Option<i32> {
            self.groups.get(&pid).map(|&(_, n)| n)
        }
        fn renice(&mut self, group: i32, nice: i32) -> std::io::Result<()> {
            let refused = self.refuse == Some(nice);
            let g = self
                .groups
                .get_mut(&group)
                .ok_or(std::io::ErrorKind::NotFound)?;
            if refused && !self.partly {
                return Err(std::io::ErrorKind::PermissionDenied.into());
            }
            g.1 = nice;
            match refused {
                true => Err(std::io::ErrorKind::PermissionDenied.into()),
                false => Ok(()),
            }
        }
        fn may_lower_nice(&self) -> bool {
            self.may_lower
        }
        fn enter_bulk(&mut self, group: i32) -> Option<std::io::Result<PathBuf>> {
            let bulk = self.bulk.as_mut()?;
            bulk.push(group);
            Some(Ok(PathBuf::from("/node")))
        }
        fn leave_bulk(&mut self, group: i32, to: &std::path::Path) -> std::io::Result<()> {
            assert_eq!(to, std::path::Path::new("/node"), "back where it came from");
            self.bulk.as_mut().unwrap().retain(|&g| g != group);
            Ok(())
        }
    }

    /// A session whose program, pid 100, runs job group 200 in the
    /// foreground.
    const PID: i32 = 100;
    const JOB: i32 = 200;

    /// Feeds `f` a second of `bytes` at second `sec` (from `t0`).
    fn second(f: &mut Flow, m: &mut Model, t: &Typed, t0: Instant, sec: u64, bytes: usize) {
        let at = t0 + Duration::from_millis(sec * 1_001);
        f.output_at(m, bytes, t, PID, || Some(JOB), at);
    }

    #[test]
    fn a_flood_nobody_types_into_moves_until_a_key_brings_it_back() {
        let mut m = Model::new(&[(PID, PID, 0), (JOB, PID, 0)]);
        let (t, mut f, t0) = (Typed::default(), Flow::default(), Instant::now());
        f.since = t0;
        second(&mut f, &mut m, &t, t0, 1, 2 << 20);
        assert!(f.demoted());
        assert_eq!((m.nice(JOB), m.moved(JOB)), (BULK_NICE, true), "the job");
        assert_eq!((m.nice(PID), m.moved(PID)), (0, false), "its shell");
        // Moved, it is not given its weight back for printing little (a
        // starved job prints little).
        second(&mut f, &mut m, &t, t0, 2, 0);
        f.tick_at(&mut m, &t, PID, || Some(JOB), t0 + Duration::from_secs(3));
        assert_eq!((m.nice(JOB), m.moved(JOB)), (BULK_NICE, true));
        // A key: back at once.
        key(&t);
        f.input_at(&mut m, &t, PID, t0 + Duration::from_secs(4));
        assert_eq!((m.nice(JOB), m.moved(JOB)), (0, false));
        assert!(!f.demoted() && !f.is_bulk());
    }

    #[test]
    fn a_flood_typed_into_is_niced_only_and_only_where_it_comes_back() {
        let mut m = Model::new(&[(PID, PID, 0), (JOB, PID, 0)]);
        let (t, mut f, t0) = (Typed::default(), Flow::default(), Instant::now());
        f.since = t0;
        key(&t);
        f.input_at(&mut m, &t, PID, t0);
        second(&mut f, &mut m, &t, t0, 1, 2 << 20);
        assert_eq!((m.nice(JOB), m.moved(JOB)), (BULK_NICE, false));
        second(&mut f, &mut m, &t, t0, 2, 2 << 20);
        assert_eq!(
            (m.nice(JOB), m.moved(JOB)),
            (BULK_NICE, false),
            "a key counts"
        );
        second(&mut f, &mut m, &t, t0, 3, 1 << 10);
        assert_eq!(m.nice(JOB), 0, "calm");
        // A node that may not lower a nice value leaves it alone.
        m.may_lower = false;
        second(&mut f, &mut m, &t, t0, 4, 2 << 20);
        assert!(f.is_bulk());
        assert_eq!((m.nice(JOB), m.moved(JOB)), (0, false));
    }

    #[test]
    fn a_refused_renice_is_undone_and_a_refused_give_back_kept_until_the_job_ends() {
        let mut m = Model::new(&[(PID, PID, 0), (JOB, PID, 2)]);
        m.bulk = None;
        let (t, mut f, t0) = (Typed::default(), Flow::default(), Instant::now());
        f.since = t0;
        // Lowering refused for one member: the others get theirs back.
        (m.refuse, m.partly) = (Some(BULK_NICE), true);
        second(&mut f, &mut m, &t, t0, 1, 2 << 20);
        assert_eq!(m.nice(JOB), 2);
        assert!(!f.demoted());
        // Allowed the next second; its own value is what comes back, but
        // that is refused: kept, not tried again, not watched.
        (m.refuse, m.partly) = (None, false);
        second(&mut f, &mut m, &t, t0, 2, 2 << 20);
        assert_eq!(m.nice(JOB), BULK_NICE);
        m.refuse = Some(2);
        second(&mut f, &mut m, &t, t0, 3, 0);
        assert!(!f.demoted(), "kept is not demoted for the rule");
        m.refuse = None;
        second(&mut f, &mut m, &t, t0, 4, 0);
        assert_eq!(m.nice(JOB), BULK_NICE, "not tried again");
        // The job ends; the next one floods and is lowered afresh.
        m.groups.remove(&JOB);
        m.groups.insert(JOB + 1, (PID, 0));
        let at = t0 + Duration::from_millis(5 * 1_001);
        f.output_at(&mut m, 2 << 20, &t, PID, || Some(JOB + 1), at);
        assert_eq!(m.nice(JOB + 1), BULK_NICE);
        assert!(f.demoted());
    }

    #[test]
    fn a_job_its_person_niced_keeps_its_value() {
        let mut m = Model::new(&[(PID, PID, 0), (JOB, PID, 19)]);
        m.bulk = None;
        let (t, mut f, t0) = (Typed::default(), Flow::default(), Instant::now());
        f.since = t0;
        second(&mut f, &mut m, &t, t0, 1, 2 << 20);
        assert!(f.is_bulk() && !f.demoted());
        second(&mut f, &mut m, &t, t0, 2, 0);
        assert_eq!(m.nice(JOB), 19);
    }
}
