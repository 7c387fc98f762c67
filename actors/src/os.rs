//! A session's program at the process level: how its child starts (a new
//! session on the PTY, default signals, no inherited descriptors) and the
//! node's own protection against host load that it must not inherit (the
//! systemd unit runs the node at `Nice=-10` with `OOMScoreAdjust=-900`):
//! right after it starts, the program is put back to nice 0 and
//! `oom_score_adj` 0 when the node runs below them. Raising a process's
//! nice value and its OOM score are allowed without privilege for a
//! process of the same user.
//!
//! `unsafe` lives here only (STYLE.md 13): `getpriority`/`setpriority` have
//! no safe wrapper in the nix version the workspace uses (both only read or
//! set a number the kernel keeps for a process, with plain integer
//! arguments), a child's setup between fork and exec is a `pre_exec`
//! closure (see `in_new_terminal_session`), glibc's `malloc_trim`, and
//! registering a PTY master with tokio (`AsyncFd::register` asks its
//! caller to promise the descriptor stays open: see `register_owned`).
#![allow(unsafe_code)]

/// Puts `pid` back to normal priority if this process runs raised.
pub fn reset_for_child(pid: i32) {
    if own_nice() < 0 {
        // SAFETY: plain integer arguments; no memory is passed.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, pid as libc::id_t, 0) };
        if rc != 0 {
            tracing::debug!(pid, "could not reset the session's nice value");
        }
    }
    let own_oom = std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()
        .and_then(|t| t.trim().parse::<i32>().ok())
        .unwrap_or(0);
    if own_oom < 0 {
        let _ = std::fs::write(format!("/proc/{pid}/oom_score_adj"), "0");
    }
}

/// Makes `cmd`'s child the leader of a new session whose controlling
/// terminal is its stdin (a PTY slave), with default signal dispositions
/// and mask, and every descriptor above 2 closed at exec. Unlike
/// portable-pty's spawn, which lists `/proc/self/fd` in every child and
/// closes each entry (a cost that grows with the node's descriptors:
/// 12,000 at 3,000 sessions), this is a constant handful of syscalls.
pub fn in_new_terminal_session(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe calls are allowed: signal, sigemptyset,
    // sigprocmask, setsid, ioctl, close_range, getrlimit and close all
    // are, and the closure allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(|| {
            for signo in [
                libc::SIGCHLD,
                libc::SIGHUP,
                libc::SIGINT,
                libc::SIGQUIT,
                libc::SIGTERM,
                libc::SIGALRM,
                libc::SIGPIPE,
            ] {
                libc::signal(signo, libc::SIG_DFL);
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // The PTY slave on stdin becomes the controlling terminal, so
            // resizes send SIGWINCH and ^C reaches the foreground group.
            if libc::ioctl(0, libc::TIOCSCTTY as _, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // Descriptors opened without CLOEXEC (by a library, or a PTY
            // that portable-pty opened on another thread and has not
            // flagged yet) do not reach the program.
            let marked = libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            if marked != 0 {
                // Before Linux 5.11: close them one by one, up to the limit.
                let mut limit: libc::rlimit = std::mem::zeroed();
                let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                    limit.rlim_cur.min(1 << 20) as libc::c_int
                } else {
                    1024
                };
                for fd in 3..top {
                    libc::close(fd);
                }
            }
            Ok(())
        });
    }
}

/// Gives the allocator's free memory back to the kernel (glibc keeps what
/// was freed in its arenas; after screen models of idle sessions are
/// dropped that can be most of the node's memory). A no-op elsewhere.
pub fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes a plain integer and only walks the
    // allocator's own free lists, under its own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// This process's nice value.
pub fn own_nice() -> i32 {
    // SAFETY: plain integer arguments; -1 is a valid value, so errno is
    // cleared first, as getpriority(2) asks (an error leaves it set: then
    // the value is taken as 0).
    unsafe {
        *libc::__errno_location() = 0;
        let value = libc::getpriority(libc::PRIO_PROCESS, 0);
        if *libc::__errno_location() != 0 {
            return 0;
        }
        value
    }
}

/// Registers `fd` with the current tokio runtime for readiness. Must be
/// called inside a runtime.
pub fn register_owned(
    fd: std::sync::Arc<filedescriptor::FileDescriptor>,
) -> std::io::Result<tokio::io::unix::AsyncFd<std::sync::Arc<filedescriptor::FileDescriptor>>> {
    // SAFETY: the `AsyncFd` owns a counted reference to the descriptor, so
    // it stays open for the `AsyncFd`'s whole life, and a `FileDescriptor`
    // always answers the same descriptor (it is never replaced in place).
    unsafe { tokio::io::unix::AsyncFd::register(fd) }.map_err(std::io::Error::from)
}

/// The nice value of `pid`, from /proc (field 19 of `stat`).
pub fn nice_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields count after its `)`.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(16)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_reads_the_same_nice_both_ways() {
        assert_eq!(nice_of(std::process::id() as i32), Some(own_nice()));
    }
}
