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

/// Symlinks planted in a data dir, each pointing at a file of the node's
/// user: no start follows one. A file read or appended in place
/// (`keeper.log`, `keeper.lock`, `admin.token`) is refused with a message
/// naming it (the operator removes it and starts again); a file written
/// whole (`node.url`, `store.manifest`) replaces the link. The victim is
/// never written, read as a token, or made private. Another user cannot
/// plant one at all (the data dir is 0700).
#[test]
fn symlinks_planted_in_the_data_dir_are_never_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = tmp.path().join("victim");
    // A well-formed token: read through a link, it would be the admin's.
    let precious = "victim-text-that-looks-like-a-token-0123456789\n";
    std::fs::write(&victim, precious).unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let planted = [
        "keeper.log",
        "keeper.lock",
        "admin.token",
        "node.url",
        "store.manifest",
    ];
    for name in planted {
        std::os::unix::fs::symlink(&victim, data.join(name)).unwrap();
    }
    let mut refused = Vec::new();
    let mut served = false;
    // Bounded: one start per planted file and one more.
    for _ in 0..=planted.len() {
        let mut node = std::process::Command::new(env!("CARGO_BIN_EXE_termesh"))
            .args(["node", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&data)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::{BufRead, Read};
        let mut lines = std::io::BufReader::new(node.stdout.take().unwrap()).lines();
        if lines.next().is_some() {
            // Serving: stop it cleanly.
            std::thread::spawn(move || lines.for_each(drop));
            let pid = nix::unistd::Pid::from_raw(node.id() as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
            assert!(node.wait().unwrap().success());
            served = true;
            break;
        }
        let mut err = String::new();
        node.stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(!node.wait().unwrap().success(), "{err}");
        let name = planted
            .iter()
            .find(|n| err.contains(&format!("{}/{n} is a symbolic link", data.display())))
            .unwrap_or_else(|| panic!("no planted file named in: {err}"));
        refused.push(*name);
        std::fs::remove_file(data.join(name)).unwrap();
    }
    assert!(served, "the node never started; refused {refused:?}");
    let mut read_in_place = refused.clone();
    read_in_place.sort();
    assert_eq!(read_in_place, ["admin.token", "keeper.lock", "keeper.log"]);
    for name in ["node.url", "store.manifest"] {
        let meta = std::fs::symlink_metadata(data.join(name));
        assert!(
            meta.map(|m| !m.file_type().is_symlink()).unwrap_or(true),
            "{name} is still a link"
        );
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), precious);
    let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "the victim's mode was changed");
    // Another user cannot plant one (skipped where setpriv cannot switch).
    let other = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "ln",
            "-s",
        ])
        .arg(&victim)
        .arg(data.join("keeper.log.new"))
        .output();
    if let Ok(out) = other {
        let err = String::from_utf8_lossy(&out.stderr);
        if !err.contains("setpriv") {
            assert!(!out.status.success(), "another user planted a link");
            assert!(err.contains("Permission denied"), "{err}");
        }
    }
}

/// Another user cannot reach a running node's keeper socket (nor see its
/// data dir): connecting as the user nobody is refused, and the keeper
/// serves on. Skipped where this test cannot switch users.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_cannot_reach_the_keeper_socket() {
    let node = BinaryNode::start("");
    let socket = node.data.join("keeper.sock");
    within(PATIENCE, "the keeper's socket", async {
        while !socket.exists() {
            poll_pause().await;
        }
    })
    .await;
    let probe = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({:?})\n    \
         print('connected')\nexcept OSError as e:\n    print('refused', e.strerror)\n",
        socket.display().to_string()
    );
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "python3",
            "-c",
        ])
        .arg(&probe)
        .output();
    let Some(out) = out.ok().filter(|o| o.status.success()) else {
        println!("SKIPPED: cannot run python3 as the user nobody here");
        return;
    };
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("refused Permission denied"), "{said}");
    let session = create(&node, "echo still-served; exit 0").await.id;
    wait_exited(&node, &session).await;
}
