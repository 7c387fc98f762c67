//! Resume: a client that drops and comes back gets exactly the output it
//! missed, in order, once; a gap older than the replay window gets one
//! resync and a snapshot, then contiguous output.

mod common;

use common::*;
use termesh_transport::{ClientMsg, ServerMsg};

const LINES: u64 = 2_800_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lossless_resume_across_random_drops() {
    let node = TestNode::start_with(|c| {
        c.session.ring_bytes = 64 << 20;
        c.session.ring_frames = 1 << 22;
    });
    let expected = numbered_lines(LINES);
    assert!(expected.len() > 19 << 20, "about 20 MiB of output");
    let drops = drop_points(6, expected.len());

    // -onlcr: the terminal passes the generator's bytes through unchanged.
    // "ready" once echo is off: the go keystroke must not be echoed.
    let script = format!("stty -onlcr -echo; echo ready; read go; exec seq 1 {LINES}");
    let mut ready_then_lines = b"ready\n".to_vec();
    ready_then_lines.extend_from_slice(&expected);
    let expected = ready_then_lines;
    let session = node.create(&["sh", "-c", &script]).await.id;
    let window = 1 << 20;
    let mut stream = Stream::new(window);
    let mut reconnects = 0;
    let mut started = false;
    within(PATIENCE * 3, "the whole generator output", async {
        loop {
            let mut c = node.client(VIEWER).await;
            subscribe(&mut c, &session, Some(stream.last_seq), window)
                .await
                .expect("subscribe");
            if !started {
                started = true;
                wait_output(&node, &session, "ready").await;
                let mut op = node.client(OPERATOR).await;
                op.send(&ClientMsg::Input {
                    session: session.clone(),
                    data: b"\n".to_vec(),
                })
                .await
                .unwrap();
                op.close().await;
            }
            let next_drop = drops.iter().copied().find(|d| *d > stream.data.len());
            let done = |s: &Stream| {
                s.data.len() >= expected.len() || next_drop.is_some_and(|d| s.data.len() >= d)
            };
            pump_until(&mut c, &session, &mut stream, true, done)
                .await
                .expect("pump");
            if stream.data.len() >= expected.len() {
                break;
            }
            // Drop without a close handshake, as a lost link does.
            println!(
                "dropping at {} bytes, seq {}",
                stream.data.len(),
                stream.last_seq
            );
            drop(c);
            reconnects += 1;
        }
    })
    .await;
    assert_eq!(stream.resyncs, 0, "the ring held the whole gap every time");
    assert!(stream.snapshots.is_empty());
    assert_eq!(stream.data.len(), expected.len());
    assert!(
        stream.data == expected,
        "assembled output differs from the generator's"
    );
    assert!(reconnects >= 1, "the test dropped the connection");
    println!(
        "{} bytes in {} frames across {reconnects} reconnects",
        stream.data.len(),
        stream.last_seq
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_old_gap_gets_one_resync_then_snapshot_then_contiguous_output() {
    let node = TestNode::start_with(|c| c.session.ring_bytes = 64 << 10);
    let script = "stty -onlcr -echo; seq 1 100; read a; seq 1 200000; echo gap-done; read b; echo after-marker; exec sleep 1000";
    let session = node.create(&["sh", "-c", script]).await.id;
    let window = 1 << 20;

    // Phase 1: read the first 100 lines, then drop.
    let mut stream = Stream::new(window);
    let mut c = node.client(VIEWER).await;
    subscribe(&mut c, &session, Some(0), window).await.unwrap();
    within(
        PATIENCE,
        "the first lines",
        pump_until(&mut c, &session, &mut stream, true, |s| {
            s.data.ends_with(b"100\n")
        }),
    )
    .await
    .unwrap();
    let resume_from = stream.last_seq;
    drop(c);

    // Phase 2: 1.3 MB more output while away: far past a 64 KiB ring.
    let mut op = node.client(OPERATOR).await;
    op.send(&ClientMsg::Input {
        session: session.clone(),
        data: b"\n".to_vec(),
    })
    .await
    .unwrap();
    wait_output(&node, &session, "gap-done\n").await;

    // Phase 3: resume from the old seq.
    let mut c = node.client(VIEWER).await;
    let ServerMsg::Subscribed {
        oldest_seq,
        last_seq,
        ..
    } = subscribe(&mut c, &session, Some(resume_from), window)
        .await
        .unwrap()
    else {
        unreachable!()
    };
    assert!(oldest_seq > resume_from + 1, "the gap left the ring");
    let first = next(&mut c).await;
    assert!(
        matches!(first, ServerMsg::ResyncRequired { last_seq: l, .. } if l == last_seq),
        "got {first:?}"
    );
    stream.apply(&session, &first);
    let snap = next(&mut c).await;
    assert!(matches!(snap, ServerMsg::Snapshot { .. }), "got {snap:?}");
    stream.apply(&session, &snap);
    let snapshot_seq = stream.last_seq;
    assert!(snapshot_seq >= last_seq);
    let before = stream.data.len();
    op.send(&ClientMsg::Input {
        session: session.clone(),
        data: b"\n".to_vec(),
    })
    .await
    .unwrap();
    within(
        PATIENCE,
        "output after the snapshot",
        pump_until(&mut c, &session, &mut stream, true, |s| {
            s.data.ends_with(b"after-marker\n")
        }),
    )
    .await
    .unwrap();
    assert_eq!(stream.resyncs, 1, "exactly one resync_required");
    assert_eq!(stream.snapshots.len(), 1);
    assert_eq!(
        &stream.data[before..],
        b"after-marker\n",
        "contiguous output right after the snapshot"
    );
    let screen = String::from_utf8_lossy(&stream.snapshots[0].1);
    assert!(
        screen.contains("gap-done"),
        "the snapshot shows the screen at its seq"
    );
}
