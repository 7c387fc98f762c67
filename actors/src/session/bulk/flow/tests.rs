//! The bulk rule's transitions: on a real process where the kernel's
//! answers matter (a session leader, its nice value), and on a model of
//! the system for every transition, refused ones included.

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
    let (t, mut f) = (Typed::default(), Flow::new(Typed::default()));
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let out = |f: &mut Flow, n: usize, ms: u64| f.output_at(&mut Os, n, &t, pid, || None, at(ms));
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
    let (t, mut f) = (Typed::default(), Flow::new(Typed::default()));
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
    let (t, mut f) = (Typed::default(), Flow::new(Typed::default()));
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
    /// Moves into the bulk cgroup fail (a process elsewhere).
    refuse_move: bool,
}

impl Model {
    fn new(groups: &[(i32, i32, i32)]) -> Model {
        Model {
            groups: groups.iter().map(|&(g, s, n)| (g, (s, n))).collect(),
            may_lower: true,
            refuse: None,
            partly: false,
            bulk: Some(Vec::new()),
            refuse_move: false,
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
        if self.refuse_move {
            return Some(Err(std::io::ErrorKind::PermissionDenied.into()));
        }
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

/// Nobody typed into the session yet (someone types into another of the
/// node's), and a flow whose seconds count from the instant returned.
fn start() -> (Typed, Flow, Instant) {
    let node = Typed::default();
    key(&node);
    let (f, t0) = (Flow::new(node), Instant::now());
    (Typed::default(), Flow { since: t0, ..f }, t0)
}

/// Feeds `f` a second of `bytes` at second `sec` (from `t0`).
fn second(f: &mut Flow, m: &mut Model, t: &Typed, t0: Instant, sec: u64, bytes: usize) {
    let at = t0 + Duration::from_millis(sec * 1_001);
    f.output_at(m, bytes, t, PID, || Some(JOB), at);
}

#[test]
fn a_flood_nobody_types_into_moves_until_a_key_brings_it_back() {
    let mut m = Model::new(&[(PID, PID, 0), (JOB, PID, 0)]);
    let (t, mut f, t0) = start();
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
    let (t, mut f, t0) = start();
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
    let (t, mut f, t0) = start();
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
    let (t, mut f, t0) = start();
    second(&mut f, &mut m, &t, t0, 1, 2 << 20);
    assert!(f.is_bulk() && !f.demoted());
    assert_eq!(m.nice(JOB), 19);
}

#[test]
fn a_flood_the_cgroup_refuses_has_its_nice_value_only() {
    let mut m = Model::new(&[(PID, PID, 0), (JOB, PID, 0)]);
    m.refuse_move = true;
    let (t, mut f, t0) = start();
    second(&mut f, &mut m, &t, t0, 1, 2 << 20);
    assert_eq!((m.nice(JOB), m.moved(JOB)), (BULK_NICE, false));
    assert!(f.demoted());
    // Not moved, so a calm second ends it, with no key.
    second(&mut f, &mut m, &t, t0, 2, 1 << 10);
    assert_eq!(m.nice(JOB), 0);
    assert!(!f.demoted());
}

#[test]
fn the_bulk_cgroup_is_only_for_floods_beside_someone_typing_on_the_node() {
    let mut m = Model::new(&[(PID, PID, 0), (JOB, PID, 0)]);
    let (t, mut f, t0) = start();
    let someone = f.node.clone();
    // Nobody types on the node: the flood has its nice value only.
    f.node = Typed::default();
    second(&mut f, &mut m, &t, t0, 1, 2 << 20);
    assert_eq!((m.nice(JOB), m.moved(JOB)), (BULK_NICE, false), "alone");
    // Someone types into another session: it moves at its next second.
    f.node = someone;
    second(&mut f, &mut m, &t, t0, 2, 2 << 20);
    assert_eq!(
        (m.nice(JOB), m.moved(JOB)),
        (BULK_NICE, true),
        "beside a key"
    );
    // They stop: at the next look it leaves, keeping its nice value while
    // it floods, and a calm second gives that back too.
    f.node = Typed::default();
    f.tick_at(
        &mut m,
        &t,
        PID,
        || Some(JOB),
        t0 + Duration::from_millis(2_100),
    );
    assert_eq!((m.nice(JOB), m.moved(JOB)), (BULK_NICE, false), "quiet");
    assert!(f.demoted());
    second(&mut f, &mut m, &t, t0, 3, 2 << 20);
    assert_eq!((m.nice(JOB), m.moved(JOB)), (BULK_NICE, false), "flooding");
    second(&mut f, &mut m, &t, t0, 4, 1 << 10);
    assert_eq!((m.nice(JOB), m.moved(JOB)), (0, false), "calm");
    assert!(!f.demoted());
}
