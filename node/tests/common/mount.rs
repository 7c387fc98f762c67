//! A bindfs (FUSE) mount a test owns: a file system whose daemon the test
//! stops (a hung network mount) or kills (a dead one); resumed, unmounted
//! and killed on drop. Needs bindfs and FUSE (`deploy/test.sh` installs them).

use std::path::PathBuf;
use std::process::{Child, Command};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{poll_pause_blocking, PATIENCE};

/// A bindfs mount this test owns; resumed, unmounted and killed on drop.
pub struct Mount {
    daemon: Child,
    pub path: PathBuf,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Mount {
    pub fn new() -> Mount {
        let src = tempfile::tempdir().unwrap();
        let mnt = tempfile::tempdir().unwrap();
        std::fs::create_dir(src.path().join("sub")).unwrap();
        let daemon = Command::new("bindfs")
            .arg("-f")
            .arg(src.path())
            .arg(mnt.path())
            .spawn()
            .expect("bindfs runs (install it: apt-get install bindfs fuse3)");
        let path = mnt.path().to_path_buf();
        let mount = Mount {
            daemon,
            path,
            _dirs: (src, mnt),
        };
        let deadline = std::time::Instant::now() + PATIENCE;
        while !mount.mounted() {
            assert!(std::time::Instant::now() < deadline, "bindfs never mounted");
            poll_pause_blocking();
        }
        mount
    }

    fn mounted(&self) -> bool {
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let path = self.path.display().to_string();
        table
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(path.as_str()))
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.daemon.id() as i32)
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = kill(self.pid(), Signal::SIGCONT);
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}
