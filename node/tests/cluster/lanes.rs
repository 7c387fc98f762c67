//! A typed-into session's output crosses the link on its fast data stream
//! (issue 32): a session on a flooded on the bulk stream, then typed into
//! from b, moves to the fast one once its mirror acked what it sent, and
//! b's client gets every line once, in order, without a resync.

use super::*;
use common::cluster::{connect, create};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_session_moves_to_the_fast_stream_and_keeps_its_order() {
    let cluster = Cluster::start(&["a", "b"]);
    let session = create(
        &cluster,
        1,
        "a",
        "stty -echo; seq 1 30000; while read l; do seq 1 3000 | sed \"s/^/$l /\"; done",
    )
    .await;
    let fast = "termesh_peer_fast_frames_total{node=\"a\",peer=\"b\"}";
    let fast_before = cluster.metric(0, fast);
    let mut c = connect(&cluster, 1).await;
    subscribe(&mut c, &session, Some(0), 1 << 20).await.unwrap();
    let mut s = Stream::new(1 << 20);
    let lines = |s: &Stream| String::from_utf8_lossy(&s.data).replace('\r', "");
    within(PATIENCE, "the first 30000 lines through b", async {
        pump_until(&mut c, &session, &mut s, true, |s| {
            lines(s).contains("\n30000\n")
        })
        .await
        .unwrap();
    })
    .await;
    for i in 1..=5 {
        c.send(&ClientMsg::Input {
            session: session.clone(),
            data: format!("x{i}\n").into_bytes(),
        })
        .await
        .unwrap();
        let last = format!("x{i} 3000\n");
        within(PATIENCE, &last, async {
            pump_until(&mut c, &session, &mut s, true, |s| lines(s).contains(&last))
                .await
                .unwrap();
        })
        .await;
    }
    assert_eq!(s.resyncs, 0, "{:?}", s.errors);
    assert!(
        s.snapshots.is_empty(),
        "output from seq 0 needs no snapshot"
    );
    // Every line once, in order (`apply` checked the seqs).
    let text = lines(&s);
    let mut expected: Vec<String> = (1..=30000).map(|n| n.to_string()).collect();
    for i in 1..=5 {
        expected.extend((1..=3000).map(|n| format!("x{i} {n}")));
    }
    let got: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(got.len(), expected.len(), "line count");
    assert!(
        got.iter().zip(&expected).all(|(g, e)| g == e),
        "lines out of order or changed"
    );
    assert!(
        cluster.metric(0, fast) > fast_before,
        "the typed-into session's output took the fast stream"
    );
}
