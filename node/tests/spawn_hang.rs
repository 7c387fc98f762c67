//! A session whose cwd hangs (a FUSE mount whose daemon is stopped, as a
//! dead network mount would) delays only its own `create`: other creates
//! and `list` go on. Needs bindfs and FUSE (`.ci/run` installs them).

mod common;

use std::path::PathBuf;
use std::process::{Child, Command};

use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg};

/// A bindfs mount this test owns; resumed, unmounted and killed on drop.
struct Mount {
    daemon: Child,
    path: PathBuf,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Mount {
    fn new() -> Mount {
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

    fn pid(&self) -> Pid {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_cwd_stalls_only_its_own_create() {
    let node = TestNode::start();
    let mount = Mount::new();
    kill(mount.pid(), Signal::SIGSTOP).unwrap();
    let hung_cwd = mount.path.join("sub").display().to_string();

    let mut slow = node.client(OPERATOR).await;
    let hung = tokio::spawn(async move {
        let reply = slow
            .request(|id| ClientMsg::Create {
                id,
                req: CreateRequest {
                    command: Some(vec!["sleep".into(), "1000".into()]),
                    cwd: Some(hung_cwd),
                    ..Default::default()
                },
            })
            .await;
        (slow, reply)
    });
    // While that create waits on the mount, the node serves others.
    within(PATIENCE, "a create beside the hung one", async {
        let other = node.create(&["sleep", "1000"]).await;
        assert!(node.info(&other.id).await.is_some(), "list works");
    })
    .await;
    assert!(!hung.is_finished(), "the hung create waits on its mount");

    kill(mount.pid(), Signal::SIGCONT).unwrap();
    let (slow, reply) = within(PATIENCE, "the hung create to finish", hung)
        .await
        .unwrap();
    assert!(matches!(reply, Ok(ServerMsg::Created { .. })), "{reply:?}");
    slow.close().await;
}
