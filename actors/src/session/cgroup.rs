//! Where the node's cgroups are: the hierarchy that holds its CPU weight
//! (v1's `cpu` or v2), the cgroup to make `termesh-bulk` in (`place`),
//! on v2 the controller given to that cgroup's children (`give_cpu`),
//! with the split of a delegated unit cgroup into `node` that a systemd
//! before 254 leaves to the node, and the controller taken back once the
//! node stopped (`release`, the unit's `ExecStopPost`).

use std::io::Write;
use std::path::{Path, PathBuf};

/// Set (to 1) by deploy/termesh.service, whose `ExecStopPost` (`termesh
/// stopped`) takes `cpu` back at every stop: only then may the node
/// split its unit's cgroup (a unit that does not would start no next
/// node: a systemd before 254 starts it in the unit's cgroup, which v2
/// refuses while its children have a controller).
pub const SPLIT_ENV: &str = "TERMESH_CGROUP_SPLIT";

/// The cgroup flooding jobs move to.
pub(super) const BULK: &str = "termesh-bulk";

/// Where a cgroup path of /proc/<pid>/cgroup lives on disk.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Hierarchy {
    /// cgroup v2.
    pub(super) v2: bool,
    /// Its mount point, and the cgroup path mounted there.
    mount: PathBuf,
    root: String,
}

impl Hierarchy {
    /// The directory of cgroup `path` (as /proc/<pid>/cgroup names it).
    pub(super) fn dir(&self, path: &str) -> Option<PathBuf> {
        let rel = Path::new(path).strip_prefix(&self.root).ok()?;
        Some(self.mount.join(rel))
    }

    /// The cgroup path of `pid` in this hierarchy.
    pub(super) fn path_of(&self, pid: i32) -> Option<String> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        cgroup_path(&text, self.v2)
    }
}

/// Where the node's CPU weight lives and `termesh-bulk` goes.
#[derive(Debug)]
pub(super) struct Place {
    pub(super) hierarchy: Hierarchy,
    /// The cgroup to make `termesh-bulk` in.
    pub(super) base: PathBuf,
    /// The node's own cgroup (once split off, with `split`).
    pub(super) own: PathBuf,
    /// The node's processes move from `base` into `own` first (v2, a
    /// delegated cgroup with no `node` subgroup).
    pub(super) split: bool,
}

/// Gives `cpu` to the children of `place.base` (v2): with `split`, once
/// every process of `base` moved into `own` (made here). A process
/// forked into `base` meanwhile makes the kernel refuse (EBUSY): the
/// next pass moves it too.
pub(super) fn give_cpu(place: &Place) -> Result<(), String> {
    let Place { base, own, .. } = place;
    if place.split {
        match std::fs::create_dir(own) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(format!("cannot make {}: {e}", own.display()));
            }
            _ => {}
        }
    }
    let control = base.join("cgroup.subtree_control");
    for _ in 0..50 {
        if place.split {
            let left = std::fs::read_to_string(base.join("cgroup.procs"))
                .map_err(|e| format!("cannot read the processes of {}: {e}", base.display()))?;
            for pid in left.split_whitespace() {
                match write(&own.join("cgroup.procs"), pid) {
                    Err(e) if e.raw_os_error() != Some(libc::ESRCH) => {
                        return Err(format!(
                            "cannot move process {pid} into {}: {e}",
                            own.display()
                        ));
                    }
                    _ => {}
                }
            }
        }
        match write(&control, "+cpu") {
            Ok(()) => {
                if place.split {
                    tracing::info!(
                        to = %own.display(),
                        "the node moved its cgroup's processes to a subgroup (systemd made none: DelegateSubgroup= needs systemd 254)"
                    );
                }
                return Ok(());
            }
            Err(e) if place.split && e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => return Err(format!("cannot enable cpu in {}: {e}", base.display())),
        }
    }
    Err(format!("processes keep starting in {}", base.display()))
}

/// Gives `cpu` back from the children of the unit whose control command
/// this process is (systemd starts those of a delegated unit in its
/// `.control` subgroup), where a node made `termesh-bulk`: what `termesh
/// stopped` does once the node stopped, so that a systemd before 254,
/// which starts every node in the unit's cgroup itself, may put the next
/// one there. The programs in `termesh-bulk` run unweighted until the
/// next node is up. `Ok(None)` where there was nothing to give back;
/// `Err` names the cgroup.
pub fn release() -> std::io::Result<Option<PathBuf>> {
    let own = std::fs::read_to_string("/proc/self/cgroup")?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    let Some(unit) = control_unit(&own, &mounts) else {
        return Ok(None);
    };
    if !unit.join(BULK).is_dir() {
        return Ok(None);
    }
    let control = unit.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&control)
        .map_err(|e| std::io::Error::other(format!("{}: {e}", control.display())))?;
    if !enabled.split_whitespace().any(|c| c == "cpu") {
        return Ok(None);
    }
    write(&control, "-cpu").map_err(|e| {
        std::io::Error::other(format!("cannot disable cpu in {}: {e}", unit.display()))
    })?;
    Ok(Some(unit))
}

/// The unit cgroup whose `.control` subgroup holds this process (v2), from
/// /proc/self/cgroup and /proc/self/mountinfo: only a delegated unit's
/// control command gives anything back (elsewhere this process's cgroup
/// is not the node's unit, and may be the root's).
fn control_unit(own: &str, mountinfo: &str) -> Option<PathBuf> {
    if cgroup_path(own, false).is_some() && mount(mountinfo, false).is_some() {
        return None;
    }
    let path = cgroup_path(own, true)?;
    mount(mountinfo, true)?.dir(path.strip_suffix("/.control")?)
}

/// Whether systemd delegated cgroup `dir`: its `delegate` xattr (`user.`
/// since systemd 251, readable by all; `trusted.` by root), or, for a
/// node that is not root, its `cgroup.procs` given to the node's user
/// (what delegation to a `User=` unit does with any systemd).
pub(super) fn delegated(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let marked = ["user.delegate", "trusted.delegate"].iter().any(|name| {
        let mut value = [0u8; 8];
        rustix::fs::getxattr(dir, *name, &mut value[..]).is_ok_and(|n| &value[..n] == b"1")
    });
    let uid = rustix::process::geteuid();
    marked
        || (!uid.is_root()
            && std::fs::metadata(dir.join("cgroup.procs")).is_ok_and(|m| m.uid() == uid.as_raw()))
}

/// Writes `value` to cgroup file `path` (one write, as the kernel reads it).
pub(super) fn write(path: &Path, value: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

/// The cgroup path in a /proc/<pid>/cgroup text: v2's `0::` line, or the
/// v1 line whose controllers include `cpu`.
pub(super) fn cgroup_path(text: &str, v2: bool) -> Option<String> {
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let matches = if v2 {
            id == "0" && controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == "cpu")
        };
        matches.then(|| path.to_string())
    })
}

/// Where the node's CPU weight lives and `termesh-bulk` goes, from
/// /proc/self/cgroup and /proc/self/mountinfo. On v2 without a `node`
/// subgroup, the node may split its own cgroup only with `may_split`
/// (the unit's `SPLIT_ENV`, at the node's start) where `delegated` says
/// systemd delegated it.
pub(super) fn place(
    own: &str,
    mountinfo: &str,
    may_split: bool,
    delegated: fn(&Path) -> bool,
) -> Result<Place, String> {
    if let (Some(path), Some(hierarchy)) = (cgroup_path(own, false), mount(mountinfo, false)) {
        let dir = hierarchy
            .dir(&path)
            .ok_or("the node's cpu cgroup is outside its mount")?;
        return Ok(Place {
            hierarchy,
            base: dir.clone(),
            own: dir,
            split: false,
        });
    }
    let path = cgroup_path(own, true).ok_or("no cpu cgroup")?;
    let hierarchy = mount(mountinfo, true).ok_or("cgroup v2 is not mounted")?;
    let dir = hierarchy
        .dir(&path)
        .ok_or("the node's cgroup is outside its mount")?;
    let offers_cpu = |dir: &Path| {
        std::fs::read_to_string(dir.join("cgroup.controllers"))
            .unwrap_or_default()
            .split_whitespace()
            .any(|c| c == "cpu")
    };
    if dir.file_name().and_then(|n| n.to_str()) == Some("node") {
        let parent = dir.parent().ok_or("no parent cgroup")?.to_path_buf();
        if parent == hierarchy.mount {
            return Err(
                "cgroup v2: the node runs at the root of its cgroup hierarchy (or namespace)"
                    .into(),
            );
        }
        if !offers_cpu(&parent) {
            return Err("cgroup v2: cpu is not delegated (Delegate=cpu)".into());
        }
        return Ok(Place {
            hierarchy,
            base: parent,
            own: dir,
            split: false,
        });
    }
    if !may_split {
        return Err(format!(
            "cgroup v2: the node's cgroup is not a `node` subgroup (systemd 254's \
             DelegateSubgroup=node, or {SPLIT_ENV}=1 as deploy/termesh.service sets)"
        ));
    }
    if dir == hierarchy.mount {
        return Err(
            "cgroup v2: the node runs at the root of its cgroup hierarchy (or namespace)".into(),
        );
    }
    if !delegated(&dir) {
        return Err("cgroup v2: the node's cgroup is not delegated (Delegate=cpu)".into());
    }
    if !offers_cpu(&dir) {
        return Err("cgroup v2: cpu is not delegated (Delegate=cpu)".into());
    }
    Ok(Place {
        hierarchy,
        own: dir.join("node"),
        base: dir,
        split: true,
    })
}

/// The cgroup mount of `v2`, or v1's with the `cpu` controller.
pub(super) fn mount(mountinfo: &str, v2: bool) -> Option<Hierarchy> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fields: Vec<&str> = left.split_whitespace().collect();
        let mut after = right.split_whitespace();
        let (fstype, _source, options) = (after.next()?, after.next()?, after.next()?);
        let wanted = if v2 {
            fstype == "cgroup2"
        } else {
            fstype == "cgroup" && options.split(',').any(|o| o == "cpu")
        };
        if !wanted {
            return None;
        }
        Some(Hierarchy {
            v2,
            root: fields.get(3)?.to_string(),
            mount: PathBuf::from(fields.get(4)?),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "4:memory:/x\n3:cpuset:/\n1:cpu,cpuacct:/nodes/a\n0::/\n";
    const V1_MOUNTS: &str = "\
30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
31 25 0:27 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
40 25 0:28 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    fn never(_: &Path) -> bool {
        false
    }

    fn always(_: &Path) -> bool {
        true
    }

    #[test]
    fn v1_puts_the_group_inside_the_nodes_cpu_cgroup() {
        let p = place(V1, V1_MOUNTS, false, never).unwrap();
        assert!(!p.hierarchy.v2 && !p.split);
        assert_eq!(p.base, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/nodes/a"));
        assert_eq!(p.own, p.base);
        assert_eq!(cgroup_path(V1, false).as_deref(), Some("/nodes/a"));
    }

    #[test]
    fn a_mount_of_a_subtree_maps_paths_below_its_root() {
        let mounts = "30 25 0:26 /docker/c1 /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        let own = "1:cpu:/docker/c1/inner\n";
        let p = place(own, mounts, false, never).unwrap();
        assert_eq!(p.base, PathBuf::from("/sys/fs/cgroup/cpu/inner"));
        let outside = "1:cpu:/elsewhere\n";
        assert!(place(outside, mounts, false, never).is_err());
    }

    /// A v2 hierarchy in a temporary directory: `cgroup.controllers` of
    /// `unit` (below it) offers `offered`, and so does its `node`.
    fn v2_tree(unit: &str, offered: &str) -> (tempfile::TempDir, String) {
        let root = tempfile::tempdir().unwrap();
        for dir in [root.path().join(unit), root.path().join(unit).join("node")] {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("cgroup.controllers"), offered).unwrap();
        }
        let mounts = format!(
            "40 25 0:28 / {} rw - cgroup2 cgroup2 rw\n",
            root.path().display()
        );
        (root, mounts)
    }

    #[test]
    fn only_a_units_control_command_on_v2_gives_cpu_back() {
        let v2 = "40 25 0:28 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let control = "0::/system.slice/termesh.service/.control\n";
        assert_eq!(
            control_unit(control, v2),
            Some(PathBuf::from("/sys/fs/cgroup/system.slice/termesh.service"))
        );
        // By hand (a session's scope), at the root, on v1 and hybrid: none.
        for own in ["0::/user.slice/session-1.scope\n", "0::/\n"] {
            assert_eq!(control_unit(own, v2), None, "{own}");
        }
        assert_eq!(control_unit(V1, V1_MOUNTS), None);
    }

    #[test]
    fn v2_takes_a_node_subgroup_or_a_delegated_cgroup_it_splits() {
        let (root, mounts) = v2_tree("system.slice/termesh.service", "cpu memory");
        let unit = root.path().join("system.slice/termesh.service");
        // systemd 254 and later made `node`: termesh-bulk goes beside it.
        let p = place(
            "0::/system.slice/termesh.service/node\n",
            &mounts,
            false,
            never,
        )
        .unwrap();
        assert!(p.hierarchy.v2 && !p.split);
        assert_eq!((p.base, p.own), (unit.clone(), unit.join("node")));
        // Older ones leave the node in the unit's cgroup: it splits off
        // `node` there when systemd delegated it.
        let p = place("0::/system.slice/termesh.service\n", &mounts, true, always).unwrap();
        assert!(p.split);
        assert_eq!((p.base, p.own), (unit.clone(), unit.join("node")));
        let err = place("0::/system.slice/termesh.service\n", &mounts, true, never).unwrap_err();
        assert!(err.contains("not delegated"), "{err}");
        // Never at the root, never without the controller.
        let err = place("0::/node\n", &mounts, true, always).unwrap_err();
        assert!(err.contains("root"), "{err}");
        let err = place("0::/\n", &mounts, true, always).unwrap_err();
        assert!(err.contains("root"), "{err}");
        // Nor where the unit does not take cpu back at its stops.
        let err = place("0::/system.slice/termesh.service\n", &mounts, false, always).unwrap_err();
        assert!(err.contains(SPLIT_ENV), "{err}");
        let (_root, mounts) = v2_tree("system.slice/termesh.service", "memory");
        for own in [
            "/system.slice/termesh.service",
            "/system.slice/termesh.service/node",
        ] {
            let err = place(&format!("0::{own}\n"), &mounts, true, always).unwrap_err();
            assert!(err.contains("cpu is not delegated"), "{own}: {err}");
        }
    }
}
