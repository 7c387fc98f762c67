//! A machine of its own under a real systemd: this host's system booted
//! by `systemd-nspawn` on a throwaway overlay of its root (a tmpfs takes
//! every write), sharing the host's network, with this build's `termesh`
//! bound at `/opt/termesh-build/termesh` (to install from, as an operator
//! installs a release). Commands run inside through
//! `nsenter`. Torn down on drop: the container's init killed (and with
//! it every process of its PID namespace), the overlay unmounted. Only
//! the root file system is seen through the overlay: a host with `/usr`
//! mounted apart boots no machine (`boot` says why).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Boot, and a shutdown, take seconds; this bounds them on a loaded host.
const BOOT: Duration = Duration::from_secs(120);

/// One booted container and what it runs on (see the module's doc).
pub struct Machine {
    /// How it boots, and the boot running now.
    command: Command,
    nspawn: Option<Child>,
    /// The container's init (its PID 1), as this host numbers it.
    leader: i32,
    /// The container's root: the overlay, readable from here.
    pub root: PathBuf,
    layers: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Machine {
    /// Boots the container to `multi-user.target` (with none of the
    /// services this host enabled) and waits until systemd says it is up.
    /// `Err` says why this host cannot: not root, no `systemd-nspawn`, no
    /// overlayfs, a system that does not boot in a container.
    pub fn boot(bin: &Path) -> Result<Machine, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("not root".into());
        }
        let found = Command::new("systemd-nspawn")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Err("no systemd-nspawn (Debian: systemd-container)".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (layers, root) = (dir.path().join("layers"), dir.path().join("root"));
        std::fs::create_dir(&layers).map_err(|e| e.to_string())?;
        std::fs::create_dir(&root).map_err(|e| e.to_string())?;
        run_host(&["mount", "-t", "tmpfs", "tmpfs"], &layers)?;
        let (upper, work) = (layers.join("upper"), layers.join("work"));
        let overlay = std::fs::create_dir(&upper)
            .and_then(|()| std::fs::create_dir(&work))
            .map_err(|e| e.to_string())
            .and_then(|()| {
                let options = format!(
                    "lowerdir=/,upperdir={},workdir={}",
                    upper.display(),
                    work.display()
                );
                run_host(
                    &["mount", "-t", "overlay", "overlay", "-o", &options],
                    &root,
                )
            });
        if let Err(why) = overlay {
            let _ = run_host(&["umount", "-l"], &layers);
            return Err(format!("no overlay of / ({why})"));
        }
        // The machine starts what is enabled in it, not this host's own
        // services (databases, daemons, their sockets and timers).
        for target in ["multi-user", "sockets", "timers"] {
            let wants = root.join(format!("etc/systemd/system/{target}.target.wants"));
            for entry in std::fs::read_dir(&wants).into_iter().flatten().flatten() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let log = dir.path().join("nspawn.log");
        static BOOTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = BOOTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("termesh-unit-{}-{n}", std::process::id());
        let mut nspawn = Command::new("systemd-nspawn");
        nspawn
            .arg(format!("--directory={}", root.display()))
            .args(["--register=no", "--keep-unit", "--machine", &name])
            // As a host's systemd may: lower a unit's OOMScoreAdjust=.
            .arg("--capability=CAP_SYS_RESOURCE")
            .arg(format!(
                "--bind-ro={}:/opt/termesh-build/termesh",
                bin.display()
            ))
            .args(["--boot", "--"])
            .args(["systemd.firstboot=off", "systemd.unit=multi-user.target"])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit());
        let mut machine = Machine {
            leader: 0,
            nspawn: None,
            command: nspawn,
            root,
            layers,
            log,
            _dir: dir,
        };
        machine.start()?;
        Ok(machine)
    }

    /// Boots the machine (again) and waits until systemd says it is up.
    fn start(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| e.to_string())?;
        let child = self
            .command
            .stdout(log)
            .spawn()
            .map_err(|e| format!("systemd-nspawn did not start: {e}"))?;
        self.nspawn = Some(child);
        // A container that ends before its init runs did not boot here.
        self.leader = self.until("the container's init", |m| {
            if m.running() {
                m.init().map(Ok)
            } else {
                Some(Err(format!("systemd-nspawn ended:\n{}", m.log())))
            }
        })?;
        self.until("systemd inside up", |m| {
            let state = m.run(&["systemctl", "is-system-running"]);
            let state = String::from_utf8_lossy(&state.stdout);
            matches!(state.trim(), "running" | "degraded").then_some(())
        });
        Ok(())
    }

    /// Powers the machine off and boots it again on the same root: what
    /// its services left on disk stays, what ran does not.
    pub fn reboot(&mut self) {
        self.power_off();
        self.start().expect("the machine boots again");
    }

    /// Whether `systemd-nspawn` still runs (it ends with the machine).
    fn running(&mut self) -> bool {
        self.nspawn
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// The child of `systemd-nspawn` that runs systemd.
    fn init(&self) -> Option<i32> {
        let parent = self.nspawn.as_ref()?.id() as i32;
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .find_map(|entry| {
                let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let after = &stat[stat.rfind(')')? + 1..];
                let ppid: i32 = after.split_whitespace().nth(1)?.parse().ok()?;
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
                (ppid == parent && comm.trim() == "systemd").then_some(pid)
            })
    }

    /// Runs `args` inside (all of the container's namespaces).
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .args(["-t", &self.leader.to_string(), "-a", "--"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("nsenter runs")
    }

    /// Runs `script` with `sh -c` inside; its stdout, failing the test
    /// when it fails.
    pub fn sh(&self, script: &str) -> String {
        let out = self.run(&["sh", "-c", script]);
        assert!(
            out.status.success(),
            "`{script}` inside the container: {out:?}"
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Whether process `pid` (as the container numbers it) lives.
    pub fn alive(&self, pid: &str) -> bool {
        self.run(&["kill", "-0", pid]).status.success()
    }

    /// Polls `f` until it answers, within `BOOT`.
    pub fn until<T>(&mut self, what: &str, f: impl FnMut(&mut Self) -> Option<T>) -> T {
        super::poll_machine(self, BOOT, what, Self::log, f)
    }

    /// Powers the machine off from inside and waits for the container to
    /// end (its units stopped, as at any shutdown).
    pub fn power_off(&mut self) {
        // The command may lose its caller as the machine goes down.
        let _ = self.run(&["systemctl", "poweroff"]);
        self.until("the container's end", |m| (!m.running()).then_some(()));
        self.leader = 0;
    }

    /// The container's console so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        if self.running() {
            // Its init, found now if the boot had not got that far.
            if let Some(init) = Some(self.leader).filter(|p| *p > 0).or_else(|| self.init()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(init),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.running() && Instant::now() < deadline {
                super::poll_pause_blocking();
            }
            if let Some(child) = self.nspawn.as_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = run_host(&["umount", "-l"], &self.root);
        let _ = run_host(&["umount", "-l"], &self.layers);
    }
}

/// `args` then `at`, on this host; `Err` with what it said.
fn run_host(args: &[&str], at: &Path) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .arg(at)
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}
