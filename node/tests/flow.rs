//! Flow control: a slow viewer delays only itself; viewers see identical
//! streams; a from-seq re-subscribe re-arms a stuck subscription.

mod common;

use std::time::Duration;

use common::*;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, ServerMsg};

const SMALL_WINDOW: u64 = 16 * 1024;
/// The largest frame a session produces (one PTY read).
const MAX_FRAME: u64 = 64 * 1024;

async fn input(node: &TestNode, session: &str, data: &[u8]) {
    let mut op = node.client(OPERATOR).await;
    op.send(&ClientMsg::Input {
        session: session.into(),
        data: data.to_vec(),
    })
    .await
    .unwrap();
    op.close().await;
}

/// Reads until no message has arrived for `quiet` (used only to observe a
/// stall, which is the absence of an event).
async fn drain_until_quiet(c: &mut Client, session: &str, stream: &mut Stream, quiet: Duration) {
    while let Ok(msg) = tokio::time::timeout(quiet, c.recv()).await {
        stream.apply(session, &msg.expect("connection open"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_viewer_delays_only_itself() {
    let node = TestNode::start();
    let flood = node
        .create(&["yes", "flooding the terminal with a long repeated line"])
        .await
        .id;
    let ticker = node
        .create(&[
            "sh",
            "-c",
            "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.02; done",
        ])
        .await
        .id;

    // The slow viewer: subscribed to the flood without acking, and to the
    // ticker with acks, on the same connection.
    let mut slow = node.client(VIEWER).await;
    subscribe(&mut slow, &flood, None, SMALL_WINDOW)
        .await
        .unwrap();
    subscribe(&mut slow, &ticker, None, 1 << 20).await.unwrap();

    // A healthy viewer of the flood on another connection.
    let healthy_node_url = node.target(Some(VIEWER));
    let flood_id = flood.clone();
    let healthy = tokio::spawn(async move {
        let mut c = Client::connect(&healthy_node_url).await.unwrap();
        subscribe(&mut c, &flood_id, None, 1 << 20).await.unwrap();
        let mut s = Stream::new(1 << 20);
        pump_until(&mut c, &flood_id, &mut s, true, |s| s.data.len() >= 8 << 20)
            .await
            .unwrap();
        s.data.len()
    });

    let mut slow_flood = Stream::new(SMALL_WINDOW);
    let mut slow_ticks = Stream::new(1 << 20);
    within(
        PATIENCE,
        "ticks on the slow viewer's connection while the healthy viewer reads 8 MiB",
        async {
            while !(healthy.is_finished()
                && slow_ticks.data.iter().filter(|b| **b == b'\n').count() >= 20)
            {
                let msg = tokio::time::timeout(Duration::from_millis(100), slow.recv()).await;
                let Ok(msg) = msg else { continue };
                let msg = msg.unwrap();
                slow_flood.apply(&flood, &msg);
                slow_ticks.apply(&ticker, &msg);
                if slow_ticks.should_ack() {
                    slow_ticks.unacked = 0;
                    slow.send(&ClientMsg::Ack {
                        session: ticker.clone(),
                        seq: slow_ticks.last_seq,
                    })
                    .await
                    .unwrap();
                }
            }
        },
    )
    .await;
    let healthy_bytes = healthy.await.unwrap();
    assert!(healthy_bytes >= 8 << 20);
    let stuck_at = slow_flood.data.len() as u64;
    assert!(
        stuck_at <= SMALL_WINDOW + MAX_FRAME,
        "the slow viewer got {stuck_at} bytes without acking"
    );
    let ticks = slow_ticks.data.windows(5).filter(|w| w == b"tick ").count();
    assert!(
        ticks >= 20,
        "the other session kept flowing on the same connection ({ticks} ticks)"
    );

    // The slow viewer acks again: it gets its gap, from the ring or as a resync.
    slow.send(&ClientMsg::Ack {
        session: flood.clone(),
        seq: slow_flood.last_seq,
    })
    .await
    .unwrap();
    // It is still slower than the flood, so it may be resynced more than
    // once; each resync comes with its snapshot and output stays contiguous
    // (`Stream::apply` checks every seq).
    within(
        PATIENCE,
        "the slow viewer to get its gap",
        pump_until(&mut slow, &flood, &mut slow_flood, true, |s| {
            s.data.len() as u64 > stuck_at + (64 << 10) && s.snapshots.len() as u32 == s.resyncs + 1
        }),
    )
    .await
    .unwrap();
    println!(
        "slow viewer: {} resyncs after acking again",
        slow_flood.resyncs
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewers_see_identical_streams() {
    let node = TestNode::start();
    let session = node
        .create(&[
            "sh",
            "-c",
            "stty -onlcr -echo; echo ready; read go; seq 1 200000; echo end-of-stream; exec sleep 1000",
        ])
        .await
        .id;
    let mut viewers = Vec::new();
    for _ in 0..3 {
        let mut c = node.client(VIEWER).await;
        subscribe(&mut c, &session, Some(0), 1 << 20).await.unwrap();
        viewers.push(c);
    }
    wait_output(&node, &session, "ready").await;
    input(&node, &session, b"\n").await;
    let mut streams = Vec::new();
    for mut c in viewers {
        let mut s = Stream::new(1 << 20);
        within(
            PATIENCE,
            "a viewer's stream",
            pump_until(&mut c, &session, &mut s, true, |s| {
                s.data.ends_with(b"end-of-stream\n")
            }),
        )
        .await
        .unwrap();
        streams.push(s);
    }
    let mut expected: Vec<u8> = (1..=200000)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    expected.splice(0..0, b"ready\n".iter().copied());
    expected.extend_from_slice(b"end-of-stream\n");
    for s in &streams {
        assert_eq!(s.data.len(), expected.len());
        assert!(s.data == expected);
        assert_eq!(s.last_seq, streams[0].last_seq, "same frames, same seqs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_seq_resubscribe_replaces_a_stuck_subscription() {
    let node = TestNode::start();
    let session = node
        .create(&[
            "sh",
            "-c",
            "stty -onlcr -echo; echo ready; read go; seq 1 100000; echo end-of-stream; exec sleep 1000",
        ])
        .await
        .id;
    let mut c = node.client(VIEWER).await;
    subscribe(&mut c, &session, Some(0), SMALL_WINDOW)
        .await
        .unwrap();
    // `ready` comes after `stty -echo`: a newline sent before it would be
    // echoed into the stream.
    wait_output(&node, &session, "ready").await;
    input(&node, &session, b"\n").await;
    let mut s = Stream::new(SMALL_WINDOW);
    within(
        PATIENCE,
        "the first window",
        pump_until(&mut c, &session, &mut s, false, |s| {
            s.data.len() as u64 >= SMALL_WINDOW / 2
        }),
    )
    .await
    .unwrap();
    drain_until_quiet(&mut c, &session, &mut s, Duration::from_millis(500)).await;
    let stuck_at = s.data.len();
    assert!(
        (stuck_at as u64) <= SMALL_WINDOW + MAX_FRAME,
        "no ack, so delivery stopped"
    );

    // Re-subscribe from where it stands, still without acking: delivery is re-armed.
    let reply = subscribe(&mut c, &session, Some(s.last_seq), SMALL_WINDOW)
        .await
        .unwrap();
    assert!(matches!(reply, ServerMsg::Subscribed { .. }));
    within(
        PATIENCE,
        "output after the re-subscribe",
        pump_until(&mut c, &session, &mut s, false, |s| s.data.len() > stuck_at),
    )
    .await
    .unwrap();

    // And it continues, contiguous, to the end once acking.
    within(
        PATIENCE,
        "the rest",
        pump_until(&mut c, &session, &mut s, true, |s| {
            s.data.ends_with(b"end-of-stream\n")
        }),
    )
    .await
    .unwrap();
    let mut expected: Vec<u8> = (1..=100000)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    expected.splice(0..0, b"ready\n".iter().copied());
    expected.extend_from_slice(b"end-of-stream\n");
    assert!(
        s.data == expected,
        "nothing lost or repeated across the replacement"
    );
    assert_eq!(s.resyncs, 0);
}
