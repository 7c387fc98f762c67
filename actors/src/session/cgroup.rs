//! Where the node's cgroups are: the hierarchy that holds its CPU weight
//! (v1's `cpu` or v2), the cgroup to make `termesh-bulk` in (`place`),
//! on v2 the split of a delegated unit cgroup into `node` that a systemd
//! before 254 leaves to the node (`split_off`), and its release once the
//! node stopped (`release`, the unit's `ExecStopPost`).

use std::io::Write;
use std::path::{Path, PathBuf};

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

/// Moves every process of cgroup `from` into its new subgroup `to` (made
/// here), until none is left: a process forked meanwhile starts in
/// `from` and is moved by the next pass.
pub(super) fn split_off(from: &Path, to: &Path) -> Result<(), String> {
    match std::fs::create_dir(to) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(format!("cannot make {}: {e}", to.display()));
        }
        _ => {}
    }
    let procs = to.join("cgroup.procs");
    for _ in 0..100 {
        let left = std::fs::read_to_string(from.join("cgroup.procs"))
            .map_err(|e| format!("cannot read the processes of {}: {e}", from.display()))?;
        if left.trim().is_empty() {
            tracing::info!(
                to = %to.display(),
                "the node moved its cgroup's processes to a subgroup (systemd made none: DelegateSubgroup= needs systemd 254)"
            );
            return Ok(());
        }
        for pid in left.split_whitespace() {
            match write(&procs, pid) {
                Err(e) if e.raw_os_error() != Some(libc::ESRCH) => {
                    return Err(format!(
                        "cannot move process {pid} into {}: {e}",
                        to.display()
                    ));
                }
                _ => {}
            }
        }
    }
    Err(format!("processes keep starting in {}", from.display()))
}

/// Gives `cpu` back from the children of the unit whose control command
/// this process is (systemd starts those of a delegated unit in its
/// `.control` subgroup): what `termesh stopped` does once the node
/// stopped, so that systemd before 254, which starts every node in the
/// unit's cgroup itself, may put the next one there (v2 refuses a
/// process to a cgroup whose children have a controller). The programs
/// in `termesh-bulk` run unweighted until the next node is up. `Ok(None)`
/// where there was nothing to give back.
pub fn release() -> Result<Option<PathBuf>, String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    let (Some(path), Some(h)) = (cgroup_path(&own, true), mount(&mounts, true)) else {
        return Ok(None);
    };
    // Only a delegated unit's control command (systemd starts those in
    // `.control`) gives anything back: elsewhere this process's cgroup
    // is not the node's unit (and may be the root's).
    let Some(path) = path.strip_suffix("/.control") else {
        return Ok(None);
    };
    let Some(unit) = h.dir(path) else {
        return Ok(None);
    };
    let control = unit.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&control).unwrap_or_default();
    if !enabled.split_whitespace().any(|c| c == "cpu") {
        return Ok(None);
    }
    write(&control, "-cpu")
        .map_err(|e| format!("cannot disable cpu in {}: {e}", unit.display()))?;
    Ok(Some(unit))
}

/// Whether systemd delegated cgroup `dir` (its `delegate` xattr: `user.`
/// readable by all, `trusted.` by root).
pub(super) fn delegated(dir: &Path) -> bool {
    ["user.delegate", "trusted.delegate"].iter().any(|name| {
        let mut value = [0u8; 8];
        rustix::fs::getxattr(dir, *name, &mut value[..]).is_ok_and(|n| &value[..n] == b"1")
    })
}

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

/// Where the node's CPU weight lives and `termesh-bulk` goes, from
/// /proc/self/cgroup and /proc/self/mountinfo; `delegated` says whether
/// systemd delegated a v2 cgroup.
pub(super) fn place(
    own: &str,
    mountinfo: &str,
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
            return Err("cgroup v2: the node runs at the hierarchy's root".into());
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
    if dir == hierarchy.mount || !delegated(&dir) {
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
        let p = place(V1, V1_MOUNTS, never).unwrap();
        assert!(!p.hierarchy.v2 && !p.split);
        assert_eq!(p.base, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/nodes/a"));
        assert_eq!(p.own, p.base);
        assert_eq!(cgroup_path(V1, false).as_deref(), Some("/nodes/a"));
    }

    #[test]
    fn a_mount_of_a_subtree_maps_paths_below_its_root() {
        let mounts = "30 25 0:26 /docker/c1 /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        let own = "1:cpu:/docker/c1/inner\n";
        let p = place(own, mounts, never).unwrap();
        assert_eq!(p.base, PathBuf::from("/sys/fs/cgroup/cpu/inner"));
        let outside = "1:cpu:/elsewhere\n";
        assert!(place(outside, mounts, never).is_err());
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
    fn v2_takes_a_node_subgroup_or_a_delegated_cgroup_it_splits() {
        let (root, mounts) = v2_tree("system.slice/termesh.service", "cpu memory");
        let unit = root.path().join("system.slice/termesh.service");
        // systemd 254 and later made `node`: termesh-bulk goes beside it.
        let p = place("0::/system.slice/termesh.service/node\n", &mounts, never).unwrap();
        assert!(p.hierarchy.v2 && !p.split);
        assert_eq!((p.base, p.own), (unit.clone(), unit.join("node")));
        // Older ones leave the node in the unit's cgroup: it splits off
        // `node` there when systemd delegated it.
        let p = place("0::/system.slice/termesh.service\n", &mounts, always).unwrap();
        assert!(p.split);
        assert_eq!((p.base, p.own), (unit.clone(), unit.join("node")));
        let err = place("0::/system.slice/termesh.service\n", &mounts, never).unwrap_err();
        assert!(err.contains("not delegated"), "{err}");
        // Never at the root, never without the controller.
        let err = place("0::/node\n", &mounts, always).unwrap_err();
        assert!(err.contains("root"), "{err}");
        let err = place("0::/\n", &mounts, always).unwrap_err();
        assert!(err.contains("not delegated"), "{err}");
        let (_root, mounts) = v2_tree("system.slice/termesh.service", "memory");
        for own in [
            "/system.slice/termesh.service",
            "/system.slice/termesh.service/node",
        ] {
            let err = place(&format!("0::{own}\n"), &mounts, always).unwrap_err();
            assert!(err.contains("cpu is not delegated"), "{own}: {err}");
        }
    }
}
