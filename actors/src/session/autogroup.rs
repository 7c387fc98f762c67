//! Whether the programs this process starts are each scheduled as an
//! autogroup of their own, or in another CPU cgroup than the node's (the
//! keeper's own unit), and the hints that say so at start.
//!
//! Linux puts every new session (`setsid`, which each program's terminal
//! needs) in an autogroup of its own when `kernel.sched_autogroup_enabled`
//! is 1 and the process is in no CPU cgroup (the root of the `cpu`
//! hierarchy; on cgroup v2, no cgroup from its own up has `cpu`). The scheduler
//! then shares a CPU between groups first: the program a person types into
//! is one group, the node's threads another. On a host whose CPUs are all
//! busy, measured here (docs/benchmarks.md, issue 32, "Seventh stop"),
//! the typed-into program waited up to 47 ms for a CPU while the node's
//! threads passed a flood's output between each other inside their own
//! group, which the scheduler kept running; with the programs and the node
//! in one group the same wait stays under a millisecond or two. The node
//! cannot change that for itself (the switch is the host's), so the
//! process that starts the programs (the keeper, or the node without one)
//! says so once, with the remedy (docs/operations.md, "Scheduler autogroups").
//! The same holds where a keeper in a unit of its own holds the programs:
//! its cgroup is a group beside the node's (`keeper_apart`).

use super::cpu_group::cpu_share_of;

/// The hint for the operator when the programs this process starts will
/// each be an autogroup of their own: autogroups are on and this process
/// runs on the root's CPU share; `None` where they will not (or it cannot
/// be told).
pub fn hint() -> Option<String> {
    let enabled = std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled").ok()?;
    (enabled.trim() == "1" && cpu_share_of("self")? == "/").then(|| {
        "each program starts in a scheduler autogroup of its own (kernel.sched_autogroup_enabled=1, \
         and this process is in no CPU cgroup): on a host whose CPUs are all busy, the program \
         you type into waits behind the node's busy threads, tens of ms at worst; run the \
         programs in the node's CPU cgroup or set kernel.sched_autogroup_enabled=0 \
         (docs/operations.md, \"Scheduler autogroups\")"
            .to_string()
    })
}

/// The hint for the operator when the keeper (its pid) runs its programs
/// on another CPU cgroup's share than this node; `None` where both share
/// one (or it cannot be told).
pub fn keeper_apart(keeper: u32) -> Option<String> {
    let mine = cpu_share_of("self")?;
    let its = cpu_share_of(&keeper.to_string())?;
    (mine != its).then(|| {
        format!(
            "the PTY keeper (pid {keeper}) runs the programs in CPU cgroup {its}, not the node's ({mine}): \
             on a host whose CPUs are all busy, the program you type into waits behind the node's \
             busy threads (tens of ms); where that matters more than programs outliving a node \
             restart, run the node with --no-keeper \
             (docs/operations.md, \"Scheduler autogroups\")"
        )
    })
}
