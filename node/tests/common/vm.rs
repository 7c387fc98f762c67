//! A virtual machine of its own under a real systemd on the unified
//! cgroup v2 hierarchy (every controller, `cpu` too, given to systemd):
//! this host's system booted by QEMU under this host's Debian kernel
//! (`/boot/vmlinuz-*`), its root this host's `/` shared read-only over
//! 9p with an overlay on top whose writes go to a disk image of the
//! machine's own (so they outlive a reboot, and never reach this host),
//! with this build's `termesh` bound at `/opt/termesh-build/termesh`.
//! A tiny initramfs made here (static busybox, the kernel's modules for
//! 9p, virtio, ext4 and overlayfs, and the init script below) assembles
//! that root and hands it to systemd. Commands run inside as root
//! through a virtio serial port answered by a small service the init
//! puts in the machine. Guest TCP ports named at boot are forwarded
//! from 127.0.0.1 on this host. KVM where the host's KVM runs a stock
//! kernel, QEMU's own emulation (TCG) elsewhere. Torn down on drop: QEMU
//! killed, its directory removed.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::{engine::general_purpose::STANDARD as B64, Engine};

use super::boot_parts::{dynamic, kernel, Cpio};

/// Boot, a command, and a shutdown each take seconds (tens under
/// emulation); this bounds each on a loaded host.
const BOOT: Duration = Duration::from_secs(180);

/// The machine's first process: mounts the host's root (9p), the disk
/// (the overlay's upper layer), the overlay, binds the binary, installs
/// the command service, sets up the network QEMU's user mode expects,
/// and starts systemd. `@BIN@` is the binary's path. A step that fails
/// ends init: the kernel panics, and QEMU (`-no-reboot`) exits.
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
fail() { echo "termesh vm init: $*"; exit 1; }
mount -t proc proc /proc && mount -t sysfs sysfs /sys && mount -t devtmpfs dev /dev || fail "no /proc, /sys, /dev"
for m in $(cat /modules/order); do insmod "/modules/$m" || fail "insmod $m"; done
mkdir -p /lower /disk /newroot
mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=524288,cache=loose hostroot /lower || fail "no 9p share of the host's /"
mount -t ext4 /dev/vda /disk && mkdir -p /disk/upper /disk/work || fail "no disk"
mount -t overlay overlay -o lowerdir=/lower,upperdir=/disk/upper,workdir=/disk/work /newroot || fail "no overlay"
cd /newroot
for t in multi-user sockets timers; do rm -f etc/systemd/system/$t.target.wants/*; done
mkdir -p etc/termesh-vm etc/systemd/system/sysinit.target.wants opt/termesh-build
cp /agent etc/termesh-vm/agent && cp /agent.service etc/systemd/system/termesh-vm-agent.service || fail "no agent"
ln -sf ../termesh-vm-agent.service etc/systemd/system/sysinit.target.wants/
[ -e opt/termesh-build/termesh ] || touch opt/termesh-build/termesh
mount --bind /lower@BIN@ opt/termesh-build/termesh || fail "no binary"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs tmp || fail "no /tmp"
ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2 || fail "no network"
cd /
umount /proc /sys /dev
exec switch_root /newroot /lib/systemd/systemd
"#;

/// The command service: each line `<id> <base64 script>` runs with `sh`
/// as root, stdin empty; the answer is `<id> <exit code> <base64 stdout>
/// <base64 stderr>`. A read that fails (this host not connected yet, or
/// gone between two boots' connections) is retried.
const AGENT: &str = r#"#!/bin/bash
port=/dev/virtio-ports/termesh.cmd
until [ -e $port ]; do sleep 0.1; done
exec 3<>$port
mkdir -p /run/termesh-vm && cd /run/termesh-vm || exit 1
while :; do
  if ! read -r id script <&3; then sleep 0.2; continue; fi
  printf '%s' "$script" | base64 -d > script
  (cd / && sh /run/termesh-vm/script) </dev/null >out 2>err
  rc=$?
  printf '%s %s %s %s\n' "$id" "$rc" "$(base64 -w0 out)" "$(base64 -w0 err)" >&3
done
"#;

/// Outside the boot's order (`DefaultDependencies=no`, no conflict with
/// `shutdown.target`): up early, and answering while units stop, until
/// the final sweep.
const AGENT_UNIT: &str = "[Unit]\nDescription=termesh test harness command channel\n\
    DefaultDependencies=no\n\n[Service]\nExecStart=/bin/bash /etc/termesh-vm/agent\n\
    Environment=HOME=/root\n";

/// One booted machine and what it runs on (see the module's doc).
pub struct Machine {
    /// How it boots, and the boot running now.
    command: Command,
    qemu: Option<Child>,
    /// To the command service; `None` between boots.
    channel: Mutex<Option<Channel>>,
    /// Guest TCP port, and the port on 127.0.0.1 here forwarded to it.
    ports: Vec<(u16, u16)>,
    /// `kvm` or `tcg`.
    pub accel: &'static str,
    socket: PathBuf,
    log: PathBuf,
    dir: tempfile::TempDir,
}

impl Machine {
    /// Boots the machine to `multi-user.target` (with none of the
    /// services this host enabled) and waits until systemd says it is
    /// up, forwarding each of `ports` (guest TCP ports; a service must
    /// listen on 0.0.0.0 or 10.0.2.15 there to be reached). `Err` says
    /// why this host cannot: not root, no QEMU, no Debian kernel, no
    /// static busybox, or a machine that did not boot (its console's end).
    pub fn boot(bin: &Path, ports: &[u16]) -> Result<Machine, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("not root".into());
        }
        let found = Command::new("qemu-system-x86_64")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Err("no qemu-system-x86_64 (Debian: qemu-system-x86)".into());
        }
        let (kernel, modules) = kernel()?;
        let busybox = std::fs::read("/bin/busybox")
            .ok()
            .filter(|elf| !dynamic(elf))
            .ok_or("no static /bin/busybox (Debian: busybox-static)")?;
        let bin = bin.canonicalize().map_err(|e| format!("{bin:?}: {e}"))?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let initrd = dir.path().join("initrd.cpio");
        let init = INIT.replace("@BIN@", &quoted(&bin.to_string_lossy()));
        let cpio = initramfs(&modules, &busybox, &init).map_err(|e| e.to_string())?;
        std::fs::write(&initrd, cpio).map_err(|e| e.to_string())?;
        let disk = dir.path().join("upper.img");
        std::fs::File::create(&disk)
            .and_then(|f| f.set_len(4 << 30))
            .map_err(|e| e.to_string())?;
        let mkfs = Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&disk)
            .output()
            .map_err(|e| format!("mkfs.ext4: {e}"))?;
        if !mkfs.status.success() {
            return Err(format!(
                "mkfs.ext4: {}",
                String::from_utf8_lossy(&mkfs.stderr)
            ));
        }
        let ports: Vec<(u16, u16)> = ports
            .iter()
            .map(|&p| (p, super::cluster::free_port("127.0.0.1")))
            .collect();
        let (socket, log) = (dir.path().join("cmd.sock"), dir.path().join("console.log"));
        let accel = accelerator();
        let mut qemu = Command::new("qemu-system-x86_64");
        qemu.args(["-machine", "q35", "-smp", "2", "-m", "1024"])
            .args(if accel == "kvm" {
                ["-accel", "kvm", "-cpu", "host"]
            } else {
                ["-accel", "tcg,thread=multi", "-cpu", "max"]
            })
            .args(["-nodefaults", "-display", "none", "-no-reboot"])
            .arg("-kernel")
            .arg(&kernel)
            .arg("-initrd")
            .arg(&initrd)
            .args(["-append", &append()])
            .arg("-chardev")
            .arg(format!("file,id=con,append=on,path={}", log.display()))
            .args(["-serial", "chardev:con"])
            .arg("-fsdev")
            .arg("local,id=root,path=/,security_model=none,readonly=on,multidevs=remap")
            .args(["-device", "virtio-9p-pci,fsdev=root,mount_tag=hostroot"])
            .arg("-drive")
            .arg(format!(
                "file={},format=raw,if=virtio,cache=unsafe",
                disk.display()
            ))
            .arg("-netdev")
            .arg(ports.iter().fold("user,id=net".to_string(), |s, (g, h)| {
                format!("{s},hostfwd=tcp:127.0.0.1:{h}-:{g}")
            }))
            .args(["-device", "virtio-net-pci,netdev=net"])
            .args(["-device", "virtio-serial", "-chardev"])
            .arg(format!(
                "socket,id=cmd,path={},server=on,wait=off",
                socket.display()
            ))
            .args(["-device", "virtserialport,chardev=cmd,name=termesh.cmd"])
            .stdin(Stdio::null());
        let mut machine = Machine {
            command: qemu,
            qemu: None,
            channel: Mutex::new(None),
            ports,
            accel,
            socket,
            log,
            dir,
        };
        machine.start()?;
        Ok(machine)
    }

    /// Boots the machine (again) and waits until systemd says it is up.
    fn start(&mut self) -> Result<(), String> {
        let _ = std::fs::remove_file(&self.socket);
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("qemu.log"))
            .map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = self
            .command
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("qemu did not start: {e}"))?;
        self.qemu = Some(child);
        // QEMU makes its end of the channel before the machine runs.
        let stream = self.until("QEMU's command socket", |m| {
            if !m.running() {
                return Some(Err(m.ended()));
            }
            UnixStream::connect(&m.socket).ok().map(Ok)
        })?;
        *self.channel.lock().unwrap() = Some(Channel {
            stream,
            pending: Vec::new(),
            next: 0,
        });
        let up = self
            .request("systemctl is-system-running --wait", BOOT)
            .map_err(|why| format!("{why}\n{}", self.ended()))?;
        let state = String::from_utf8_lossy(&up.stdout);
        match state.trim() {
            "running" | "degraded" => Ok(()),
            other => Err(format!("systemd is {other}:\n{}", self.ended())),
        }
    }

    /// Powers the machine off and boots it again on the same disk: what
    /// its services left on disk stays, what ran does not.
    pub fn reboot(&mut self) {
        self.power_off();
        self.start().expect("the machine boots again");
    }

    /// Whether QEMU still runs (it ends with the machine).
    fn running(&mut self) -> bool {
        self.qemu
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Why the machine is not up: QEMU's words and the console's end.
    fn ended(&self) -> String {
        let qemu = std::fs::read_to_string(self.dir.path().join("qemu.log")).unwrap_or_default();
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        format!("qemu: {}\nconsole:\n{tail}", qemu.trim())
    }

    /// Runs `script` with `sh` inside, as root; `Err` when the machine
    /// does not answer within `limit` (or has gone).
    fn request(&self, script: &str, limit: Duration) -> Result<Output, String> {
        let mut channel = self.channel.lock().unwrap_or_else(|p| p.into_inner());
        let channel = channel.as_mut().ok_or("the machine is off")?;
        channel.call(script, Instant::now() + limit)
    }

    /// Runs `args` inside, as root.
    pub fn run(&self, args: &[&str]) -> Output {
        let script: Vec<String> = args.iter().map(|a| quoted(a)).collect();
        let script = format!("exec {}", script.join(" "));
        self.request(&script, BOOT)
            .unwrap_or_else(|why| panic!("{args:?} inside the machine: {why}"))
    }

    /// Runs `script` with `sh -c` inside; its stdout, failing the test
    /// when it fails.
    pub fn sh(&self, script: &str) -> String {
        let out = self.run(&["sh", "-c", script]);
        assert!(
            out.status.success(),
            "`{script}` inside the machine: {out:?}"
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Writes `contents` to `path` inside (its directory made).
    pub fn put(&self, path: &str, contents: &[u8]) {
        let path = quoted(path);
        self.sh(&format!(
            "mkdir -p \"$(dirname {path})\" && echo {} | base64 -d > {path}",
            B64.encode(contents)
        ));
    }

    /// Whether process `pid` (as the machine numbers it) lives.
    pub fn alive(&self, pid: &str) -> bool {
        self.run(&["kill", "-0", pid]).status.success()
    }

    /// Where on this host guest TCP port `port` (one named at boot) is.
    pub fn addr(&self, port: u16) -> SocketAddr {
        let (_, host) = self
            .ports
            .iter()
            .find(|(guest, _)| *guest == port)
            .unwrap_or_else(|| panic!("guest port {port} was not forwarded at boot"));
        SocketAddr::from(([127, 0, 0, 1], *host))
    }

    /// Polls `f` until it answers, within `BOOT`.
    pub fn until<T>(&mut self, what: &str, f: impl FnMut(&mut Self) -> Option<T>) -> T {
        super::poll_machine(self, BOOT, what, Self::log, f)
    }

    /// Powers the machine off from inside and waits for QEMU to end (its
    /// units stopped, as at any shutdown).
    pub fn power_off(&mut self) {
        // The answer may not come: the service ends in the final sweep.
        let _ = self.request("systemctl poweroff", Duration::from_secs(10));
        self.until("the machine's end", |m| (!m.running()).then_some(()));
        *self.channel.lock().unwrap() = None;
    }

    /// The machine's console (every boot's) so far.
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        if let Some(qemu) = self.qemu.as_mut() {
            let _ = qemu.kill();
            let _ = qemu.wait();
        }
    }
}

/// This host's end of the command service (see `AGENT`).
struct Channel {
    stream: UnixStream,
    /// Bytes read past the last whole answer.
    pending: Vec<u8>,
    /// The next request's id: an answer to an earlier one (given up on)
    /// is skipped.
    next: u64,
}

impl Channel {
    fn call(&mut self, script: &str, deadline: Instant) -> Result<Output, String> {
        let id = self.next;
        self.next += 1;
        let line = format!("{id} {}\n", B64.encode(script));
        self.stream
            .write_all(line.as_bytes())
            .map_err(|e| format!("the machine's command channel: {e}"))?;
        loop {
            while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line[..end]).into_owned();
                let fields: Vec<&str> = line.split(' ').collect();
                if fields.first() != Some(&id.to_string().as_str()) {
                    continue;
                }
                let [_, code, out, err] = fields[..] else {
                    return Err(format!("a garbled answer: {line}"));
                };
                let decode = |s: &str| B64.decode(s).map_err(|e| format!("{e}: {line}"));
                return Ok(Output {
                    status: ExitStatus::from_raw(code.parse::<i32>().unwrap_or(255) << 8),
                    stdout: decode(out)?,
                    stderr: decode(err)?,
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("no answer in time".into());
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| e.to_string())?;
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("the machine went away".into()),
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::Interrupted) => {}
                Err(e) => return Err(format!("the machine's command channel: {e}")),
            }
        }
    }
}

/// The kernel's command line: systemd on cgroup v2 only, the console on
/// the serial port, a panic ending QEMU, the network device `eth0` (the
/// name the init set up), none of this host's first-boot questions.
fn append() -> String {
    [
        "console=ttyS0",
        "rdinit=/init",
        "panic=-1",
        "net.ifnames=0",
        "systemd.unified_cgroup_hierarchy=1",
        "systemd.firstboot=off",
        "systemd.unit=multi-user.target",
    ]
    .join(" ")
}

/// KVM where it runs a stock kernel: a VMX or SVM host's module, not
/// `kvm_pvm` (whose guests must be built for it: a Debian kernel hangs
/// there before its first word). Emulation elsewhere.
fn accelerator() -> &'static str {
    let stock = ["kvm_intel", "kvm_amd"]
        .iter()
        .any(|m| Path::new("/sys/module").join(m).exists());
    let open = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    if stock && open {
        "kvm"
    } else {
        "tcg"
    }
}

/// The initramfs: busybox, the modules (and their order), the init and
/// the command service, as a `newc` cpio archive.
fn initramfs(modules: &[PathBuf], busybox: &[u8], init: &str) -> std::io::Result<Vec<u8>> {
    let mut cpio = Cpio::default();
    for dir in ["bin", "dev", "proc", "sys", "modules"] {
        cpio.add(dir, 0o40755, 0, b"");
    }
    cpio.add("dev/console", 0o20600, (5 << 8) | 1, b"");
    cpio.add("bin/busybox", 0o100755, 0, busybox);
    let mut order = String::new();
    for path in modules {
        let file = path.file_name().unwrap_or_default().to_string_lossy();
        cpio.add(
            &format!("modules/{file}"),
            0o100644,
            0,
            &std::fs::read(path)?,
        );
        order.push_str(&format!("{file}\n"));
    }
    cpio.add("modules/order", 0o100644, 0, order.as_bytes());
    cpio.add("init", 0o100755, 0, init.as_bytes());
    cpio.add("agent", 0o100755, 0, AGENT.as_bytes());
    cpio.add("agent.service", 0o100644, 0, AGENT_UNIT.as_bytes());
    Ok(cpio.finish())
}

/// `s` quoted for `sh`.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
