//! The keeper's programs: started in new PTYs (the node's own way,
//! `pty::start_in_terminal`), their masters held, their exits seen without
//! reaping (`WNOWAIT`: the pid, and with it the process group the node may
//! signal, stays reserved by the zombie) and reaped when the node releases
//! them.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use filedescriptor::FileDescriptor;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use termesh_actors::keeper::wire::{Exit, Reply};
use termesh_actors::session::pty;

struct Program {
    pid: i32,
    master: FileDescriptor,
    exit: Option<Exit>,
}

#[derive(Default)]
pub struct Programs {
    by_id: BTreeMap<String, Program>,
    /// Released while still running: killed, reaped once they exit.
    discarded: Vec<i32>,
}

impl Programs {
    /// Starts `command` as `id`; answers its pid, or whether the failure is
    /// the keeper's (rather than the request's) and why.
    pub fn spawn(
        &mut self,
        id: &str,
        command: &[String],
        cwd: Option<PathBuf>,
        env: Vec<(Vec<u8>, Vec<u8>)>,
        size: (u16, u16),
    ) -> Result<i32, (bool, String)> {
        if self.by_id.contains_key(id) {
            return Err((
                true,
                format!("the keeper already holds a program for `{id}`"),
            ));
        }
        let env: Vec<(OsString, OsString)> = env
            .into_iter()
            .map(|(k, v)| (OsString::from_vec(k), OsString::from_vec(v)))
            .collect();
        let (pid, master) = pty::start_in_terminal(command, &env, cwd.as_deref(), size)
            .map_err(|e| (e.is_internal(), e.to_string()))?;
        termesh_actors::os::reset_for_child(pid);
        tracing::info!(session = id, pid, "started");
        self.by_id.insert(
            id.to_string(),
            Program {
                pid,
                master,
                exit: None,
            },
        );
        Ok(pid)
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// `id`'s master, to send beside a message.
    pub fn master(&self, id: &str) -> Option<BorrowedFd<'_>> {
        self.by_id.get(id).map(|p| p.master.as_fd())
    }

    /// Every program held, as the node is told of it at `hello`.
    pub fn held(&self) -> impl Iterator<Item = (Reply, BorrowedFd<'_>)> {
        self.by_id.iter().map(|(id, p)| {
            let reply = Reply::Held {
                id: id.clone(),
                pid: p.pid,
                exit: p.exit,
            };
            (reply, p.master.as_fd())
        })
    }

    /// Looks for exits (after a SIGCHLD); answers the new ones. Discarded
    /// programs that ended are reaped.
    pub fn look(&mut self) -> Vec<(String, Exit)> {
        let mut ended = Vec::new();
        for (id, program) in self.by_id.iter_mut().filter(|(_, p)| p.exit.is_none()) {
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
            let status = loop {
                match waitid(Id::Pid(Pid::from_raw(program.pid)), flags) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    status => break status,
                }
            };
            if let Some(exit) = exit_of(status) {
                tracing::info!(session = %id, pid = program.pid, code = exit.code, "exited");
                program.exit = Some(exit);
                ended.push((id.clone(), exit));
            }
        }
        self.discarded.retain(|pid| {
            !matches!(
                waitpid(Pid::from_raw(*pid), Some(WaitPidFlag::WNOHANG)),
                Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..))
                    | Err(nix::errno::Errno::ECHILD)
            )
        });
        ended
    }

    /// Hangs up every program's terminal (their masters close: SIGHUP to
    /// each) and waits, at most `grace`, for the running ones to end, so
    /// that whoever stopped the keeper knows they did; `exits` blocks until
    /// a child may have exited (a SIGCHLD) or the time it is given passes.
    /// Answers how many still run (a program that ignores the hang-up).
    pub fn hang_up(&mut self, grace: Duration, mut exits: impl FnMut(Duration)) -> usize {
        let held = std::mem::take(&mut self.by_id);
        let mut running: Vec<i32> = held
            .values()
            .filter(|p| p.exit.is_none())
            .map(|p| p.pid)
            .collect();
        drop(held);
        let deadline = Instant::now() + grace;
        loop {
            running.retain(|pid| {
                matches!(
                    waitpid(Pid::from_raw(*pid), Some(WaitPidFlag::WNOHANG)),
                    Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR)
                )
            });
            let now = Instant::now();
            if running.is_empty() || now >= deadline {
                return running.len();
            }
            exits(deadline - now);
        }
    }

    /// The node is done with `id`: reaped (killed first if it runs), its
    /// master closed.
    pub fn release(&mut self, id: &str) {
        let Some(program) = self.by_id.remove(id) else {
            return;
        };
        let pid = Pid::from_raw(program.pid);
        if program.exit.is_none() {
            // Still running (the node ends a program it cannot take up):
            // its group is ours to signal until it is reaped.
            let _ = killpg(pid, Signal::SIGKILL);
            self.discarded.push(program.pid);
            tracing::info!(
                session = id,
                pid = program.pid,
                "released while running: killed"
            );
        } else {
            while let Err(nix::errno::Errno::EINTR) = waitpid(pid, None) {}
            tracing::info!(session = id, pid = program.pid, "released");
        }
    }
}

/// How a program ended, from `waitid` (as the node reads its own
/// children's); `None` while it runs.
fn exit_of(status: nix::Result<WaitStatus>) -> Option<Exit> {
    pty::exit_info(status).map(|info| Exit {
        code: info.code,
        signal: info.signal.map(|s| s as i32),
    })
}
