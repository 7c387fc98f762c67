//! Requests a viewer's token allows, as hard as it can: subscribe storms
//! and page requests whose replies it never reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::common::binary::{create, info, BinaryNode};
use crate::common::*;
use crate::{echo_works, rss_kib, screen_text, RssWatch};
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, ServerMsg, SessionStatus};

/// The bound on what a subscribe storm may add to the node's memory.
const STORM_BOUND_MIB: f64 = 64.0;

/// 2,000 subscribes from seq 1 (long gone from the ring), each with
/// another scrollback, from one viewer connection: each replaces the
/// last, so the storm costs about one snapshot, not 2,000 (before: 3.4 GiB
/// RSS and 2 GB sent back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribe_storm_from_a_viewer_costs_one_snapshot() {
    let node = BinaryNode::start("[session]\nring_bytes = \"256KiB\"\n");
    let flood = create(&node, "seq 1 200000; exec cat").await.id;
    let typing = create(&node, "exec cat").await.id;
    within(PATIENCE, "the flood printed", async {
        while info(&node, &flood).await.last_seq < 10 {
            poll_pause().await;
        }
        loop {
            let text = screen_text(&node, &flood).await;
            if text.contains("200000") {
                break;
            }
            poll_pause().await;
        }
    })
    .await;
    echo_works(&node, &typing, 1).await;
    let before = rss_kib(node.child.id()) as f64 / 1024.0;
    let watch = RssWatch::start(node.child.id());

    let mut attacker = Client::connect(&node.target(VIEWER)).await.unwrap();
    const STORM: u64 = 2_000;
    for i in 0..STORM {
        attacker
            .send(&ClientMsg::Subscribe {
                id: i,
                session: flood.clone(),
                from_seq: Some(1),
                window: None,
                scrollback: Some(10_000 - i),
            })
            .await
            .unwrap();
    }
    // Keystrokes elsewhere echo while the storm is served.
    echo_works(&node, &typing, 5).await;
    // The last subscribe is answered, then its snapshot comes.
    let (mut snapshots, mut bytes, mut last_seen) = (0, 0usize, false);
    within(PATIENCE, "the last subscribe's snapshot", async {
        loop {
            match attacker.recv().await.unwrap() {
                ServerMsg::Subscribed { id, .. } if id == STORM - 1 => last_seen = true,
                ServerMsg::Snapshot { data, .. } => {
                    snapshots += 1;
                    bytes += data.len();
                    if last_seen {
                        return;
                    }
                }
                _ => {}
            }
        }
    })
    .await;
    let peak = watch.peak_mib();
    println!(
        "subscribe storm: RSS {before:.1} MiB before, {peak:.1} MiB at the peak; \
         {snapshots} snapshots ({:.1} MB) for {STORM} subscribes",
        bytes as f64 / 1e6
    );
    assert!(
        peak - before < STORM_BOUND_MIB,
        "the storm grew the node by {:.1} MiB (bound {STORM_BOUND_MIB})",
        peak - before
    );
    assert!(
        snapshots <= 5,
        "{snapshots} snapshots for {STORM} subscribes"
    );
    assert_eq!(info(&node, &flood).await.status, SessionStatus::Running);
    echo_works(&node, &typing, 1).await;
}

/// The bound on what four viewers pipelining 8 MiB pages without reading
/// their replies may add to the node's memory (a connection holds one
/// such reply in the node at a time, and its copies on the way out).
const PILE_UP_BOUND_MIB: f64 = 128.0;

/// A request for a page, by its id and session.
type PageRequest = fn(u64, String) -> ClientMsg;

/// Four viewer connections each send requests for 8 MiB pages (raw
/// history, or stored output) as fast as the node takes them and never
/// read a reply: the replies each connection has in flight or unsent are
/// bounded (4, and 8 MiB), so the node's memory does not grow with the
/// requests (before: +230 MiB for history; stored output had no bound on
/// requests in flight), and typing elsewhere echoes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_requests_from_clients_that_never_read_are_bounded() {
    let node = BinaryNode::start("");
    // About 12 MB of output: every reply is a full 8 MiB page (more only
    // makes the set-up slow on a loaded machine).
    let big = create(&node, "seq 1 1600000; exec cat").await.id;
    let typing = create(&node, "exec cat").await.id;
    // The screen is asked for only once the output has stopped: a screen
    // request holds the flood until its snapshot is made, which on a busy
    // machine is slow.
    within(PATIENCE, "the output stored", async {
        let mut before = 0;
        loop {
            let seq = info(&node, &big).await.last_seq;
            if seq >= 10 && seq == before && screen_text(&node, &big).await.contains("1600000") {
                break;
            }
            before = seq;
            poll_pause().await;
        }
    })
    .await;
    echo_works(&node, &typing, 1).await;
    let history = |id, session: String| ClientMsg::History {
        id,
        session,
        limit: Some(8 << 20),
        before_seq: None,
        rows: None,
    };
    let stored = |id, session: String| ClientMsg::ReadOutput {
        id,
        session,
        after: Some(0),
        max_bytes: Some(8 << 20),
    };
    let attacks: [(&str, PageRequest); 2] = [("history", history), ("read_output", stored)];
    // One baseline for both cases: what the first leaves behind counts
    // against the second.
    let before = rss_kib(node.child.id()) as f64 / 1024.0;
    for (name, request) in attacks {
        let watch = RssWatch::start(node.child.id());
        let sent = Arc::new(AtomicU64::new(0));
        let mut attackers = Vec::new();
        for _ in 0..4 {
            let mut c = Client::connect(&node.target(VIEWER)).await.unwrap();
            let (session, sent) = (big.clone(), sent.clone());
            attackers.push(tokio::spawn(async move {
                // Bounded in count and time: the node stops reading from a
                // client that does not read, so a send may wait for ever.
                let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(8);
                for id in 0..20_000u64 {
                    let msg = request(id, session.clone());
                    match tokio::time::timeout_at(deadline, c.send(&msg)).await {
                        Ok(Ok(())) => sent.fetch_add(1, Ordering::Relaxed),
                        _ => break,
                    };
                }
                c
            }));
        }
        // Typing echoes while the attackers' replies pile up.
        echo_works(&node, &typing, 5).await;
        let mut held = Vec::new();
        for a in attackers {
            held.push(a.await.unwrap());
        }
        let peak = watch.peak_mib();
        println!(
            "{name} pile-up: RSS {before:.1} MiB before, {peak:.1} MiB at the peak; \
             {} requests sent by 4 clients that never read",
            sent.load(Ordering::Relaxed)
        );
        assert!(
            peak - before < PILE_UP_BOUND_MIB,
            "unread {name} replies grew the node by {:.1} MiB (bound {PILE_UP_BOUND_MIB})",
            peak - before
        );
        // A client that reads at last gets whole replies.
        let mut reader = held.pop().unwrap();
        let reply = within(PATIENCE, "a reply to the reader", async {
            loop {
                match reader.recv().await.unwrap() {
                    ServerMsg::History { data: Some(d), .. } => return d.len(),
                    ServerMsg::StoredOutput { frames, .. } => {
                        return frames.iter().map(|f| f.data.len()).sum()
                    }
                    _ => {}
                }
            }
        })
        .await;
        assert!(reply > 512 << 10, "a page of {reply} bytes");
        drop(held);
    }
    assert_eq!(info(&node, &big).await.status, SessionStatus::Running);
    echo_works(&node, &typing, 1).await;
}

/// What 16 viewers looping 10,000-row screens may add to the node.
const SCREEN_STORM_BOUND_MIB: f64 = 64.0;

/// 16 viewer connections each keep 4 screens of 10,000 scrollback rows in
/// flight for 6 s, every one with another scrollback (so no two share a
/// render), and read every reply: the node renders them at the pace of
/// its screen threads, its memory stays bounded, typing elsewhere echoes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_screen_storm_from_many_viewers_is_bounded() {
    let node = BinaryNode::start("");
    let colourful = "i=0; while [ $i -lt 12000 ]; do i=$((i+1)); \
                     printf '\\033[3%dmline %d\\033[0m\\n' $((i%7)) $i; done; exec cat";
    let big = create(&node, colourful).await.id;
    let typing = create(&node, "exec cat").await.id;
    within(PATIENCE, "the output printed", async {
        while !screen_text(&node, &big).await.contains("line 12000") {
            poll_pause().await;
        }
    })
    .await;
    echo_works(&node, &typing, 1).await;
    let before = rss_kib(node.child.id()) as f64 / 1024.0;
    let watch = RssWatch::start(node.child.id());
    let served = Arc::new(AtomicU64::new(0));
    let mut viewers = Vec::new();
    for v in 0..16u64 {
        let mut c = Client::connect(&node.target(VIEWER)).await.unwrap();
        let (session, served) = (big.clone(), served.clone());
        viewers.push(tokio::spawn(async move {
            let until = tokio::time::Instant::now() + std::time::Duration::from_secs(6);
            let mut id = 0u64;
            while tokio::time::Instant::now() < until {
                for _ in 0..4 {
                    id += 1;
                    let scrollback = Some(10_000 - (v * 1_000 + id) % 5_000);
                    let msg = ClientMsg::Screen {
                        id,
                        session: session.clone(),
                        scrollback,
                    };
                    c.send(&msg).await.unwrap();
                }
                for _ in 0..4 {
                    match c.recv().await.unwrap() {
                        ServerMsg::Snapshot { id: Some(_), .. } => {
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                        ServerMsg::Error { message, .. } => panic!("{message}"),
                        _ => {}
                    }
                }
            }
        }));
    }
    echo_works(&node, &typing, 5).await;
    for v in viewers {
        v.await.unwrap();
    }
    let peak = watch.peak_mib();
    println!(
        "screen storm: {} screens of up to 10,000 rows served to 16 viewers in 6 s; \
         RSS {before:.1} MiB before, {peak:.1} MiB at the peak",
        served.load(Ordering::Relaxed)
    );
    assert!(
        peak - before < SCREEN_STORM_BOUND_MIB,
        "the screen storm grew the node by {:.1} MiB (bound {SCREEN_STORM_BOUND_MIB})",
        peak - before
    );
    assert_eq!(info(&node, &big).await.status, SessionStatus::Running);
    echo_works(&node, &typing, 1).await;
}

/// Four viewers send cheap requests (pings, acks for sessions they do not
/// watch, undecodable frames) as fast as they can for 5 s: each gets its
/// share of a worker, another client's keystrokes still echo, and the
/// node's memory stays flat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_cheap_requests_leaves_typing_working() {
    let node = BinaryNode::start("");
    let typing = create(&node, "exec cat").await.id;
    echo_works(&node, &typing, 1).await;
    let before = rss_kib(node.child.id()) as f64 / 1024.0;
    let watch = RssWatch::start(node.child.id());
    let sent = Arc::new(AtomicU64::new(0));
    let mut flooders = Vec::new();
    for f in 0..4u64 {
        let mut c = Client::connect(&node.target(VIEWER)).await.unwrap();
        let sent = sent.clone();
        flooders.push(tokio::spawn(async move {
            use tokio_tungstenite::tungstenite::Message;
            let until = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
            let mut n = 0u64;
            while tokio::time::Instant::now() < until {
                n += 1;
                let msg = match n % 3 {
                    0 => rmp_serde::to_vec_named(&ClientMsg::Ping {
                        nonce: Some(n.into()),
                    })
                    .unwrap(),
                    1 => rmp_serde::to_vec_named(&ClientMsg::Ack {
                        session: format!("nobody-{f}"),
                        seq: n,
                    })
                    .unwrap(),
                    _ => vec![0xc1, 0xc1, 0xc1],
                };
                // Bounded in time: the node stops reading from a client
                // that reads none of its answers, so a send may wait.
                let sending = c.send_raw(Message::Binary(msg));
                if !matches!(tokio::time::timeout_at(until, sending).await, Ok(Ok(()))) {
                    break;
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
            c
        }));
    }
    echo_works(&node, &typing, 5).await;
    for f in flooders {
        drop(f.await.unwrap());
    }
    let peak = watch.peak_mib();
    println!(
        "cheap flood: {} requests from 4 clients in 5 s; RSS {before:.1} MiB before, \
         {peak:.1} MiB at the peak",
        sent.load(Ordering::Relaxed)
    );
    assert!(
        peak - before < STORM_BOUND_MIB,
        "a flood of cheap requests grew the node by {:.1} MiB (bound {STORM_BOUND_MIB})",
        peak - before
    );
    echo_works(&node, &typing, 1).await;
}
