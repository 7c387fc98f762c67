//! The CPU cgroup of programs that flood while nobody types into them
//! (`bulk`). Where the node may make cgroups, such a program's job moves
//! into `termesh-bulk`, a cgroup whose tasks run only when nothing else
//! wants a CPU (`cpu.idle`, else the smallest weight), and back into the
//! cgroup it came from when typed into. A nice value alone cannot do
//! this: every session is its own autogroup (or the program shares the
//! node's cgroup), and a woken keystroke path then waits out the
//! flood's time slice, up to a scheduler tick (4 ms), at every hop.
//!
//! Where `termesh-bulk` goes:
//! - cgroup v1 with the `cpu` controller: inside the node's own `cpu`
//!   cgroup (v1 lets a cgroup with processes have children);
//! - cgroup v2: beside the node's cgroup when that is named `node` and its
//!   parent offers `cpu` (systemd's `Delegate=cpu` with
//!   `DelegateSubgroup=node`; docs/operations.md): the node enables `cpu`
//!   for the parent's children and makes `termesh-bulk` there. Elsewhere
//!   v2 leaves the node's cgroups alone.
//!
//! Only programs in the node's own cgroup move: the bulk cgroup weighs
//! as the node's cgroup does above it, so a program from elsewhere (a
//! keeper in another cgroup) would outweigh the programs it left there. Neither
//! (no controller, no permission, programs elsewhere): the node renices
//! only.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The cgroup's name.
const NAME: &str = "termesh-bulk";

/// The cgroup flooding jobs move to.
#[derive(Debug)]
pub struct BulkGroup {
    dir: PathBuf,
    /// The node's own cgroup: only programs there move (elsewhere, e.g.
    /// under a keeper in another cgroup, the bulk cgroup would weigh as
    /// the node does above it, more than the programs left behind).
    own: PathBuf,
    hierarchy: Hierarchy,
}

/// Where a cgroup path of /proc/<pid>/cgroup lives on disk.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Hierarchy {
    /// cgroup v2.
    v2: bool,
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
    fn path_of(&self, pid: i32) -> Option<String> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        cgroup_path(&text, self.v2)
    }
}

/// The node's bulk cgroup, made at the first call; `None` where the node
/// may not make one.
pub fn bulk_group() -> Option<&'static BulkGroup> {
    static GROUP: OnceLock<Option<BulkGroup>> = OnceLock::new();
    GROUP
        .get_or_init(|| match BulkGroup::make() {
            Ok(group) => {
                tracing::info!(dir = %group.dir.display(), "flooding programs nobody types into run in this CPU cgroup");
                Some(group)
            }
            Err(why) => {
                tracing::info!("flooding programs are reniced only (no CPU cgroup: {why})");
                None
            }
        })
        .as_ref()
}

impl BulkGroup {
    fn make() -> Result<BulkGroup, String> {
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
        let (hierarchy, base) = place(&own, &mounts)?;
        let own = cgroup_path(&own, hierarchy.v2)
            .and_then(|path| hierarchy.dir(&path))
            .ok_or("the node's cgroup is outside its mount")?;
        if hierarchy.v2 {
            // The parent's children get the controller (it has no
            // processes of its own: they are in `node`).
            write(&base.join("cgroup.subtree_control"), "+cpu")
                .map_err(|e| format!("cannot enable cpu in {}: {e}", base.display()))?;
        }
        let dir = base.join(NAME);
        match std::fs::create_dir(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(format!("cannot make {}: {e}", dir.display()));
            }
            _ => {}
        }
        let least = if hierarchy.v2 {
            ("cpu.weight", "1")
        } else {
            ("cpu.shares", "2")
        };
        if write(&dir.join("cpu.idle"), "1").is_err() {
            write(&dir.join(least.0), least.1)
                .map_err(|e| format!("cannot set {} of {}: {e}", least.0, dir.display()))?;
        }
        Ok(BulkGroup {
            dir,
            own,
            hierarchy,
        })
    }

    /// Moves the processes of group `group` here when its leader is in
    /// the node's own cgroup (or here already: left by an earlier run of
    /// the node); answers where `leave` takes them back.
    pub fn enter(&self, group: i32) -> std::io::Result<PathBuf> {
        let from = self
            .hierarchy
            .path_of(group)
            .and_then(|path| self.hierarchy.dir(&path))
            .ok_or(std::io::ErrorKind::NotFound)?;
        if from != self.own && from != self.dir {
            return Err(std::io::Error::other(format!(
                "in {}, not the node's cgroup",
                from.display()
            )));
        }
        move_group(group, &self.dir)?;
        Ok(self.own.clone())
    }

    /// Moves the calling thread here, where a cgroup takes single threads
    /// (v1; v2 only moves whole processes outside threaded subtrees): the
    /// node's own bulk threads then weigh no more than the floods they
    /// serve. `false` where it stays.
    pub fn enter_thread(&self) -> bool {
        !self.hierarchy.v2
            && write(
                &self.dir.join("tasks"),
                &rustix::thread::gettid().as_raw_nonzero().to_string(),
            )
            .is_ok()
    }

    /// Moves the processes of group `group` back to `to`.
    pub fn leave(&self, group: i32, to: &Path) -> std::io::Result<()> {
        move_group(group, to)
    }
}

/// Moves every process of process group `group` into cgroup `dir` (one
/// at a time, as cgroup.procs takes them); a process that exited
/// meanwhile is no error.
fn move_group(group: i32, dir: &Path) -> std::io::Result<()> {
    let procs = dir.join("cgroup.procs");
    let mut moved = 0;
    let mut last_err = None;
    for pid in members(group) {
        match write(&procs, &pid.to_string()) {
            Ok(()) => moved += 1,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => last_err = Some(e),
        }
    }
    match last_err {
        Some(e) if moved == 0 => Err(e),
        _ => Ok(()),
    }
}

/// The processes in process group `group` (from /proc).
fn members(group: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| pgrp_of(&stat))
                == Some(group)
        })
        .collect()
}

/// The process group in a /proc/<pid>/stat line (the fifth field; the
/// second, the command, may hold spaces and parentheses).
fn pgrp_of(stat: &str) -> Option<i32> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(2)?.parse().ok()
}

fn write(path: &Path, value: &str) -> std::io::Result<()> {
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

/// The hierarchy the node's CPU weight lives in and the directory to make
/// `termesh-bulk` in, from /proc/self/cgroup and /proc/self/mountinfo.
fn place(own: &str, mountinfo: &str) -> Result<(Hierarchy, PathBuf), String> {
    if let (Some(path), Some(h)) = (cgroup_path(own, false), mount(mountinfo, false)) {
        let dir = h
            .dir(&path)
            .ok_or("the node's cpu cgroup is outside its mount")?;
        return Ok((h, dir));
    }
    let path = cgroup_path(own, true).ok_or("no cpu cgroup")?;
    let h = mount(mountinfo, true).ok_or("cgroup v2 is not mounted")?;
    let dir = h
        .dir(&path)
        .ok_or("the node's cgroup is outside its mount")?;
    if dir.file_name().and_then(|n| n.to_str()) != Some("node") {
        return Err("cgroup v2: the node's cgroup is not a delegated `node` subgroup".into());
    }
    let parent = dir.parent().ok_or("no parent cgroup")?.to_path_buf();
    if parent == h.mount {
        return Err("cgroup v2: the node runs at the hierarchy's root".into());
    }
    let offered = std::fs::read_to_string(parent.join("cgroup.controllers")).unwrap_or_default();
    if !offered.split_whitespace().any(|c| c == "cpu") {
        return Err("cgroup v2: cpu is not delegated (Delegate=cpu)".into());
    }
    Ok((h, parent))
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

    #[test]
    fn v1_puts_the_group_inside_the_nodes_cpu_cgroup() {
        let (h, base) = place(V1, V1_MOUNTS).unwrap();
        assert!(!h.v2);
        assert_eq!(base, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/nodes/a"));
        assert_eq!(cgroup_path(V1, false).as_deref(), Some("/nodes/a"));
    }

    #[test]
    fn a_mount_of_a_subtree_maps_paths_below_its_root() {
        let mounts = "30 25 0:26 /docker/c1 /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        let own = "1:cpu:/docker/c1/inner\n";
        let (_, base) = place(own, mounts).unwrap();
        assert_eq!(base, PathBuf::from("/sys/fs/cgroup/cpu/inner"));
        let outside = "1:cpu:/elsewhere\n";
        assert!(place(outside, mounts).is_err());
    }

    #[test]
    fn v2_needs_a_delegated_node_subgroup() {
        let mounts = "40 25 0:28 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let err = place("0::/system.slice/termesh.service\n", mounts).unwrap_err();
        assert!(err.contains("`node` subgroup"), "{err}");
        let err = place("0::/node\n", mounts).unwrap_err();
        assert!(err.contains("root"), "{err}");
    }

    #[test]
    fn the_process_group_is_read_past_a_command_with_parentheses() {
        let stat = "1234 (a (b) c) S 1 777 777 34816 777 4194304";
        assert_eq!(pgrp_of(stat), Some(777));
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert_eq!(pgrp_of(&own), Some(nix::unistd::getpgrp().as_raw()));
    }
}
