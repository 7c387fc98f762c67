//! The node's own protection against host load (as the systemd unit sets
//! it: nice -10, oom_score_adj -900) is not inherited by the programs it
//! runs: each session's program starts at the nice value the node started
//! with (0 as a unit starts it) and oom_score_adj 0; the programs run in
//! the node's CPU cgroup (the unit's), where no scheduler group stands
//! between the one you type into and the node, and outlive the node's
//! restarts there; the node says when they cannot (autogroups, a keeper in
//! another cgroup).

mod common;

use common::binary::BinaryNode;
use common::binary::{client, create, list};
use common::*;
use termesh_actors::os::nice_of;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg, SessionStatus};

fn oom_adj(pid: i32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The pid of `session`'s program, once it runs.
async fn program_of(session: &str) -> i32 {
    within(PATIENCE, "the session's program", async {
        loop {
            if let Some(p) = session_pids(session).first() {
                return *p;
            }
            poll_pause().await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_do_not_inherit_the_nodes_raised_priority() {
    let node = BinaryNode::start("");
    let pid = node.pid().as_raw();
    // As the unit does (the test runs as root, as CI does).
    let status = std::process::Command::new("renice")
        .args(["-n", "-10", "-p", &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    // Lowering oom_score_adj needs CAP_SYS_RESOURCE, which a container's
    // root may lack: then only the nice value is checked.
    let oom = match std::fs::write(format!("/proc/{pid}/oom_score_adj"), "-900") {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            println!("oom_score_adj cannot be lowered here ({e}): only nice is checked");
            false
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(nice_of(pid), Some(-10));

    let mut c = Client::connect(&node.target(OPERATOR)).await.unwrap();
    let req = CreateRequest {
        command: Some(vec!["sleep".into(), "100000".into()]),
        ..Default::default()
    };
    let session = match c.request(|id| ClientMsg::Create { id, req }).await.unwrap() {
        ServerMsg::Created { session, .. } => session.id,
        other => panic!("{other:?}"),
    };
    let program = program_of(&session).await;
    // The priority the node started with (this test's own: the suite may
    // run niced), not the one it raised itself to.
    let started = nice_of(std::process::id() as i32);
    assert_eq!(nice_of(program), started, "nice of the session's program");
    // The node keeps its own.
    assert_eq!(nice_of(pid), Some(-10));
    if oom {
        assert_eq!(
            oom_adj(program),
            0,
            "oom_score_adj of the session's program"
        );
        assert_eq!(oom_adj(pid), -900);
    }
}

/// The store's threads (its actor's and sled's own) run 10 nice steps
/// below the node, so its batches and flushes never delay a keystroke's
/// path on a busy core; threads sled starts later are caught too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_runs_below_the_node() {
    let node = BinaryNode::start("");
    let pid = node.pid().as_raw();
    let base = nice_of(pid).unwrap();
    let mut c = Client::connect(&node.target(OPERATOR)).await.unwrap();
    // Output all along for the store to write: its writes (once a second)
    // catch the threads sled starts as it goes, so a thread started after
    // the last write would stay unseen until the next one.
    let req = CreateRequest {
        command: Some(vec![
            "sh".into(),
            "-c".into(),
            "while :; do seq 1 2000; sleep 0.2; done".into(),
        ]),
        ..Default::default()
    };
    c.request(|id| ClientMsg::Create { id, req }).await.unwrap();
    let store_threads = || -> Vec<(String, Option<i32>)> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
            .filter_map(|t| {
                let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
                let comm = comm.trim().to_string();
                (comm.starts_with("sled-io") || comm == "log flusher").then(|| {
                    let tid = t.file_name().to_string_lossy().parse().unwrap();
                    (comm, nice_of(tid))
                })
            })
            .collect()
    };
    within(PATIENCE, "every store thread 10 below the node", async {
        loop {
            let threads = store_threads();
            // Nice values end at 19 (a suite run niced starts near it).
            let below = Some((base + 10).min(19));
            if !threads.is_empty() && threads.iter().all(|(_, n)| *n == below) {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    // The node's request threads and session threads keep its priority.
    let others: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| {
                c.starts_with("actix-rt")
                    || c.trim_end() == termesh_actors::directory::homes::THREAD_NAME
            })
        })
        .filter_map(|t| nice_of(t.file_name().to_string_lossy().parse().ok()?))
        .collect();
    assert!(
        !others.is_empty() && others.iter().all(|n| *n == base),
        "{others:?}"
    );
}

/// Where each program is a scheduler autogroup of its own (autogroups on,
/// no CPU cgroup: this project's test hosts), the process that starts the
/// programs says so at start with the remedy (the keeper; the node with
/// `--no-keeper`), and nothing is said where not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_programs_parent_says_when_they_are_autogroups_of_their_own() {
    // Node and keeper run in this test's cgroups: the same answer applies.
    let expected = termesh_actors::session::autogroup::hint();
    let said = "each program starts in a scheduler autogroup of its own";
    let node = BinaryNode::start("");
    let keeper_log = node.data.join("keeper.log");
    // The keeper says it before it says it serves.
    within(PATIENCE, "the keeper serving", async {
        while !std::fs::read_to_string(&keeper_log)
            .unwrap_or_default()
            .contains("PTY keeper serving")
        {
            poll_pause().await;
        }
    })
    .await;
    let keeper = std::fs::read_to_string(&keeper_log).unwrap();
    // The node's programs are the keeper's, in the node's cgroup: the node
    // says neither.
    assert!(!node.log().contains(said), "node log:\n{}", node.log());
    assert!(
        !node.log().contains("runs the programs in CPU cgroup"),
        "node log:\n{}",
        node.log()
    );
    let alone = BinaryNode::start("keeper = false");
    match expected {
        Some(hint) => {
            println!("this host: {hint}");
            assert!(keeper.contains(said), "keeper log:\n{keeper}");
            assert!(keeper.contains("kernel.sched_autogroup_enabled=0"));
            assert!(alone.log().contains(said), "log:\n{}", alone.log());
        }
        None => {
            println!("this host gives programs no autogroup of their own");
            assert!(!keeper.contains(said), "keeper log:\n{keeper}");
            assert!(!alone.log().contains(said), "log:\n{}", alone.log());
        }
    }
}

/// A cgroup v1 `cpu` cgroup this test makes (root, as CI runs), removed
/// on drop once its processes, and those of the cgroups the node made in
/// it, are gone (bounded).
struct CpuGroup(std::path::PathBuf);

impl CpuGroup {
    /// `None`, saying why, where no such cgroup can be made.
    fn make(name: &str) -> Option<CpuGroup> {
        let cpu = std::path::Path::new("/sys/fs/cgroup/cpu");
        if !nix::unistd::geteuid().is_root() || !cpu.join("cpu.shares").exists() {
            println!("no cgroup v1 cpu controller for root here: not checked");
            return None;
        }
        let group = cpu.join(format!("{name}-{}", std::process::id()));
        match std::fs::create_dir_all(&group) {
            Ok(()) => Some(CpuGroup(group)),
            Err(e) => {
                println!("cannot make a cpu cgroup here ({e}): not checked");
                None
            }
        }
    }

    fn procs(&self) -> std::path::PathBuf {
        self.0.join("cgroup.procs")
    }

    /// Its path as `/proc/PID/cgroup` names it.
    fn name(&self) -> String {
        format!("/{}", self.0.file_name().unwrap().to_string_lossy())
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        let inner: Vec<_> = std::fs::read_dir(&self.0)
            .map(|d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default();
        let deadline = std::time::Instant::now() + PATIENCE;
        for group in inner.iter().chain([&self.0]) {
            // A program hung up by its keeper's end takes a moment to go.
            while std::fs::read_to_string(group.join("cgroup.procs"))
                .is_ok_and(|p| !p.trim().is_empty())
                && std::time::Instant::now() < deadline
            {
                poll_pause_blocking();
            }
            let _ = std::fs::remove_dir(group);
        }
    }
}

/// A keeper that runs in another CPU cgroup than the node (a unit of its
/// own, as termesh's units were before they became one) makes the program
/// you type into wait behind the node's group on a busy host: the node
/// says so when it connects. Checked where this test may make a cgroup v1
/// `cpu` cgroup (root, as CI runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_says_when_its_keeper_runs_in_another_cpu_cgroup() {
    let Some(group) = CpuGroup::make("termesh-test-keeper") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // The keeper first, moved into its own cgroup before the node comes.
    let keeper = std::process::Command::new(env!("CARGO_BIN_EXE_termesh"))
        .arg("keeper")
        .arg("--data-dir")
        .arg(&data)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Ended before the cgroup is removed, whatever the test's outcome.
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let keeper = Kill(keeper);
    std::fs::write(group.procs(), keeper.0.id().to_string()).unwrap();
    within(PATIENCE, "the keeper listening", async {
        while !termesh_actors::keeper::Keeper::listening(&data) {
            poll_pause().await;
        }
    })
    .await;
    let node = BinaryNode::start_on(&data, "");
    let log = node.log();
    assert!(
        log.contains(&format!(
            "runs the programs in CPU cgroup {}, not the node's",
            group.name()
        )),
        "node log:\n{log}"
    );
    drop(node);
}

/// `deploy/termesh.service`'s layout: the unit starts the node alone (its
/// cgroup, nice -10, oom_score_adj -900), the node starts its keeper,
/// which runs the programs in the node's CPU cgroup (so no autogroup and
/// no cgroup stands between the program you type into and the node) at
/// nice 0 and oom_score_adj 0; a flood moves into the bulk cgroup inside
/// the node's where the node may make one (root here, on cgroup v1; the
/// shipped unit delegates `cpu` to its node for it); a restart that stops
/// the node only (`KillMode=process`)
/// leaves keeper and programs running, and the new node takes them.
/// systemd itself is not run here (`systemd_unit.rs` runs the unit under
/// a real one, without the cgroup part: its container's `cpu` hierarchy
/// is read-only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_units_layout_keeps_keeper_and_programs_in_the_nodes_cgroup_across_restarts() {
    let Some(group) = CpuGroup::make("termesh-test-unit") else {
        return;
    };
    let node = BinaryNode::start_as_unit("", &group.procs());
    let pid = node.pid().as_raw();
    assert_eq!(cpu_cgroup_of(pid), group.name());
    assert_eq!(nice_of(pid), Some(-10));
    let oom = oom_adj(pid) == -900;
    let sleeper = create(&node, "exec sleep 100000").await;
    // Someone types on the node (into a program that reads its input):
    // the bulk cgroup is for floods beside them.
    let typed = create(&node, "exec cat").await;
    let typist = Typist::start(client(&node).await, &typed.id);
    let flood = create(&node, "exec yes a flood nobody types into").await;
    let program = program_of(&sleeper.id).await;
    let keeper = keeper_pid(&node.data).expect("the node started its keeper");
    assert!(
        node.log().contains("started the PTY keeper"),
        "node log:\n{}",
        node.log()
    );
    assert_eq!(cpu_cgroup_of(keeper), group.name(), "the keeper's cgroup");
    assert_eq!(cpu_cgroup_of(program), group.name(), "the program's cgroup");
    assert!(!node.log().contains("runs the programs in CPU cgroup"));
    // In a CPU cgroup, no program is an autogroup of its own.
    assert!(!std::fs::read_to_string(node.data.join("keeper.log"))
        .unwrap()
        .contains("scheduler autogroup of its own"));
    assert_eq!(nice_of(program), nice_of(std::process::id() as i32));
    if oom {
        assert_eq!(
            oom_adj(program),
            0,
            "oom_score_adj of the session's program"
        );
    }
    let bulk = format!("{}/termesh-bulk", group.name());
    within(
        PATIENCE,
        "the flood in the bulk cgroup inside the node's",
        async {
            loop {
                let pids = session_pids(&flood.id);
                if !pids.is_empty() && pids.iter().all(|p| cpu_cgroup_of(*p) == bulk) {
                    return;
                }
                poll_pause().await;
            }
        },
    )
    .await;

    drop(typist);
    // `systemctl restart termesh`: SIGTERM to the node alone, then the
    // unit's ExecStart again in the same cgroup.
    let node = node.restart("");
    assert_ne!(node.pid().as_raw(), pid);
    assert_eq!(cpu_cgroup_of(node.pid().as_raw()), group.name());
    let listed = within(PATIENCE, "the sessions taken up", async {
        loop {
            let sessions = list(&node).await;
            if sessions.len() == 3 && sessions.iter().all(|s| s.status == SessionStatus::Running) {
                return sessions;
            }
            poll_pause().await;
        }
    })
    .await;
    assert!(listed.iter().any(|s| s.id == sleeper.id), "{listed:?}");
    assert_eq!(keeper_pid(&node.data), Some(keeper), "the same keeper");
    assert_eq!(session_pids(&sleeper.id), vec![program], "the same program");
    let log = node.log();
    assert!(
        log.contains("connected to the PTY keeper"),
        "node log:\n{log}"
    );
    assert!(!log.contains("started the PTY keeper"), "node log:\n{log}");
    drop(node);
}
