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
//!   for the parent's children and makes `termesh-bulk` there. Where
//!   systemd delegated the node's cgroup itself (`Delegate=cpu`, marked
//!   by its `delegate` xattr) but made no `node` subgroup (systemd before
//!   254 ignores `DelegateSubgroup=`), the node makes it and moves its
//!   cgroup's processes (itself, its keeper, their programs) there first:
//!   v2 lets only a cgroup without processes give its children a
//!   controller. `release` (the unit's `ExecStopPost`) takes `cpu` back
//!   from the children once the node stopped, so that systemd may start
//!   the next node in the unit's cgroup. Elsewhere v2 leaves the node's
//!   cgroups alone.
//!
//! Only programs in the node's own cgroup move: the bulk cgroup weighs
//! as the node's cgroup does above it, so a program from elsewhere (a
//! keeper in another cgroup) would outweigh the programs it left there. Neither
//! (no controller, no permission, programs elsewhere): the node renices
//! only.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::cgroup::{delegated, place, split_off, write, Hierarchy, Place};

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

/// Makes the bulk cgroup now, not at the first flood: a node process
/// does before it starts its keeper, so that where it moves its cgroup's
/// processes into `node` (v2 under a systemd before 254) the keeper
/// starts there, and the cgroup's weight holds for floods an earlier
/// node left in it.
pub fn prepare() {
    let _ = bulk_group();
}

impl BulkGroup {
    fn make() -> Result<BulkGroup, String> {
        let text = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
        let Place {
            hierarchy,
            base,
            own,
            split,
        } = place(&text, &mounts, delegated)?;
        // The parent's children get the controller once it has no
        // processes of its own (they are in `node`): a process forked
        // into it after the split makes the kernel refuse (EBUSY), and
        // the next split moves it too.
        for attempt in (0..10).rev() {
            if !hierarchy.v2 {
                break;
            }
            if split {
                split_off(&base, &own)?;
            }
            match write(&base.join("cgroup.subtree_control"), "+cpu") {
                Ok(()) => break,
                Err(e) if split && attempt > 0 && e.raw_os_error() == Some(libc::EBUSY) => {}
                Err(e) => return Err(format!("cannot enable cpu in {}: {e}", base.display())),
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_group_is_read_past_a_command_with_parentheses() {
        let stat = "1234 (a (b) c) S 1 777 777 34816 777 4194304";
        assert_eq!(pgrp_of(stat), Some(777));
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert_eq!(pgrp_of(&own), Some(nix::unistd::getpgrp().as_raw()));
    }
}
