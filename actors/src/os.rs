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
//! arguments), a child's setup is a `posix_spawn`
//! call (see `spawn_on_terminal`), glibc's `malloc_trim`, and
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

/// What `spawn_on_terminal` starts.
pub struct TerminalProgram<'a> {
    /// The program: a path, or a name looked up in the child's `PATH`.
    pub program: &'a str,
    pub args: &'a [String],
    /// The child's whole environment.
    pub env: &'a [(std::ffi::OsString, std::ffi::OsString)],
    pub cwd: Option<&'a std::path::Path>,
    /// The PTY slave, opened by the child as its stdin, stdout and stderr.
    pub slave: &'a std::path::Path,
}

/// Starts a program as the leader of a new session whose controlling
/// terminal is a PTY slave, with default signal dispositions and an empty
/// mask, and no descriptor of the node's but its terminal: its pid.
///
/// `posix_spawn` (glibc: `clone(CLONE_VM | CLONE_VFORK)`), not `fork`: a
/// fork copies the node's page tables and the exec tears them down again,
/// a cost that grows with the node's memory (at 8,000 sessions a quarter
/// of a create's CPU was `copy_page_range` and `unmap_page_range`). The
/// child: `setsid`, then opens the slave by name (the first terminal a
/// session leader opens becomes its controlling terminal), duplicates it
/// onto 1 and 2, closes everything from 3 up, changes directory, execs.
pub fn spawn_on_terminal(p: &TerminalProgram) -> Result<i32, SpawnFailed> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| {
            SpawnFailed::Program(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a NUL byte in the command",
            ))
        })
    };
    let path = resolve(p.program, p.env).map_err(SpawnFailed::Program)?;
    let path = c(path.as_os_str().as_bytes())?;
    let mut argv = vec![c(p.program.as_bytes())?];
    for a in p.args {
        argv.push(c(a.as_bytes())?);
    }
    let mut envp = Vec::with_capacity(p.env.len());
    for (k, v) in p.env {
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        envp.push(c(&kv)?);
    }
    let slave = c(p.slave.as_os_str().as_bytes())?;
    let cwd = p.cwd.map(|d| c(d.as_os_str().as_bytes())).transpose()?;
    let (attr, actions) = setup(&slave, cwd.as_deref()).map_err(SpawnFailed::Node)?;
    match spawn(&attr, &actions, &path, &argv, &envp) {
        // A script without `#!`: run by the shell, as execvp does.
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {
            let sh = c(b"/bin/sh")?;
            let mut argv = argv;
            argv[0] = path;
            argv.insert(0, sh.clone());
            spawn(&attr, &actions, &sh, &argv, &envp)
        }
        result => result,
    }
    .map_err(SpawnFailed::Program)
}

/// Why `spawn_on_terminal` failed.
#[derive(Debug)]
pub enum SpawnFailed {
    /// Setting the spawn up failed (an old C library, no memory): the
    /// node's fault.
    Node(std::io::Error),
    /// Starting the program failed (not found, not executable, no
    /// descriptors left: its `errno` tells whose fault).
    Program(std::io::Error),
}

/// The spawn's attributes and file actions: a new session, default
/// signals, an empty mask; the slave opened on 0 (the first terminal a
/// session leader opens becomes its controlling terminal) and copied onto
/// 1 and 2, everything from 3 up closed, then `cwd`.
fn setup(slave: &std::ffi::CStr, cwd: Option<&std::ffi::CStr>) -> std::io::Result<(Attr, Actions)> {
    // SAFETY: the attr and the file actions are each destroyed by their
    // guard, made once they are initialised (both are plain structs, the
    // actions pointing to a heap array, so they may move then); the
    // strings passed are copied by the calls that take them.
    unsafe {
        let mut raw = std::mem::zeroed();
        check(libc::posix_spawnattr_init(&mut raw))?;
        let mut attr = Attr(raw);
        let mut raw = std::mem::zeroed();
        check(libc::posix_spawn_file_actions_init(&mut raw))?;
        let mut actions = Actions(raw);
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        let flags = libc::POSIX_SPAWN_SETSID
            | libc::POSIX_SPAWN_SETSIGDEF as libc::c_short
            | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short;
        check(libc::posix_spawnattr_setflags(&mut attr.0, flags))?;
        check(libc::posix_spawnattr_setsigdefault(&mut attr.0, &all))?;
        check(libc::posix_spawnattr_setsigmask(&mut attr.0, &none))?;
        let a = &mut actions.0;
        check(libc::posix_spawn_file_actions_addopen(
            a,
            0,
            slave.as_ptr(),
            libc::O_RDWR,
            0,
        ))?;
        check(libc::posix_spawn_file_actions_adddup2(a, 0, 1))?;
        check(libc::posix_spawn_file_actions_adddup2(a, 0, 2))?;
        check(libc::posix_spawn_file_actions_addclosefrom_np(a, 3))?;
        if let Some(dir) = cwd {
            check(libc::posix_spawn_file_actions_addchdir_np(a, dir.as_ptr()))?;
        }
        Ok((attr, actions))
    }
}

/// `posix_spawn` of `path` with `argv` and `envp`: the child's pid.
fn spawn(
    attr: &Attr,
    actions: &Actions,
    path: &std::ffi::CStr,
    argv: &[std::ffi::CString],
    envp: &[std::ffi::CString],
) -> std::io::Result<i32> {
    let ptrs = |v: &[std::ffi::CString]| {
        let mut out: Vec<*mut libc::c_char> = v.iter().map(|s| s.as_ptr() as *mut _).collect();
        out.push(std::ptr::null_mut());
        out
    };
    let (argv, envp) = (ptrs(argv), ptrs(envp));
    let mut pid: libc::pid_t = 0;
    // SAFETY: `path` and every string `argv` and `envp` point to outlive
    // the call, and both arrays end with a null pointer; posix_spawn
    // returns only after the child has exec'd or failed.
    check(unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            &actions.0,
            &attr.0,
            argv.as_ptr(),
            envp.as_ptr(),
        )
    })?;
    Ok(pid)
}

/// A posix_spawn family return code as a result.
fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::from_raw_os_error(rc))
    }
}

/// Spawn attributes, destroyed on drop (made once initialised).
struct Attr(libc::posix_spawnattr_t);

impl Drop for Attr {
    fn drop(&mut self) {
        // SAFETY: initialised by posix_spawnattr_init (see its maker).
        unsafe {
            libc::posix_spawnattr_destroy(&mut self.0);
        }
    }
}

/// Spawn file actions, destroyed on drop (made once initialised).
struct Actions(libc::posix_spawn_file_actions_t);

impl Drop for Actions {
    fn drop(&mut self) {
        // SAFETY: initialised by posix_spawn_file_actions_init.
        unsafe {
            libc::posix_spawn_file_actions_destroy(&mut self.0);
        }
    }
}

/// The program's path: as given when it names one, else the first
/// executable file of that name in the child's `PATH` (as `execvp`).
fn resolve(
    program: &str,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
) -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return Ok(program.into());
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or_else(|| "/usr/local/bin:/usr/bin:/bin".into(), |(_, v)| v.clone());
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|f| {
            std::fs::metadata(f).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOENT))
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

/// Buffers this large or larger are mapped on their own and unmapped
/// when freed (`tune_allocator`).
const OWN_MAPPING_FROM: i32 = 1 << 20;

/// Fixes glibc's mmap threshold at 1 MiB. By default glibc raises it to
/// the size of each large block freed (up to 32 MiB), after which pages
/// of stored output, history and snapshots (up to 8 MiB each) come from
/// the arenas and stay resident once freed, so the node's memory grew
/// with every burst of large replies. A no-op elsewhere.
pub fn tune_allocator() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt takes two plain integers and changes only the
    // allocator's own parameters, under its own locks.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_FROM);
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

/// Registers `fd` with the current tokio runtime for `interest`. Must be
/// called inside a runtime.
pub fn register_owned(
    fd: std::sync::Arc<filedescriptor::FileDescriptor>,
    interest: tokio::io::Interest,
) -> std::io::Result<tokio::io::unix::AsyncFd<std::sync::Arc<filedescriptor::FileDescriptor>>> {
    // SAFETY: the `AsyncFd` owns a counted reference to the descriptor, so
    // it stays open for the `AsyncFd`'s whole life, and a `FileDescriptor`
    // always answers the same descriptor (it is never replaced in place).
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, interest) }
        .map_err(std::io::Error::from)
}

/// Puts the calling thread in the idle scheduling class (SCHED_IDLE):
/// any woken thread of normal priority takes its CPU at once, where a nice
/// value only lowers its share and lets it run out its time slice first
/// (up to a scheduler tick, 4 ms, on the kernels measured); on an idle
/// machine it runs as fast as ever. For threads that stay background for
/// their whole life (an unprivileged thread cannot leave the class). Falls
/// back to `lower_priority(&[], by)`.
pub fn idle_thread(by: i32) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a valid sched_param for the calling thread (0).
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc != 0 {
        lower_priority(&[], by);
    }
}

/// The calling thread is in the idle scheduling class (`idle_thread`).
pub fn in_idle_class() -> bool {
    // SAFETY: asks the calling thread's policy; no memory is passed.
    unsafe { libc::sched_getscheduler(0) == libc::SCHED_IDLE }
}

/// Puts the calling thread and this process's threads whose names start
/// with one of `names` `by` nice steps below the process (a thread's nice
/// value is its own on Linux; threads it starts inherit it); threads
/// already there are left alone, so calling it again only catches threads
/// started since. Raising a nice value needs no privilege. For background
/// work (the store and sled's own threads) that must not delay a
/// keystroke's path on a busy core: a woken thread of normal priority
/// runs first. Not SCHED_IDLE: that halved the rate a flood is stored at
/// (docs/benchmarks.md), and an unprivileged thread cannot leave it.
pub fn lower_priority(names: &[&str], by: i32) {
    // The process's own (its first thread's), not the calling thread's.
    let base = nice_of(std::process::id() as i32).unwrap_or(0);
    let target = (base + by).min(19);
    let own = rustix::thread::gettid().as_raw_nonzero().get();
    let mut tids = vec![own];
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let Ok(tid) = task.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if tid != own && names.iter().any(|n| comm.starts_with(n)) {
                tids.push(tid);
            }
        }
    }
    for tid in tids {
        if nice_of(tid).is_none_or(|nice| nice >= target) {
            continue;
        }
        // SAFETY: plain integer arguments; no memory is passed.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, target) };
        if rc != 0 {
            tracing::debug!(tid, "could not lower a background thread's priority");
        }
    }
}

/// Gives the calling thread the nice value `by` steps below the process's
/// (0: the process's own): whether the kernel took it (going back up needs
/// `CAP_SYS_NICE` or an `RLIMIT_NICE` reaching it).
pub fn renice_thread(by: i32) -> bool {
    let base = nice_of(std::process::id() as i32).unwrap_or(0);
    let tid = rustix::thread::gettid().as_raw_nonzero().get() as libc::id_t;
    // SAFETY: plain integer arguments for the calling thread; no memory is
    // passed.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, (base + by).min(19)) == 0 }
}

/// This process may lower a nice value it raised, as the node does when
/// someone types into a job it reniced (`session::bulk`): probed once on
/// a thread of its own, raised to nice 10 and lowered to 0 again. The
/// kernel allows that with `CAP_SYS_NICE` in the initial user namespace
/// (not a container's root without it) or an `RLIMIT_NICE` reaching 0,
/// which the node's programs inherit.
pub fn may_lower_nice() -> bool {
    static MAY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *MAY.get_or_init(|| {
        let probe = std::thread::Builder::new()
            .name("nice-probe".into())
            .spawn(|| {
                let tid = rustix::thread::gettid().as_raw_nonzero().get() as libc::id_t;
                // SAFETY: plain integer arguments for the calling thread;
                // no memory is passed.
                unsafe {
                    libc::setpriority(libc::PRIO_PROCESS, tid, 10) == 0
                        && libc::setpriority(libc::PRIO_PROCESS, tid, 0) == 0
                }
            });
        probe.ok().and_then(|p| p.join().ok()).unwrap_or(false)
    })
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
