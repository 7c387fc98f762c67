//! A session whose cwd hangs (a FUSE mount whose daemon is stopped, as a
//! dead network mount would) delays only its own `create`: other creates
//! and `list` go on. Needs bindfs and FUSE (`.ci/run` installs them).

mod common;

use common::mount::Mount;
use common::*;
use nix::sys::signal::{kill, Signal};
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg};

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
