//! Remote sessions through mirrors, on three real nodes over QUIC: a
//! client on any node gets a session of another node losslessly, with the
//! owner's seqs, resuming on whichever node it reconnects to; one copy of
//! the output crosses a link however many watch; a slow viewer delays only
//! itself; a dropped link is `unreachable`, then `reachable` and the gap.

mod common;

use common::cluster::{connect, create, numbered_lines_with_drops, type_line, Cluster};
use common::*;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, EventKind, ServerMsg};

/// Rings large enough that no test here loses frames to eviction.
const BIG_RINGS: &str = "\n[session]\nring_bytes = \"64MiB\"\nring_frames = 4194304\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lossless_through_mirrors_resuming_on_other_nodes() {
    let cluster = Cluster::start_with(&["a", "b", "c"], BIG_RINGS);
    // About 20 MiB; B, C, B, C, ...: every resume on another node.
    let hops = numbered_lines_with_drops(&cluster, 2_800_000, 6, &[1, 2], 1 << 20).await;
    assert!(
        hops.iter().any(|h| h.0 == 2),
        "the client moved between nodes"
    );
}

/// Every `(seq, data)` of a session until it exits, from a fresh start.
async fn frames_until_exit(mut c: Client, session: String) -> Vec<(u64, Vec<u8>)> {
    let mut frames = Vec::new();
    let mut acked = 0usize;
    loop {
        match next(&mut c).await {
            ServerMsg::Output { seq, data, .. } => {
                acked += data.len();
                frames.push((seq, data));
                if acked > 64 << 10 {
                    acked = 0;
                    c.send(&ClientMsg::Ack {
                        session: session.clone(),
                        seq: frames.last().map_or(0, |f| f.0),
                    })
                    .await
                    .unwrap();
                }
            }
            ServerMsg::Event {
                event: EventKind::Exited { .. },
                ..
            } => return frames,
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewers_on_every_node_receive_identical_streams() {
    let cluster = Cluster::start_with(&["a", "b", "c"], BIG_RINGS);
    let script = "stty -onlcr -echo; echo ready; read go; i=0; \
                  while [ $i -lt 300 ]; do i=$((i+1)); echo \"line $i\"; done; seq 1 50000";
    let session = create(&cluster, 0, "a", script).await;
    let mut tasks = Vec::new();
    for i in 0..3 {
        let mut c = connect(&cluster, i).await;
        subscribe(&mut c, &session, Some(0), 256 << 10)
            .await
            .unwrap();
        tasks.push(tokio::spawn(frames_until_exit(c, session.clone())));
    }
    type_line(&cluster, 2, &session, "go").await;
    let mut streams = Vec::new();
    for t in tasks {
        streams.push(within(PATIENCE, "a viewer's stream", t).await.unwrap());
    }
    let total: usize = streams[0].iter().map(|f| f.1.len()).sum();
    println!("{} frames, {total} bytes on each node", streams[0].len());
    assert!(total > 250_000);
    let first_seq = streams[0][0].0;
    assert_eq!(first_seq, 1, "from the very first frame");
    assert!(streams[0].windows(2).all(|w| w[1].0 == w[0].0 + 1));
    assert!(streams[1] == streams[0], "node b's viewer differs from a's");
    assert!(streams[2] == streams[0], "node c's viewer differs from a's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_viewers_on_one_node_cost_one_copy_over_the_link() {
    let cluster = Cluster::start_with(&["a", "b", "c"], BIG_RINGS);
    const LINES: u64 = 500_000;
    let script = format!("stty -onlcr -echo; echo ready; read go; exec seq 1 {LINES}");
    let session = create(&cluster, 1, "a", &script).await;
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let mut c = connect(&cluster, 1).await;
        subscribe(&mut c, &session, Some(0), 1 << 20).await.unwrap();
        tasks.push(tokio::spawn(frames_until_exit(c, session.clone())));
    }
    let series = "termesh_peer_bytes_out_total{node=\"a\",peer=\"b\"}";
    let before = cluster.metric(0, series);
    type_line(&cluster, 0, &session, "go").await;
    let mut output = 0usize;
    for t in tasks {
        let frames = within(PATIENCE, "a viewer's stream", t).await.unwrap();
        let bytes: usize = frames.iter().map(|f| f.1.len()).sum();
        assert!(output == 0 || bytes == output, "every viewer got it all");
        output = bytes;
    }
    let sent = cluster.metric(0, series) - before;
    let ratio = sent / output as f64;
    let lost = cluster.metric(0, "termesh_peer_lost_packets_total{node=\"a\",peer=\"b\"}");
    println!(
        "session output {output} bytes; a->b link {sent} bytes ({lost} packets lost): \
         {ratio:.3}x for 10 viewers on b"
    );
    assert!(output as u64 > numbered_lines(LINES).len() as u64);
    assert!(ratio < 1.1, "{ratio:.3}x the output crossed the link");
    // Loopback carries 64 KiB datagrams: the link's path MTU search goes
    // past Ethernet's 1,500 bytes, where QUIC's defaults stop it.
    let mtu = "termesh_peer_path_mtu_bytes{node=\"a\",peer=\"b\"}";
    within(PATIENCE, "a path MTU past Ethernet's", async {
        while cluster.metric(0, mtu) <= 1500.0 {
            poll_pause().await;
        }
    })
    .await;
    println!("a->b path MTU {} bytes", cluster.metric(0, mtu));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_viewer_on_a_mirror_delays_only_itself() {
    let cluster = Cluster::start_with(&["a", "b", "c"], "");
    let script =
        "stty -onlcr -echo; echo ready; read go; seq 1 300000; echo all-done; exec sleep 1000";
    let session = create(&cluster, 1, "a", script).await;
    let window = 64 << 10;
    let mut slow = connect(&cluster, 1).await;
    subscribe(&mut slow, &session, Some(0), window)
        .await
        .unwrap();
    let mut fast = Vec::new();
    for i in [0, 1] {
        let mut c = connect(&cluster, i).await;
        subscribe(&mut c, &session, Some(0), window).await.unwrap();
        fast.push(c);
    }
    type_line(&cluster, 0, &session, "go").await;
    // Both fast viewers see the end while the slow one has not acked.
    for c in fast.iter_mut() {
        let mut s = Stream::new(window);
        within(
            PATIENCE,
            "a fast viewer to see the end",
            pump_until(c, &session, &mut s, true, |s| {
                s.data.ends_with(b"all-done\n")
            }),
        )
        .await
        .unwrap();
    }
    // The slow one holds at most its window plus one frame, then gets its
    // gap (replayed, or one resync) once it acks again.
    let mut s = Stream::new(window);
    within(
        PATIENCE,
        "the slow viewer's first window",
        pump_until(&mut slow, &session, &mut s, false, |s| s.unacked >= window),
    )
    .await
    .ok();
    assert!(
        s.unacked <= window + (64 << 10),
        "credit held: {}",
        s.unacked
    );
    within(
        PATIENCE,
        "the slow viewer to catch up",
        pump_until(&mut slow, &session, &mut s, true, |s| {
            s.data.ends_with(b"all-done\n")
                || s.snapshots
                    .iter()
                    .any(|(_, d)| d.ends_with(b"all-done\r\n"))
        }),
    )
    .await
    .unwrap();
    assert!(s.resyncs <= 1);
    println!("slow viewer: {} resyncs, {} bytes", s.resyncs, s.data.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_link_is_unreachable_then_reachable_with_every_frame() {
    let cluster = Cluster::start_with(&["a", "b", "c"], BIG_RINGS);
    let script = "stty -onlcr -echo; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo \"tick $i\"; sleep 0.01; done";
    let session = create(&cluster, 1, "a", script).await;
    let window = 1 << 20;
    let mut c = connect(&cluster, 1).await;
    subscribe(&mut c, &session, Some(0), window).await.unwrap();
    let mut s = Stream::new(window);
    within(
        PATIENCE,
        "ticks through b",
        pump_until(&mut c, &session, &mut s, true, |s| s.data.len() > 200),
    )
    .await
    .unwrap();
    let a = nix::unistd::Pid::from_raw(cluster.pid(0) as i32);
    nix::sys::signal::kill(a, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let told = tokio::time::timeout(
        PATIENCE * 2,
        pump_until(&mut c, &session, &mut s, true, |s| s.link_is("unreachable")),
    )
    .await;
    let _ = nix::sys::signal::kill(a, nix::sys::signal::Signal::SIGCONT);
    if !matches!(told, Ok(Ok(()))) {
        panic!("no unreachable ({told:?}); b's log:\n{}", cluster.log(1));
    }
    within(
        PATIENCE * 2,
        "reachable after SIGCONT",
        pump_until(&mut c, &session, &mut s, true, |s| s.link_is("reachable")),
    )
    .await
    .unwrap();
    println!("events (kind, last seq seen): {:?}", s.links);
    let before = s.last_seq;
    // Output continues with every frame: the Stream panics on a hole.
    within(
        PATIENCE,
        "ticks after the link is back",
        pump_until(&mut c, &session, &mut s, true, |s| s.last_seq > before + 20),
    )
    .await
    .unwrap();
    assert_eq!(
        s.resyncs,
        0,
        "the owner's ring held the gap; a's log:\n{}\nb's log:\n{}",
        cluster.log(0),
        cluster.log(1)
    );
    let text = String::from_utf8_lossy(&s.data);
    let ticks: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("tick ")?.parse().ok())
        .collect();
    assert!(
        ticks.windows(2).all(|w| w[1] == w[0] + 1),
        "every tick once, in order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn termesh_attach_on_any_node_drives_a_session_of_another() {
    let cluster = Cluster::start(&["a", "b", "c"]);
    // A shell-like loop on a: echoes each line typed, exits on `bye`.
    let script = "stty -echo; echo prompt-ready; while read l; do \
                  [ \"$l\" = bye ] && exit 5; echo \"got:$l\"; done";
    let session = create(&cluster, 0, "a", script).await;
    let url = format!("http://{}", cluster.nodes[2].http);
    let pane = common::tmux::Tmux::start(
        80,
        24,
        &format!("{} attach {session}", env!("CARGO_BIN_EXE_termesh")),
        &[("TERMESH_URL", &url), ("TERMESH_TOKEN", &cluster.token)],
    );
    pane.wait_for("prompt-ready").await;
    pane.type_text("through-c\r");
    pane.wait_for("got:through-c").await;
    // The owner cut off from c: the status row says so, then clears, and
    // keys typed meanwhile arrive.
    let a = nix::unistd::Pid::from_raw(cluster.pid(0) as i32);
    nix::sys::signal::kill(a, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let shown = tokio::time::timeout(PATIENCE, pane.wait_for("node is unreachable")).await;
    nix::sys::signal::kill(a, nix::sys::signal::Signal::SIGCONT).unwrap();
    shown.expect("the status row names the unreachable node");
    pane.wait_until("the status row to clear", |t| !t.contains("unreachable"))
        .await;
    pane.type_text("after-the-cut\r");
    pane.wait_for("got:after-the-cut").await;
    pane.type_text("bye\r");
    assert_eq!(pane.exit_code().await, 5, "{}", pane.text());
    assert!(
        pane.text().contains("exited with code 5"),
        "{}",
        pane.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_frames_do_not_wait_behind_a_flood_on_the_same_link() {
    let cluster = Cluster::start(&["a", "b", "c"]);
    let flood = create(
        &cluster,
        1,
        "a",
        "exec yes 'flood flood flood flood flood flood flood'",
    )
    .await;
    let echo = create(&cluster, 1, "a", "stty raw -echo; exec cat").await;
    // A viewer on b drains the flood as fast as it can, acking.
    let mut viewer = connect(&cluster, 1).await;
    subscribe(&mut viewer, &flood, None, 1 << 20).await.unwrap();
    let drained = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = drained.clone();
    let flood_id = flood.clone();
    let drain = tokio::spawn(async move {
        let mut unacked = 0u64;
        while let Ok(msg) = viewer.recv().await {
            if let ServerMsg::Output { seq, data, .. } = msg {
                counter.fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
                unacked += data.len() as u64;
                if unacked >= 256 << 10 {
                    unacked = 0;
                    let ack = ClientMsg::Ack {
                        session: flood_id.clone(),
                        seq,
                    };
                    if viewer.send(&ack).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    within(PATIENCE, "the flood to cross the link", async {
        while drained.load(std::sync::atomic::Ordering::Relaxed) < 8 << 20 {
            poll_pause().await;
        }
    })
    .await;
    // Keystrokes and forwarded requests from b while the flood runs.
    let mut c = connect(&cluster, 1).await;
    subscribe_fresh(&mut c, &echo, 1 << 20).await;
    // At least 100 keystrokes, and on until 4 MiB more of the flood has
    // crossed: the flood of an unpaced `yes` comes in bursts (the mirror
    // falls a ring behind the owner and is resynced), so a fixed count of
    // keystrokes could all fall between two bursts.
    let flood_before = drained.load(std::sync::atomic::Ordering::Relaxed);
    let flood_crossed =
        || drained.load(std::sync::atomic::Ordering::Relaxed) - flood_before >= 4 << 20;
    let started = std::time::Instant::now();
    let mut times = Vec::new();
    for i in 0.. {
        if i >= 100 && flood_crossed() {
            break;
        }
        assert!(
            started.elapsed() < PATIENCE * 2,
            "the flood stopped crossing the link: {} bytes in {i} keystrokes",
            drained.load(std::sync::atomic::Ordering::Relaxed) - flood_before
        );
        let key = format!("<k{i}>");
        let sent = std::time::Instant::now();
        c.send(&ClientMsg::Input {
            session: echo.clone(),
            data: key.clone().into_bytes(),
        })
        .await
        .unwrap();
        let mut seen = String::new();
        within(PATIENCE, "the echo", async {
            while !seen.contains(&key) {
                if let ServerMsg::Output { data, .. } = next(&mut c).await {
                    seen.push_str(&String::from_utf8_lossy(&data));
                }
            }
        })
        .await;
        times.push(sent.elapsed());
        let renamed = c
            .request(|id| ClientMsg::Rename {
                id,
                session: echo.clone(),
                name: format!("echo-{}", i % 2),
            })
            .await
            .unwrap();
        assert!(matches!(renamed, ServerMsg::Ok { .. }), "{renamed:?}");
    }
    let flood_rate = (drained.load(std::sync::atomic::Ordering::Relaxed) - flood_before) as f64
        / started.elapsed().as_secs_f64()
        / 1e6;
    times.sort();
    println!(
        "{} echoes through b for a session on a, while {flood_rate:.1} MB/s of another \
         session crosses the same link: p50 {:?}, p99 {:?}",
        times.len(),
        times[times.len() / 2],
        times[times.len() * 99 / 100]
    );
    for series in [
        "termesh_peer_request_timeouts_total{node=\"b\",peer=\"a\"}",
        "termesh_peer_breaker_trips_total{node=\"b\",peer=\"a\"}",
    ] {
        assert_eq!(cluster.metric(1, series), 0.0, "{series}");
    }
    drain.abort();
}
