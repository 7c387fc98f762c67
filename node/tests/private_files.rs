//! Every file and folder a node makes is its user's alone (PROTOCOL.md
//! section 2: the data dir holds every session's output and the node's
//! secrets): with the common umask 022, a real node, its PTY keeper and a
//! session leave nothing that group or others may read, running or after
//! a clean stop.

mod common;

use common::binary::{create, wait_exited, BinaryNode};
use common::*;
use std::os::unix::fs::PermissionsExt;

/// Paths under `dir` (itself too) with any group or other access.
fn open_to_others(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let meta = std::fs::symlink_metadata(dir).unwrap();
    if meta.file_type().is_symlink() {
        return out;
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        out.push(format!("{} {mode:o}", dir.display()));
    }
    if meta.is_dir() {
        for entry in std::fs::read_dir(dir).unwrap() {
            out.extend(open_to_others(&entry.unwrap().path()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_a_node_and_its_keeper_make_is_their_users_alone() {
    // The umask most users have: files 0644 and folders 0755 unless
    // termesh says otherwise.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    let node = BinaryNode::start("");
    let session = create(&node, "echo private output; exit 0").await.id;
    wait_exited(&node, &session).await;
    let running = open_to_others(&node.data);
    assert!(running.is_empty(), "while it runs: {running:#?}");
    let dir = node.stop_keeping_dir();
    let stopped = open_to_others(&dir.path().join("data"));
    assert!(stopped.is_empty(), "after a clean stop: {stopped:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_started_before_any_node_makes_its_data_dir_private() {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("fresh/data");
    let mut keeper = std::process::Command::new(env!("CARGO_BIN_EXE_termesh"))
        .args(["keeper", "--data-dir"])
        .arg(&data)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    within(PATIENCE, "the keeper's socket", async {
        while !data.join("keeper.sock").exists() {
            poll_pause().await;
        }
    })
    .await;
    let open = open_to_others(&tmp.path().join("fresh"));
    let _ = keeper.kill();
    let _ = keeper.wait();
    assert!(open.is_empty(), "{open:#?}");
}
