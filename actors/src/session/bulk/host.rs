//! What the bulk rule (`Flow`) asks of the system, and the node's answer:
//! process sessions, nice values and the bulk CPU cgroup, the only system
//! calls of the rule (a test gives it a model instead).

use std::path::{Path, PathBuf};

use nix::unistd::Pid;

/// The processes the rule looks at and the weights it gives them.
pub trait Host {
    /// Group `group`'s leader is in the session `pid` leads.
    fn in_session(&self, group: i32, pid: i32) -> bool;
    /// The nice value of process `pid` (a group's leader).
    fn nice_of(&self, pid: i32) -> Option<i32>;
    /// Gives every process of group `group` nice `nice`.
    fn renice(&mut self, group: i32, nice: i32) -> std::io::Result<()>;
    /// The node may lower a nice value again (give one back).
    fn may_lower_nice(&self) -> bool;
    /// Moves group `group` into the bulk cgroup: the cgroup it came from;
    /// `None` where the node has no bulk cgroup.
    fn enter_bulk(&mut self, group: i32) -> Option<std::io::Result<PathBuf>>;
    /// Moves group `group` back to cgroup `to`.
    fn leave_bulk(&mut self, group: i32, to: &Path) -> std::io::Result<()>;
}

/// The node's processes, as the kernel has them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Os;

impl Host for Os {
    fn in_session(&self, group: i32, pid: i32) -> bool {
        nix::unistd::getsid(Some(Pid::from_raw(group))).is_ok_and(|s| s.as_raw() == pid)
    }

    fn nice_of(&self, pid: i32) -> Option<i32> {
        crate::os::nice_of(pid)
    }

    /// Gives process group `group` nice `nice`, and its session's
    /// autogroup too where the kernel schedules by autogroup
    /// (`kernel.sched_autogroup_enabled`, tasks outside any CPU cgroup:
    /// there a nice value weighs only against the same session's
    /// processes, and every session, the node's included, gets an equal
    /// share of the CPU).
    fn renice(&mut self, group: i32, nice: i32) -> std::io::Result<()> {
        let leader =
            rustix::process::Pid::from_raw(group).ok_or(std::io::ErrorKind::InvalidInput)?;
        rustix::process::setpriority_pgrp(Some(leader), nice)?;
        // Absent without autogroup support; refused like a nice value.
        if let Ok(mut autogroup) = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/{group}/autogroup"))
        {
            use std::io::Write;
            let _ = autogroup.write_all(nice.to_string().as_bytes());
        }
        Ok(())
    }

    fn may_lower_nice(&self) -> bool {
        crate::os::may_lower_nice()
    }

    fn enter_bulk(&mut self, group: i32) -> Option<std::io::Result<PathBuf>> {
        crate::session::cpu_group::bulk_group().map(|bulk| bulk.enter(group))
    }

    fn leave_bulk(&mut self, group: i32, to: &Path) -> std::io::Result<()> {
        match crate::session::cpu_group::bulk_group() {
            Some(bulk) => bulk.leave(group, to),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_in_the_session_its_leader_is_in() {
        // A group of its own whose leader lives while it is asked (the
        // test's own group leader may have exited: a shell's `( ... ) &`).
        use std::os::unix::process::CommandExt;
        let mut leader = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let group = leader.id() as i32;
        let sid = nix::unistd::getsid(None).unwrap().as_raw();
        let ours = Os.in_session(group, sid);
        let other = Os.in_session(group, sid + 1);
        let _ = leader.kill();
        let _ = leader.wait();
        assert!(ours, "the leader is in this process's session");
        assert!(!other, "another session");
        assert!(!Os.in_session(group, sid), "a group whose leader is gone");
    }
}
