//! A session's program must not inherit the node's own protection against
//! host load (the systemd unit runs the node at `Nice=-10` with
//! `OOMScoreAdjust=-900`): right after it starts, the program is put back
//! to nice 0 and `oom_score_adj` 0 when the node runs below them. Raising
//! a process's nice value and its OOM score are allowed without privilege
//! for a process of the same user.
//!
//! `unsafe` lives here only: `getpriority`/`setpriority` have no safe
//! wrapper in the nix version the workspace uses; both only read or set a
//! number the kernel keeps for a process, and their arguments are plain
//! integers.
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
