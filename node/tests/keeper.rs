//! Programs outlive their node (issue 20): real `termesh node` processes
//! whose programs run under the data dir's PTY keeper. The restart matrix
//! (SIGTERM, kill -9, another build of the binary) with a program counting
//! lines, checked line for line through a client that resumes with
//! `from_seq`; an exit while the node is down reported afterwards; a
//! keeper killed makes its sessions `lost`, and the next create starts a
//! new one; a keeper makes its socket again when it alone is removed, and
//! stops when its data dir is.

mod common;

use common::binary::{client, create, info, BinaryNode};
use common::*;
use termesh_transport::SessionStatus;

/// Counts up, a line every 10 ms, forever.
const COUNTER: &str =
    "stty -onlcr -echo; i=0; while true; do i=$((i+1)); echo $i; sleep 0.01; done";

/// The complete lines of `data` count 1, 2, 3, ...; answers the last.
fn counted(data: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(data);
    let mut last = 0;
    for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let n: u64 = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("not a count: {line:?} after {last}"));
        assert_eq!(
            n,
            last + 1,
            "after {last} came {n}: a line lost or repeated"
        );
        last = n;
    }
    last
}

/// The pids of the keeper's children whose command line holds `marker`.
fn kept_pids(node: &BinaryNode, marker: &str) -> Vec<i32> {
    kept_pids_in(&node.data, marker)
}

/// The same, for the keeper of the data dir `data`.
fn kept_pids_in(data: &std::path::Path, marker: &str) -> Vec<i32> {
    let Some(keeper) = keeper_pid(data) else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split(' ').nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == Some(keeper) && String::from_utf8_lossy(&cmdline).contains(marker) {
            pids.push(pid);
        }
    }
    pids
}

/// A session running `COUNTER`, followed from its start until it has
/// counted `lines`: its id and the stream so far.
async fn counting(node: &BinaryNode, lines: u64) -> (String, Stream) {
    let session = create(node, COUNTER).await.id;
    let mut s = Stream::new(1 << 20);
    let mut c = client(node).await;
    subscribe(&mut c, &session, Some(0), 1 << 20).await.unwrap();
    within(
        PATIENCE,
        "the first lines",
        pump_until(&mut c, &session, &mut s, true, |s| {
            counted(&s.data) >= lines
        }),
    )
    .await
    .unwrap();
    (session, s)
}

/// Resumes `s` from its last seq on `node` and reads until `more` more
/// lines have come; the stream must not be resynced.
async fn resume(node: &BinaryNode, session: &str, s: &mut Stream, more: u64, what: &str) {
    let mut c = client(node).await;
    let reply = subscribe(&mut c, session, Some(s.last_seq), 1 << 20)
        .await
        .unwrap();
    let target = counted(&s.data) + more;
    within(
        PATIENCE,
        what,
        pump_until(&mut c, session, s, true, |s| {
            s.resyncs > 0 || counted(&s.data) >= target
        }),
    )
    .await
    .unwrap();
    assert_eq!(
        (s.resyncs, s.snapshots.len()),
        (0, 0),
        "{what}: resynced ({reply:?}); log:\n{}",
        node.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn programs_run_on_through_sigterm_kill_9_and_an_upgrade() {
    let mut node = BinaryNode::start("");
    let (session, mut s) = counting(&node, 30).await;
    let pids = kept_pids(&node, "while true");
    assert_eq!(pids.len(), 1, "the keeper is the program's parent");
    // Another build of the binary: a copy at another path.
    let upgraded = node.dir.path().join("termesh-upgraded");
    std::fs::copy(env!("CARGO_BIN_EXE_termesh"), &upgraded).unwrap();

    for how in ["SIGTERM", "kill -9", "an upgrade"] {
        node = match how {
            "SIGTERM" => node.restart(""),
            "kill -9" => node.crash_and_restart(""),
            _ => node.upgrade(&upgraded, ""),
        };
        let now = info(&node, &session).await;
        assert_eq!(now.status, SessionStatus::Running, "after {how}: {now:?}");
        assert_eq!(
            kept_pids(&node, "while true"),
            pids,
            "after {how}: the same program"
        );
        resume(&node, &session, &mut s, 30, how).await;
        println!("after {how}: counted to {}", counted(&s.data));
    }
    assert!(counted(&s.data) >= 120);
}

/// Connects to the keeper's socket as any process of the user could.
fn poke_keeper(data: &std::path::Path, send: Option<&[u8]>) {
    use rustix::net::{socket, AddressFamily, SocketAddrUnix, SocketType};
    let fd = socket(AddressFamily::UNIX, SocketType::SEQPACKET, None).unwrap();
    let addr = SocketAddrUnix::new(data.join("keeper.sock")).unwrap();
    rustix::net::connect(&fd, &addr).unwrap();
    if let Some(bytes) = send {
        let _ = rustix::net::send(&fd, bytes, rustix::net::SendFlags::empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_connects_to_the_keeper_ends_no_program() {
    let node = BinaryNode::start("");
    let (session, mut s) = counting(&node, 10).await;
    let pids = kept_pids(&node, "while true");
    // Probes that connect and leave, garbage, a message that is not
    // `hello`: none of them is the node.
    for k in 0..20 {
        let send: Option<&[u8]> = match k % 3 {
            0 => None,
            1 => Some(b"garbage, not a message"),
            _ => Some(&[0x81, 0xa1, b'x', 0x01]),
        };
        poke_keeper(&node.data, send);
    }
    // The node's next spawn goes through its own connection as before.
    let other = create(&node, "exec cat").await.id;
    assert_eq!(info(&node, &other).await.status, SessionStatus::Running);
    let now = info(&node, &session).await;
    assert_eq!(now.status, SessionStatus::Running, "{now:?}");
    assert_eq!(kept_pids(&node, "while true"), pids, "the same program");
    resume(&node, &session, &mut s, 20, "after the probes").await;
    assert!(
        !node.log().contains("keeper's connection failed"),
        "{}",
        node.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_exits_while_its_node_is_down_reports_its_exit() {
    let node = BinaryNode::start("");
    let flag = node.dir.path().join("go");
    let script = format!(
        "echo ready; while [ ! -e {} ]; do sleep 0.02; done; echo bye; exit 7",
        flag.display()
    );
    let session = create(&node, &script).await.id;
    let mut s = Stream::new(1 << 20);
    let mut c = client(&node).await;
    subscribe(&mut c, &session, Some(0), 1 << 20).await.unwrap();
    within(
        PATIENCE,
        "ready",
        pump_until(&mut c, &session, &mut s, true, |s| {
            String::from_utf8_lossy(&s.data).contains("ready")
        }),
    )
    .await
    .unwrap();
    drop(c);
    let pid = kept_pids(&node, "echo bye")[0];
    let node = node.restart_after("", || {
        std::fs::write(&flag, "").unwrap();
        // It ends while no node runs: a zombie the keeper keeps.
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            if stat
                .rsplit_once(") ")
                .is_some_and(|(_, r)| r.starts_with('Z'))
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the program did not end"
            );
            poll_pause_blocking();
        }
    });
    let mut c = client(&node).await;
    subscribe(&mut c, &session, Some(s.last_seq), 1 << 20)
        .await
        .unwrap();
    within(
        PATIENCE,
        "the exit, after the node is back",
        pump_until(&mut c, &session, &mut s, true, |s| s.exited.is_some()),
    )
    .await
    .unwrap();
    assert_eq!(s.exited, Some(7));
    assert!(
        String::from_utf8_lossy(&s.data).contains("bye"),
        "what it printed last came"
    );
    let ended = info(&node, &session).await;
    assert_eq!(
        (ended.status, ended.exit_code),
        (SessionStatus::Exited, Some(7))
    );
    // Released: the keeper reaped it.
    within(PATIENCE, "the zombie to be reaped", async {
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            poll_pause().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_killed_loses_its_sessions_and_the_next_create_starts_another() {
    let node = BinaryNode::start("");
    let session = create(&node, "echo held; exec sleep 100000").await.id;
    let first = keeper_pid(&node.data).expect("the node started a keeper");
    kill_keeper(&node.data);
    within(PATIENCE, "the session to be lost", async {
        while info(&node, &session).await.status != SessionStatus::Lost {
            poll_pause().await;
        }
    })
    .await;
    assert!(
        node.log().contains("the PTY keeper is gone"),
        "a clear log line:\n{}",
        node.log()
    );
    let again = create(&node, "echo again; exec sleep 100001").await;
    assert_eq!(again.status, SessionStatus::Running);
    let second = keeper_pid(&node.data).expect("a new keeper");
    assert_ne!(first, second);
    assert_eq!(kept_pids(&node, "100001").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_keeper_programs_end_with_their_node() {
    let node = BinaryNode::start(binary::NO_KEEPER);
    let session = create(&node, "echo mine; exec sleep 100000").await.id;
    assert!(keeper_pid(&node.data).is_none(), "no keeper was started");
    let node = node.restart(binary::NO_KEEPER);
    assert_eq!(info(&node, &session).await.status, SessionStatus::Lost);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_on_another_node_follows_the_program_across_its_owner_s_restarts() {
    use common::cluster::{connect, create, Cluster};
    let mut cluster = Cluster::start(&["a", "b"]);
    let session = create(&cluster, 1, "a", COUNTER).await;
    let mut c = connect(&cluster, 1).await;
    let mut s = Stream::new(1 << 20);
    subscribe(&mut c, &session, Some(0), 1 << 20).await.unwrap();
    let upgraded = cluster.dir.path().join("termesh-upgraded");
    std::fs::copy(env!("CARGO_BIN_EXE_termesh"), &upgraded).unwrap();
    for how in ["SIGTERM", "kill -9", "an upgrade"] {
        let target = counted(&s.data) + 30;
        within(
            PATIENCE,
            "lines through b",
            pump_until(&mut c, &session, &mut s, true, |s| {
                counted(&s.data) >= target
            }),
        )
        .await
        .unwrap();
        match how {
            "kill -9" => cluster.kill_node(0),
            _ => cluster.stop_node(0),
        }
        within(
            PATIENCE,
            "`unreachable` on b",
            pump_until(&mut c, &session, &mut s, true, |s| s.link_is("unreachable")),
        )
        .await
        .expect("the viewer's connection to b stays open");
        if how == "an upgrade" {
            cluster.start_node_as(0, &upgraded);
        } else {
            cluster.start_node(0);
        }
        let target = counted(&s.data) + 30;
        within(
            PATIENCE,
            "`reachable` and the lines printed meanwhile, through b",
            pump_until(&mut c, &session, &mut s, true, |s| {
                s.link_is("reachable") && counted(&s.data) >= target
            }),
        )
        .await
        .unwrap();
        assert_eq!(
            (s.resyncs, s.snapshots.len(), s.lost),
            (0, 0, false),
            "after {how}: every line, no resync"
        );
        println!("after {how}: counted to {} through b", counted(&s.data));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_keeper_refuses_to_start_beside_a_running_one() {
    let node = BinaryNode::start("");
    create(&node, "exec sleep 100002").await;
    let data = node.data.clone();
    // Stopped cleanly: the keeper and its program run on.
    let dir = node.stop_leaving_keeper();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_termesh"))
        .args([
            "node",
            "--no-keeper",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&data)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: a node that starts anyway fails the test, not hangs it.
    let deadline = std::time::Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            kill_keeper(&data);
            panic!("the node started beside the keeper");
        }
        poll_pause_blocking();
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "it started: {err}");
    assert!(err.contains("a PTY keeper runs"), "{err}");
    assert_eq!(
        kept_pids_in(&data, "100002").len(),
        1,
        "the program was not touched"
    );
    kill_keeper(&data);
    drop(dir);
}

/// Whether `pid` runs (a zombie does not).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_string())
        })
        .is_some_and(|rest| !rest.starts_with('Z'))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_makes_its_socket_again_and_stops_when_its_data_dir_goes() {
    let node = BinaryNode::start("");
    create(&node, "exec sleep 100003").await;
    let data = node.data.clone();
    let socket = data.join("keeper.sock");
    // The socket alone removed: made again where the next node looks, the
    // program untouched.
    std::fs::remove_file(&socket).unwrap();
    within(PATIENCE, "the keeper's socket made again", async {
        while !termesh_actors::keeper::Keeper::listening(&data) {
            poll_pause().await;
        }
    })
    .await;
    assert_eq!(kept_pids(&node, "100003").len(), 1, "the program runs on");
    // The data dir removed: no node can reach the programs any more; the
    // keeper stops (and its program's terminal hangs up).
    let keeper = keeper_pid(&data).expect("a keeper");
    let program = kept_pids(&node, "100003")[0];
    let dir = node.stop_leaving_keeper();
    std::fs::remove_dir_all(&data).unwrap();
    within(PATIENCE, "the keeper and its program gone", async {
        while running(keeper) || running(program) {
            poll_pause().await;
        }
    })
    .await;
    drop(dir);
}

/// A keeper socket in the data dir served by another user (moved there
/// by whoever could): the node refuses it rather than hand that user its
/// programs' terminals, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_of_another_user_is_refused() {
    if !rustix::process::geteuid().is_root() {
        println!("SKIPPED: needs root, to run a keeper as the user nobody");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    // The binary and a folder the user nobody may use.
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = open.join("termesh");
    std::fs::copy(env!("CARGO_BIN_EXE_termesh"), &bin).unwrap();
    let theirs = open.join("k");
    let mut keeper = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["keeper", "--data-dir"])
        .arg(&theirs)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    within(PATIENCE, "the other user's keeper listening", async {
        while !theirs.join("keeper.sock").exists() {
            poll_pause().await;
        }
    })
    .await;
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::rename(theirs.join("keeper.sock"), data.join("keeper.sock")).unwrap();
    let mut node = std::process::Command::new(env!("CARGO_BIN_EXE_termesh"))
        .args(["node", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env("XDG_RUNTIME_DIR", tmp.path().join("run"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: a node that started anyway is killed (by its pid) and fails
    // the test below.
    let ended = tokio::time::timeout(PATIENCE, async {
        while node.try_wait().unwrap().is_none() {
            poll_pause().await;
        }
    })
    .await;
    if ended.is_err() {
        let _ = node.kill();
    }
    let node = node.wait_with_output().unwrap();
    let _ = keeper.kill();
    let _ = keeper.wait();
    let said = String::from_utf8_lossy(&node.stderr);
    assert!(!node.status.success(), "the node did not start: {said}");
    assert!(said.contains("uid 65534, not this user"), "{said}");
}
