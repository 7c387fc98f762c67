//! Interactive first on a connection (issue 32): the echo of a key typed
//! into one session overtakes the bulk output of another session that the
//! same connection has queued, and that bulk output still arrives whole
//! and in order.

mod common;

use common::wire::metric;
use common::*;
use termesh_transport::{ClientMsg, ServerMsg};

/// The flood's window: what could be queued ahead of the echo without the
/// lanes.
const FLOOD_WINDOW: u64 = 8 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_sessions_echo_overtakes_queued_bulk_output() {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_nobody_types_into_runs_at_a_lower_cpu_weight_until_typed_into() {
    let node = TestNode::start();
    let flood = node
        .create(&["sh", "-c", "yes 'a flood nobody types into'; echo done"])
        .await
        .id;
    let quiet = node
        .create(&["sh", "-c", "while :; do echo tick; sleep 0.05; done"])
        .await
        .id;
    within(PATIENCE, "the flood's group reniced", async {
        loop {
            let n = nices(&flood);
            if !n.is_empty() && n.iter().all(|v| *v == 10) {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    assert!(
        nices(&quiet).iter().all(|v| *v == 0),
        "a program printing a line now and then keeps its weight: {:?}",
        nices(&quiet)
    );

    // Typed into, it is interactive: the node gives it nice 0 back where
    // it may lower a nice value (root here; docs/operations.md says what
    // happens elsewhere).
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let mut c = node.client(OPERATOR).await;
    c.send(&ClientMsg::Input {
        session: flood.clone(),
        data: b"x".to_vec(),
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
}
