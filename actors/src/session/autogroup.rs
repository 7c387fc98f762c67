//! Whether the programs this process starts are each scheduled as an
//! autogroup of their own, or in another CPU cgroup than the node's (the
//! keeper in a unit of its own), and the hints that say so at start; it
//! owns the reading of the CPU share a process runs on (`cpu_share_of`).
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

use std::path::Path;

use super::cgroup::{cgroup_path, mount};

/// The CPU share a process runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CpuShare {
    /// The root's: no CPU cgroup (where autogroups apply).
    Root,
    /// A CPU cgroup's, by its path (`/` for the root of a cgroup
    /// namespace, which is a cgroup of the host's).
    Cgroup(String),
}

impl std::fmt::Display for CpuShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CpuShare::Root => f.write_str("/"),
            CpuShare::Cgroup(path) => f.write_str(path),
        }
    }
}

/// The hint for the operator when the programs this process starts will
/// each be an autogroup of their own: autogroups are on and this process
/// runs on the root's CPU share; `None` where they will not (or it cannot
/// be told).
pub fn hint() -> Option<String> {
    let enabled = std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled").ok()?;
    (enabled.trim() == "1" && cpu_share_of("self")? == CpuShare::Root).then(|| {
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
             busy threads (tens of ms); the node starts its keeper in its own cgroup once this \
             one ends (docs/operations.md, \"Move from the keeper's own unit\")"
        )
    })
}

/// The CPU share process `pid` (a number, or `self`) runs on: its v1
/// `cpu` path, or on v2 the nearest cgroup up from its own whose
/// controllers include `cpu` (the root's where none does); `None` where
/// that cannot be told (`autogroup` asks).
fn cpu_share_of(pid: &str) -> Option<CpuShare> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    cpu_share(&text, &mounts, |file| std::fs::read_to_string(file).ok())
}

/// `cpu_share_of` from a /proc/<pid>/cgroup `text`, the mounts and a
/// reader of cgroup files.
fn cpu_share(
    text: &str,
    mountinfo: &str,
    read: impl Fn(&Path) -> Option<String>,
) -> Option<CpuShare> {
    // v1 names the cpu hierarchy's path whether or not it is mounted here.
    if let Some(path) = cgroup_path(text, false) {
        if path != "/" {
            return Some(CpuShare::Cgroup(path));
        }
        // Only the hierarchy's root has `release_agent`: a `/` without one
        // is a cgroup namespace's root (a container's), a cgroup of the
        // host's. Unmounted here: taken as the root.
        let host_root = mount(mountinfo, false)
            .and_then(|h| h.dir("/"))
            .is_none_or(|dir| read(&dir.join("release_agent")).is_some());
        return Some(if host_root {
            CpuShare::Root
        } else {
            CpuShare::Cgroup(path)
        });
    }
    let path = cgroup_path(text, true)?;
    let h = mount(mountinfo, true)?;
    let mut at = Path::new(&path);
    loop {
        // Above the mount's root (a subtree mounted): unknown.
        let dir = h.dir(at.to_str()?)?;
        let top = at == Path::new("/");
        // Only the host's root cgroup lacks `cgroup.type`; a `/` that has
        // one is a cgroup namespace's root (a container's).
        if top && read(&dir.join("cgroup.type")).is_none() {
            return Some(CpuShare::Root);
        }
        let offered = read(&dir.join("cgroup.controllers")).unwrap_or_default();
        if offered.split_whitespace().any(|c| c == "cpu") {
            return Some(CpuShare::Cgroup(at.to_str()?.to_string()));
        }
        if top {
            // The namespace's root has no cpu: its share is above, unseen.
            return None;
        }
        at = at.parent()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_CPU: &str = "30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n";
    const V2: &str = "40 25 0:28 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";

    fn none(_: &Path) -> Option<String> {
        None
    }

    fn cgroup(path: &str) -> Option<CpuShare> {
        Some(CpuShare::Cgroup(path.into()))
    }

    #[test]
    fn the_cpu_share_is_v1s_path_or_v2s_nearest_cgroup_with_cpu() {
        let v1_root =
            |file: &Path| (file == Path::new("/sys/fs/cgroup/cpu/release_agent")).then(String::new);
        assert_eq!(
            cpu_share("1:cpu:/\n0::/\n", V1_CPU, v1_root),
            Some(CpuShare::Root)
        );
        assert_eq!(
            cpu_share("1:cpu:/t-keeper\n0::/\n", V1_CPU, none),
            cgroup("/t-keeper")
        );
        // v2 as systemd makes it: a unit's CPUWeight gives the units cpu;
        // every cgroup below the root has a type.
        let units = |file: &Path| {
            let (dir, name) = (file.parent()?.to_str()?, file.file_name()?.to_str()?);
            match name {
                "cgroup.type" if dir != "/sys/fs/cgroup" => Some("domain\n".into()),
                "cgroup.controllers" if dir.ends_with(".service") || dir.ends_with("/node") => {
                    Some("cpu memory\n".into())
                }
                _ => None,
            }
        };
        let keeper = "0::/system.slice/termesh-keeper.service\n";
        let node = "0::/system.slice/termesh.service/node\n";
        assert_eq!(
            cpu_share(keeper, V2, units),
            cgroup("/system.slice/termesh-keeper.service")
        );
        assert_eq!(
            cpu_share(node, V2, units),
            cgroup("/system.slice/termesh.service/node")
        );
        // Below a cgroup with cpu, one without runs on that one's share.
        let below = "0::/system.slice/termesh.service/node/sub\n";
        assert_eq!(
            cpu_share(below, V2, units),
            cgroup("/system.slice/termesh.service/node")
        );
        // Nowhere cpu: the root's share.
        assert_eq!(cpu_share(node, V2, none), Some(CpuShare::Root));
        assert_eq!(cpu_share("0::/\n", V2, units), Some(CpuShare::Root));
        // Outside a subtree's mount: cannot be told.
        let subtree = "40 25 0:28 /system.slice /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(cpu_share("0::/user.slice/x\n", subtree, none), None);
    }

    #[test]
    fn a_cgroup_namespaces_root_is_not_the_hosts() {
        // In a container with its own cgroup namespace, its cgroup shows as
        // `/`, but has a type as every cgroup below the host's root does.
        let container = |cpu: bool| {
            move |file: &Path| match file.file_name()?.to_str()? {
                "cgroup.type" => Some("domain\n".to_string()),
                "cgroup.controllers" if cpu => Some("cpu io memory pids\n".to_string()),
                _ => None,
            }
        };
        assert_eq!(cpu_share("0::/\n", V2, container(true)), cgroup("/"));
        assert_eq!(
            cpu_share("0::/agent\n", V2, container(true)),
            cgroup("/agent")
        );
        // Without cpu there, its share is somewhere above: unknown.
        assert_eq!(cpu_share("0::/\n", V2, container(false)), None);
        // On v1 the namespace's root has no `release_agent`.
        assert_eq!(cpu_share("1:cpu:/\n", V1_CPU, none), cgroup("/"));
    }
}
