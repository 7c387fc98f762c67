//! A typed-into session's output crosses the link on its fast data stream
//! (issue 32), and its order holds across the switches: a session on a
//! floods on the bulk stream, is typed into from b while that flood is
//! still crossing (it moves to the fast stream once its mirror acked what
//! it sent), and keeps printing for longer than it stays interactive (it
//! moves back while its output crosses), all beside another session of a
//! flooding to b, which keeps the bulk stream queued. b's client gets
//! every line once, in order, without a resync.

use super::*;
use common::cluster::{connect, create, type_line};

/// Bursts printed after the input, 0.1 s apart: longer than a session
/// stays interactive (10 s).
const BURSTS: u64 = 130;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_session_moves_between_streams_and_keeps_its_order() {
    let cluster = Cluster::start(&["a", "b"]);
    let session = create(
        &cluster,
        1,
        "a",
        &format!(
            "stty -echo; read go; seq 1 200000; read l; i=0; \
             while [ $i -lt {BURSTS} ]; do i=$((i+1)); seq 1 500 | sed \"s/^/$l $i /\"; \
             sleep 0.1; done; echo end"
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
    within(PATIENCE * 2, "every burst through b", async {
        pump_until(&mut c, &session, &mut s, true, |s| {
            lines(s).ends_with("\nend\n")
        })
        .await
        .unwrap();
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
    let mut expected: Vec<String> = (1..=200_000).map(|n| n.to_string()).collect();
    for i in 1..=BURSTS {
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
        cluster.metric(0, fast) > fast_before,
        "the typed-into session's output took the fast stream"
    );
}
