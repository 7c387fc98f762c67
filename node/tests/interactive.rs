//! Interactive first (issue 32): the echo of a key typed into one session
//! overtakes the bulk output of another session that the same connection
//! has queued, and that bulk output still arrives whole and in order; a
//! flood nobody types into runs at a lower CPU weight (its processes in
//! the bulk cgroup where the machine has one, while someone types on the
//! node), and typing brings it back (its reads: `bulk_reads.rs`); a flood
//! started by a key is read as bulk and reniced past its first screens,
//! and gets its weight back by itself when it ends.

mod common;

use common::wire::metric;
use common::*;
use termesh_transport::{ClientMsg, ServerMsg};

/// The flood's window: what could be queued ahead of the echo without the
/// lanes.
const FLOOD_WINDOW: u64 = 8 << 20;

/// One flood at a time in this file: the bulk readers' gauge and the bulk
/// thread are looked at while a flood runs.
static FLOODS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_sessions_echo_overtakes_queued_bulk_output() {
    let _one = FLOODS.lock().await;
    let node = TestNode::start();
    let flood = node
        .create(&["yes", "bulk output of a neighbour, line after line"])
        .await
        .id;
    let cat = node
        .create(&["sh", "-c", "stty raw -echo; echo ready; exec cat"])
        .await
        .id;
    wait_output(&node, &cat, "ready").await;

    let mut c = node.client(OPERATOR).await;
    subscribe(&mut c, &cat, None, 1 << 20).await.unwrap();
    subscribe(&mut c, &flood, None, FLOOD_WINDOW).await.unwrap();
    // The client reads nothing now: its window's worth of the flood is
    // offered to the connection, which holds what is past its flight.
    within(PATIENCE, "the connection holding bulk output", async {
        while metric(&node.url(), "termesh_output_held_bytes").await < (4 << 20) as f64 {
            poll_pause().await;
        }
    })
    .await;

    c.send(&ClientMsg::Input {
        session: cat.clone(),
        data: b"<typed>".to_vec(),
    })
    .await
    .unwrap();
    // The echo is in the session's output (so its frame reached the
    // connection, which has had no pong since: no bulk could follow it in).
    wait_output(&node, &cat, "<typed>").await;

    let mut bulk = Stream::new(FLOOD_WINDOW);
    let mut echoed = String::new();
    let before_echo = within(PATIENCE, "the echo of <typed>", async {
        loop {
            match next(&mut c).await {
                ServerMsg::Output { session, data, .. } if session == cat => {
                    echoed.push_str(&String::from_utf8_lossy(&data));
                    if echoed.contains("<typed>") {
                        return bulk.data.len();
                    }
                }
                other => bulk.apply(&flood, &other),
            }
        }
    })
    .await;
    assert!(
        before_echo < 1 << 20,
        "{before_echo} bytes of bulk output came before the echo (the flight starts at 512 KiB; \
         the flood's window is {FLOOD_WINDOW})"
    );

    // Nothing of the bulk output was reordered or skipped (`apply` checks
    // the seqs; a client this far behind the program may be resynced, as
    // the protocol says), and it flows on at the client's pace.
    let wanted = bulk.data.len() + (3 * FLOOD_WINDOW) as usize;
    within(PATIENCE, "the flood flowing on after the echo", async {
        pump_until(&mut c, &flood, &mut bulk, true, |s| s.data.len() >= wanted)
            .await
            .unwrap();
    })
    .await;
    assert!(bulk.errors.is_empty(), "{:?}", bulk.errors);
}

/// The nice value of every process of `session` (empty until it runs).
fn nices(session: &str) -> Vec<i32> {
    session_pids(session)
        .into_iter()
        .filter_map(termesh_actors::os::nice_of)
        .collect()
}

/// Until every process of `session` has nice 10.
async fn wait_reniced(session: &str) {
    within(PATIENCE, "the flooding job reniced", async {
        loop {
            let n = nices(session);
            if !n.is_empty() && n.iter().all(|v| *v == 10) {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_nobody_types_into_runs_at_a_lower_cpu_weight_until_typed_into() {
    let _one = FLOODS.lock().await;
    let node = TestNode::start();
    // Typed into, it stops flooding (else, typed into and flooding on,
    // it is bulk again once past its burst).
    let flood = node
        .create(&[
            "sh",
            "-c",
            "yes 'a flood nobody types into' & read x; kill $!; exec sleep 600",
        ])
        .await
        .id;
    let quiet = node
        .create(&["sh", "-c", "while :; do echo tick; sleep 0.05; done"])
        .await
        .id;
    wait_reniced(&flood).await;
    assert!(
        nices(&quiet).iter().all(|v| *v == 0),
        "a program printing a line now and then keeps its weight: {:?}",
        nices(&quiet)
    );
    let cgroups = cpu_cgroup_v1_here();
    // Nobody types on the node: the flood took its nice value and would
    // have taken the bulk cgroup in the same second, and its reads run on
    // the bulk thread at the node's own weight.
    assert!(
        !(cgroups && in_bulk_cgroup(&flood)),
        "alone on the node, a flood stays in the node's cgroup"
    );
    // (Where the node may not take a nice value back, the thread is
    // lowered for good from its start.)
    let back = termesh_actors::os::may_lower_nice();
    let own = termesh_actors::os::nice_of(std::process::id() as i32).unwrap();
    let lowered = (own + 10).min(19);
    wait_bulk_thread(
        if back { own } else { lowered },
        "the bulk thread at the node's weight while nobody types",
    )
    .await;
    // Someone types into another session: the flood's reads weigh less,
    // and it moves to the bulk cgroup.
    let typist = Typist::start(node.client(OPERATOR).await, &quiet);
    wait_bulk_thread(lowered, "the bulk thread at nice +10 beside someone typing").await;
    if cgroups {
        within(
            PATIENCE,
            "the flood's processes in the bulk cgroup beside someone typing",
            async {
                while !in_bulk_cgroup(&flood) {
                    poll_pause().await;
                }
            },
        )
        .await;
        assert!(
            !any_in_bulk_cgroup(&quiet),
            "a quiet program stays where it was"
        );
    } else {
        eprintln!("no cgroup v1 cpu controller for root here: the bulk cgroup is not checked");
    }
    // Once nobody has typed on the node for `INTERACTIVE_FOR`, the flood
    // leaves the bulk cgroup and its reads weigh as the node's again
    // (where the node may take a nice value back).
    drop(typist);
    if cgroups {
        wait_out_of_bulk_cgroup(
            &flood,
            "the flood back in the node's cgroup once nobody types",
        )
        .await;
    }
    if back {
        wait_bulk_thread(
            own,
            "the bulk thread back at the node's weight once nobody types",
        )
        .await;
    }

    // Typed into, it is interactive: the node gives it nice 0 back where
    // it may lower a nice value (docs/operations.md says what happens
    // elsewhere).
    if !termesh_actors::os::may_lower_nice() {
        return;
    }
    let mut c = node.client(OPERATOR).await;
    c.send(&ClientMsg::Input {
        session: flood.clone(),
        data: b"x\n".to_vec(),
    })
    .await
    .unwrap();
    within(
        PATIENCE,
        "the typed-into flood's nice value back to 0",
        async {
            while nices(&flood).iter().any(|v| *v != 0) {
                poll_pause().await;
            }
        },
    )
    .await;
    if cgroups {
        wait_out_of_bulk_cgroup(&flood, "the typed-into flood out of the bulk cgroup").await;
    }
}

/// Some process of `session` is in the bulk cgroup.
fn any_in_bulk_cgroup(session: &str) -> bool {
    session_pids(session)
        .iter()
        .any(|p| cpu_cgroup_of(*p).ends_with("/termesh-bulk"))
}

/// Until no process of `session` is in the bulk cgroup.
async fn wait_out_of_bulk_cgroup(session: &str, what: &str) {
    within(PATIENCE, what, async {
        while any_in_bulk_cgroup(session) {
            poll_pause().await;
        }
    })
    .await;
}

/// Until the process's bulk reader threads (one per node; a stopped
/// node's ends soon after it) all have nice `nice`, one at least.
async fn wait_bulk_thread(nice: i32, what: &str) {
    let nices = || -> Vec<Option<i32>> {
        std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|comm| comm.trim_end() == "pty-io-bulk")
            })
            .map(|task| {
                let tid = task.file_name().to_string_lossy().parse().ok()?;
                termesh_actors::os::nice_of(tid)
            })
            .collect()
    };
    within(PATIENCE, what, async {
        loop {
            let now = nices();
            if !now.is_empty() && now.iter().all(|n| *n == Some(nice)) {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
}

/// Root on a machine whose `cpu` controller is on cgroup v1 (as this
/// project's machines are): the node may make the bulk cgroup.
fn cpu_cgroup_v1_here() -> bool {
    nix::unistd::geteuid().is_root()
        && std::path::Path::new("/sys/fs/cgroup/cpu/cpu.shares").exists()
        && !cpu_cgroup_of(std::process::id() as i32).is_empty()
}

/// Every process of `session` is in the bulk cgroup (and it has some).
fn in_bulk_cgroup(session: &str) -> bool {
    let pids = session_pids(session);
    !pids.is_empty()
        && pids
            .iter()
            .all(|p| cpu_cgroup_of(*p).ends_with("/termesh-bulk"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_into_a_demoted_job_that_prints_nothing_more_gives_its_weight_back() {
    let _one = FLOODS.lock().await;
    if !termesh_actors::os::may_lower_nice() {
        eprintln!("no nice value can be lowered here: none is given back");
        return;
    }
    let node = TestNode::start();
    // Someone types on the node throughout: the job goes to the bulk
    // cgroup where the machine has one.
    let cat = node.create(&["cat"]).await.id;
    let _typist = Typist::start(node.client(OPERATOR).await, &cat);
    // A flood of a few seconds, then the same group silent (no echo).
    let job = node
        .create(&[
            "sh",
            "-c",
            "stty -echo; yes flood | head -c 300000000; exec sleep 600",
        ])
        .await
        .id;
    wait_reniced(&job).await;
    within(PATIENCE, "the flood over, the job silent", async {
        while session_pids(&job).iter().any(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default() != "sleep\n"
        }) {
            poll_pause().await;
        }
    })
    .await;
    let cgroups = cpu_cgroup_v1_here();
    if cgroups {
        assert!(
            in_bulk_cgroup(&job),
            "the silent job is still in the bulk cgroup"
        );
    }
    let mut c = node.client(OPERATOR).await;
    c.send(&ClientMsg::Input {
        session: job.clone(),
        data: b"x".to_vec(),
    })
    .await
    .unwrap();
    within(
        PATIENCE,
        "the typed-into job's weight back without output",
        async {
            while nices(&job).iter().any(|v| *v != 0) || (cgroups && any_in_bulk_cgroup(&job)) {
                poll_pause().await;
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_started_by_a_keystroke_is_bulk_past_its_burst_until_it_ends() {
    let _one = FLOODS.lock().await;
    let node = TestNode::start();
    let dir = tempfile::tempdir().unwrap();
    let stop = dir.path().join("stop");
    // A build a person starts with a key: it floods from that key on until
    // `stop` is there, then the job stays, silent (no echo).
    let job = node
        .create(&[
            "sh",
            "-c",
            &format!(
                "stty -echo; read go; \
                 while [ ! -e {stop} ]; do yes 'a build started by a key' | head -c 1000000; done; \
                 exec sleep 600",
                stop = stop.display()
            ),
        ])
        .await
        .id;
    let mut c = node.client(OPERATOR).await;
    c.send(&ClientMsg::Input {
        session: job.clone(),
        data: b"\n".to_vec(),
    })
    .await
    .unwrap();
    let typed = std::time::Instant::now();
    within(
        PATIENCE,
        "the key-started flood read on the bulk thread",
        async {
            while metric(&node.url(), "termesh_bulk_sessions").await < 1.0 {
                poll_pause().await;
            }
        },
    )
    .await;
    // Typed into a moment ago, it would be interactive for
    // `INTERACTIVE_FOR` by the key alone: its first screens are, the rest
    // is read like any flood, and (where the node may give nice 0 back)
    // its job gets a lower nice value. The bound is the rule's own, not a
    // speed: under a rule by the key alone this came at 10 s.
    // The test runs as the node does, so the node's answer is its own.
    let may_lower = termesh_actors::os::may_lower_nice();
    if may_lower {
        wait_reniced(&job).await;
    }
    // Not in the bulk cgroup while the key counts (there a starved job
    // may print nothing to say its flood ended): looked at before the
    // clock, so what was seen while the key counted.
    let cgroups = cpu_cgroup_v1_here();
    let idle = cgroups && any_in_bulk_cgroup(&job);
    let after = typed.elapsed();
    assert!(
        after < termesh_actors::session::bulk::INTERACTIVE_FOR,
        "read as bulk and reniced {after:?} after the key: only once the key no longer counted"
    );
    assert!(!idle, "in the bulk cgroup {after:?} after the key");
    if !may_lower {
        eprintln!("no nice value can be lowered here: a typed-into job keeps its own");
        assert!(nices(&job).iter().all(|v| *v == 0));
        return;
    }
    // The flood ends with no key: the job gets its weight back by itself
    // (a nice value starves nobody, so a job that prints little has
    // stopped flooding), and its reads come home.
    std::fs::write(&stop, "").unwrap();
    // Only `sleep` is left (what was reniced was the job, not a yes that
    // ended), and then its weight comes back.
    within(PATIENCE, "the flood over", async {
        while session_pids(&job).iter().any(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default() != "sleep\n"
        }) {
            poll_pause().await;
        }
    })
    .await;
    within(PATIENCE, "the ended flood's weight back", async {
        loop {
            let n = nices(&job);
            let calm = metric(&node.url(), "termesh_bulk_sessions").await < 1.0;
            if calm && !n.is_empty() && n.iter().all(|v| *v == 0) {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
}

/// Keys are written by the connection's thread while nothing waits ahead
/// of them (`session/pty/input.rs`): a paste the terminal cannot take at
/// once is written in part and queued for the rest, and the pastes and
/// keys sent while any of it waits queue behind it, though the program
/// reading frees room in the terminal meanwhile: it reads every byte
/// once, in the order sent. (Whether a key sent into that room jumps the
/// queue is a race here; `input.rs`'s unit test makes it certain.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_the_terminal_cannot_take_at_once_arrives_whole_and_in_order() {
    const PASTES: usize = 32;
    const PASTE: usize = 60 << 10;
    let node = TestNode::start();
    let dir = tempfile::tempdir().unwrap();
    let got = dir.path().join("got");
    // Pastes of 60 KiB (the terminal takes a few KiB), each with a key.
    let inputs: Vec<Vec<u8>> = (0..PASTES)
        .flat_map(|i| {
            let paste = (0..PASTE)
                .map(|j| b'a' + ((i * 7 + j) % 26) as u8)
                .collect();
            [paste, format!("<{i}>").into_bytes()]
        })
        .collect();
    let sent = inputs.concat();
    let total = sent.len();
    let job = node
        .create(&[
            "sh",
            "-c",
            &format!(
                "stty raw -echo; exec head -c {total} > {got}",
                got = got.display()
            ),
        ])
        .await
        .id;
    // The terminal is raw before anything is sent (else its line
    // discipline would hold 4 KiB lines).
    within(PATIENCE, "the terminal raw", async {
        while !session_pids(&job).iter().any(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c == "head\n")
        }) {
            poll_pause().await;
        }
    })
    .await;
    let mut c = node.client(OPERATOR).await;
    for data in inputs {
        c.send(&ClientMsg::Input {
            session: job.clone(),
            data,
        })
        .await
        .unwrap();
    }
    let read = within(PATIENCE, "every byte read by the program", async {
        loop {
            if let Ok(data) = std::fs::read(&got) {
                if data.len() >= total {
                    return data;
                }
            }
            poll_pause().await;
        }
    })
    .await;
    assert_eq!(read.len(), total);
    if let Some(at) = read.iter().zip(&sent).position(|(r, s)| r != s) {
        panic!(
            "byte {at}: {:?} where {:?} was sent",
            String::from_utf8_lossy(&read[at..(at + 16).min(total)]),
            String::from_utf8_lossy(&sent[at..(at + 16).min(total)])
        );
    }
}
