//! The CPU cgroup of programs that flood and are not interactive
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
//!   for the parent's children and makes `termesh-bulk` there. Under a
//!   systemd before 254, which makes no `node`, the node splits its
//!   delegated unit cgroup into one at its start where the unit allows
//!   it (`prepare`; how, and how the unit's stop undoes the controller:
//!   `cgroup.rs`). Elsewhere v2 leaves the node's cgroups alone.
//!
//! Only programs in the node's own cgroup move: the bulk cgroup weighs
//! as the node's cgroup does above it, so a program from elsewhere (a
//! keeper in another cgroup) would outweigh the programs it left there. Neither
//! (no controller, no permission, programs elsewhere): the node renices
//! only.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::cgroup::{delegated, give_cpu, place, write, Hierarchy, Place, BULK, SPLIT_ENV};

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

/// The node's bulk cgroup, made once: at `prepare` or the first call.
static GROUP: OnceLock<Option<BulkGroup>> = OnceLock::new();

/// The node's bulk cgroup, made at the first call (or `prepare`); `None`
/// where the node may not make one.
pub fn bulk_group() -> Option<&'static BulkGroup> {
    GROUP.get_or_init(|| made(false)).as_ref()
}

/// Makes the bulk cgroup now, not at the first flood: a node process
/// does at its start, before it starts its keeper. Only then may the node
/// split its unit's cgroup (v2 under a systemd before 254, where the
/// unit sets `SPLIT_ENV`): its cgroup then holds the node alone, not yet
/// its keeper and programs, which start in `node`, and never the
/// processes of a test or a shell around a node run inside them.
pub fn prepare() {
    let may_split = std::env::var(SPLIT_ENV).is_ok_and(|v| v == "1");
    GROUP.get_or_init(|| made(may_split));
}

/// The bulk cgroup, said in the log either way.
fn made(may_split: bool) -> Option<BulkGroup> {
    match BulkGroup::make(may_split) {
        Ok(group) => {
            tracing::info!(dir = %group.dir.display(), "flooding programs nobody types into run in this CPU cgroup");
            Some(group)
        }
        Err(why) => {
            tracing::info!("flooding programs are reniced only (no CPU cgroup: {why})");
            None
        }
    }
}

impl BulkGroup {
    fn make(may_split: bool) -> Result<BulkGroup, String> {
        let text = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
        let place = place(&text, &mounts, may_split, delegated)?;
        if place.hierarchy.v2 {
            give_cpu(&place)?;
        }
        let Place {
            hierarchy,
            base,
            own,
            ..
        } = place;
        let dir = base.join(BULK);
        match std::fs::create_dir(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(format!("cannot make {}: {e}", dir.display()));
            }
            _ => {}
        }
        // What an earlier run of the node moved here goes back to the
        // node's cgroup: this run knows nothing of it, so could never move
        // it back, and moves it again if it floods beside someone typing.
        if let Ok(left) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            for pid in left.lines() {
                let _ = write(&own.join("cgroup.procs"), pid);
            }
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
