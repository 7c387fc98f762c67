//! A typed-into session's output crosses the link on its fast data stream
//! (issue 32), and its order holds across the switches: a session on a
//! floods on the bulk stream, is typed into from b while that flood is
//! still crossing (it moves to the fast stream once its mirror acked what
//! it sent), and prints bursts until its output has taken the fast stream
//! (b types a key a second meanwhile, so it stays interactive however long
//! the flood takes to cross on a loaded machine), then for longer than it
//! stays interactive (it moves back while its output crosses), all beside
//! another session of a flooding to b, which keeps the bulk stream
//! queued. b's client gets every line once, in order, without a resync.

use super::*;
use common::cluster::{connect, create, type_line};

/// Bursts printed after the input, 0.1 s apart, once the fast stream was
/// seen: longer than a session stays interactive (10 s).
const AFTER_FAST: u64 = 130;
/// Bound on all bursts (the loop ends by itself).
const MAX_BURSTS: u64 = 2000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_session_moves_between_streams_and_keeps_its_order() {
    let cluster = Cluster::start(&["a", "b"]);
    // Bursts go on until the file `last` names the last one.
    let dir = tempfile::tempdir().unwrap();
    let last = dir.path().join("last");
    let session = create(
        &cluster,
        1,
        "a",
        &format!(
            "stty -echo; read go; seq 1 200000; read l; i=0; \
             while [ $i -lt {MAX_BURSTS} ]; do i=$((i+1)); seq 1 500 | sed \"s/^/$l $i /\"; \
             [ -e {last} ] && [ $i -ge $(cat {last}) ] && break; sleep 0.1; done; echo end",
            last = last.display()
        ),
    )
    .await;
    // The neighbour: a flood read through b all along, so the bulk stream
    // always has output queued when the typed session changes streams.
    let neighbour = create(&cluster, 1, "a", "exec yes 'the neighbour floods the link'").await;
    let mut reader = connect(&cluster, 1).await;
    subscribe(&mut reader, &neighbour, None, 4 << 20)
        .await
        .unwrap();
    let reading = tokio::spawn(async move {
        let mut n = Stream::new(4 << 20);
        let _ = pump_until(&mut reader, &neighbour, &mut n, true, |_| false).await;
    });
    let fast = "termesh_peer_fast_frames_total{node=\"a\",peer=\"b\"}";
    let fast_before = cluster.metric(0, fast);
    let mut c = connect(&cluster, 1).await;
    subscribe(&mut c, &session, Some(0), 1 << 20).await.unwrap();
    let mut s = Stream::new(1 << 20);
    let lines = |s: &Stream| String::from_utf8_lossy(&s.data).replace('\r', "");
    // The flood starts (typed by another client: the flood is bulk) ...
    type_line(&cluster, 0, &session, "go").await;
    within(PATIENCE, "the flood crossing to b", async {
        pump_until(&mut c, &session, &mut s, true, |s| s.data.len() > 64 << 10)
            .await
            .unwrap();
    })
    .await;
    // ... and is typed into from b while it still crosses.
    c.send(&ClientMsg::Input {
        session: session.clone(),
        data: b"x\n".to_vec(),
    })
    .await
    .unwrap();
    let ended = |s: &Stream| lines(s).ends_with("\nend\n");
    let mut fast_seen = false;
    let typed = std::time::Instant::now();
    within(PATIENCE * 2, "every burst through b", async {
        while !ended(&s) {
            assert!(
                fast_seen || typed.elapsed() < PATIENCE,
                "the typed-into session's output never took the fast stream"
            );
            let look_at = std::time::Instant::now() + std::time::Duration::from_secs(1);
            pump_until(&mut c, &session, &mut s, true, |s| {
                ended(s) || std::time::Instant::now() >= look_at
            })
            .await
            .unwrap();
            if fast_seen || ended(&s) {
                continue;
            }
            if cluster.metric(0, fast) > fast_before {
                // The fast stream is taken: print past the interactive
                // time from here, then stop.
                fast_seen = true;
                let bursts = lines(&s).matches("\nx ").count() as u64 / 500;
                std::fs::write(&last, (bursts + 1 + AFTER_FAST).to_string()).unwrap();
            } else {
                // A key (unread by the program): it stays interactive.
                c.send(&ClientMsg::Input {
                    session: session.clone(),
                    data: b" ".to_vec(),
                })
                .await
                .unwrap();
            }
        }
    })
    .await;
    reading.abort();
    assert_eq!(s.resyncs, 0, "{:?}", s.errors);
    assert!(
        s.snapshots.is_empty(),
        "output from seq 0 needs no snapshot"
    );
    // Every line once, in order (`apply` checked the seqs).
    let text = lines(&s);
    let bursts = text.lines().filter(|l| l.ends_with(" 500")).count() as u64;
    let mut expected: Vec<String> = (1..=200_000).map(|n| n.to_string()).collect();
    for i in 1..=bursts {
        expected.extend((1..=500).map(|n| format!("x {i} {n}")));
    }
    expected.push("end".into());
    let got: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(got.len(), expected.len(), "line count");
    if let Some(at) = got.iter().zip(&expected).position(|(g, e)| g != e) {
        panic!(
            "line {at}: {:?} where {:?} was printed",
            got[at], expected[at]
        );
    }
    assert!(
        fast_seen,
        "the typed-into session's output took the fast stream"
    );
}
