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
//! cannot change that for itself (the switch is the host's), so it says
//! so once, with the remedy (docs/operations.md, "Scheduler autogroups").
//! The same holds where a keeper in a unit of its own holds the programs:
//! its cgroup is a group beside the node's (`apart`).

use std::path::Path;

use super::cpu_group::{cgroup_path, mount};

/// The hint for the operator when the programs this process starts will
/// each be an autogroup of their own; `None` where they will not.
pub fn hint() -> Option<String> {
    let enabled = std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled").ok()?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let controllers = |dir: &Path| std::fs::read_to_string(dir.join("cgroup.controllers")).ok();
    applies(&enabled, &own, &mounts, controllers).then(|| {
        "each program starts in a scheduler autogroup of its own (kernel.sched_autogroup_enabled=1, \
         and this process is in no CPU cgroup): on a host whose CPUs are all busy, the program \
         you type into waits behind the node's busy threads, tens of ms at worst; run the \
         programs in the node's CPU cgroup or set kernel.sched_autogroup_enabled=0 \
         (docs/operations.md, \"Scheduler autogroups\")"
            .to_string()
    })
}

/// The hint for the operator when the keeper `keeper` (its pid) runs its
/// programs in another CPU cgroup than this node's; `None` where both
/// share one (or it cannot be read).
pub fn apart(keeper: i32) -> Option<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let theirs = std::fs::read_to_string(format!("/proc/{keeper}/cgroup")).ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let controllers = |dir: &Path| std::fs::read_to_string(dir.join("cgroup.controllers")).ok();
    let (mine, its) = (
        cpu_group(&own, &mounts, controllers)?,
        cpu_group(&theirs, &mounts, controllers)?,
    );
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

/// The CPU cgroup whose share a process (its /proc/<pid>/cgroup `text`)
/// runs on: its v1 `cpu` path, or on v2 the nearest cgroup up from its
/// own whose `controllers` include `cpu` (`/` where none does); `None`
/// where that cannot be told.
fn cpu_group(
    text: &str,
    mountinfo: &str,
    controllers: impl Fn(&Path) -> Option<String>,
) -> Option<String> {
    // v1 names the cpu hierarchy's path whether or not it is mounted here.
    if let Some(path) = cgroup_path(text, false) {
        return Some(path);
    }
    let path = cgroup_path(text, true)?;
    let h = mount(mountinfo, true)?;
    let mut at = Path::new(&path);
    loop {
        let s = at.to_str()?;
        if s == "/" {
            return Some("/".into());
        }
        // Above the mount's root (a subtree mounted): unknown.
        let dir = h.dir(s)?;
        let has_cpu = controllers(&dir).is_some_and(|c| c.split_whitespace().any(|c| c == "cpu"));
        if has_cpu {
            return Some(s.to_string());
        }
        at = at.parent()?;
    }
}

/// Autogroups are on (`enabled`, the sysctl's text) and this process (its
/// /proc/self/cgroup `own`) runs on the root's CPU share (`cpu_group`).
fn applies(
    enabled: &str,
    own: &str,
    mountinfo: &str,
    controllers: impl Fn(&Path) -> Option<String>,
) -> bool {
    enabled.trim() == "1" && cpu_group(own, mountinfo, controllers).as_deref() == Some("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_MOUNTS: &str = "30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n";
    const V2_MOUNTS: &str = "40 25 0:28 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";

    fn none(_: &Path) -> Option<String> {
        None
    }

    #[test]
    fn v1_the_root_cpu_cgroup_means_autogroups_a_child_does_not() {
        assert!(applies("1\n", "1:cpu:/\n0::/\n", V1_MOUNTS, none));
        assert!(!applies("1\n", "1:cpu:/termesh\n0::/\n", V1_MOUNTS, none));
        assert!(!applies("0\n", "1:cpu:/\n0::/\n", V1_MOUNTS, none));
    }

    #[test]
    fn v2_autogroups_unless_the_nodes_cgroup_has_the_cpu_controller() {
        let own = "0::/system.slice/termesh.service/node\n";
        let with_cpu = |dir: &Path| {
            (dir == Path::new("/sys/fs/cgroup/system.slice/termesh.service/node"))
                .then(|| "cpuset cpu io memory pids\n".to_string())
        };
        assert!(!applies("1", own, V2_MOUNTS, with_cpu));
        let without = |_: &Path| Some("memory pids\n".to_string());
        assert!(applies("1", own, V2_MOUNTS, without));
        assert!(applies("1", "0::/\n", V2_MOUNTS, with_cpu));
        // A cgroup without cpu below one with it runs on that one's share.
        let below = "0::/system.slice/termesh.service/node/sub\n";
        assert!(!applies("1", below, V2_MOUNTS, with_cpu));
        // A cgroup outside a subtree's mount cannot be told: no hint.
        let subtree = "40 25 0:28 /system.slice /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert!(!applies("1", "0::/user.slice/x\n", subtree, none));
    }

    #[test]
    fn the_cpu_group_is_v1s_path_or_v2s_nearest_cgroup_with_cpu() {
        assert_eq!(
            cpu_group("1:cpu:/t-keeper\n", V1_MOUNTS, none).as_deref(),
            Some("/t-keeper")
        );
        // v2: the units have cpu (a unit's CPUWeight enables it for the
        // slice), the keeper's programs sit below their unit.
        let units = |dir: &Path| {
            let d = dir.to_str().unwrap();
            (d.ends_with(".service") || d.ends_with("/node")).then(|| "cpu memory\n".to_string())
        };
        let keeper = "0::/system.slice/termesh-keeper.service\n";
        let node = "0::/system.slice/termesh.service\n";
        assert_eq!(
            cpu_group(keeper, V2_MOUNTS, units).as_deref(),
            Some("/system.slice/termesh-keeper.service")
        );
        assert_ne!(
            cpu_group(keeper, V2_MOUNTS, units),
            cpu_group(node, V2_MOUNTS, units)
        );
        // Nowhere cpu: both on the root's share (autogroups decide).
        assert_eq!(cpu_group(keeper, V2_MOUNTS, none).as_deref(), Some("/"));
        assert_eq!(cpu_group(node, V2_MOUNTS, none).as_deref(), Some("/"));
    }
}
