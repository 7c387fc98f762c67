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
    /// What the program's flooding job has now.
    weight: Weight,
    /// The session looks for input on a timer (`watch_typing`).
    watching: bool,
    /// When input last reached any session of the node: the bulk cgroup
    /// only while someone types on the node.
    node: Typed,
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

impl Flow {
    /// A session's flow on a node whose input `node` marks.
    pub fn new(node: Typed) -> Flow {
        Flow {
            since: Instant::now(),
            bytes: 0,
            burst: Burst::default(),
            bulk: false,
            weight: Weight::Full,
            watching: false,
            node,
        }
    }

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
        self.node_quiet(host, pid);
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
        // `INTERACTIVE_FOR`, and while someone types on the node.
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
        if !recent && moved.is_none() && self.node.recent() {
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

    /// A look while the job is demoted: with a nice value only (not the
    /// bulk cgroup), a second without output ends its flood too
    /// (`CALM_RATE`); in the bulk cgroup, it leaves once nobody types on
    /// the node.
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
        } else {
            self.node_quiet(host, pid);
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
        self.leave_bulk(host, pid);
        self.give_nice_back(host, pid);
    }

    /// Nobody typed on the node within `INTERACTIVE_FOR`: a job in the
    /// bulk cgroup leaves it (nobody waits for a CPU it would take, and
    /// there the node's own work for the flood, its reads and shipping,
    /// waits behind it), keeping its nice value until it calms down.
    fn node_quiet(&mut self, host: &mut impl Host, pid: i32) {
        if self.moved() && !self.node.recent() {
            self.leave_bulk(host, pid);
        }
    }

    /// The demoted group leaves the bulk cgroup, if it is still the
    /// program's.
    fn leave_bulk(&mut self, host: &mut impl Host, pid: i32) {
        if let Weight::Demoted { group, moved, .. } = &mut self.weight {
            if let Some(from) = moved.take() {
                if host.in_session(*group, pid) {
                    if let Err(e) = host.leave_bulk(*group, &from) {
                        tracing::debug!(group, "cannot move a group back to its cgroup: {e}");
                    }
                }
            }
        }
        self.weight = std::mem::take(&mut self.weight).normal();
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
        Weight::Demoted { group, nice, moved }.normal()
    }

    /// The same weight, `Full` for a group demoted in neither way.
    fn normal(self) -> Weight {
        match self {
            Weight::Demoted {
                nice: Nice::Own,
                moved: None,
                ..
            } => Weight::Full,
            other => other,
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
mod tests;
