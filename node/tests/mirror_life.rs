//! What a mirror shows and how long it lives, on three real nodes: the
//! snapshot, `screen` and `history` of another node's session are the
//! owner's, byte for byte; a mirror without viewers lingers, then goes;
//! a session removed on its owner ends its remote viewers' subscriptions;
//! a client resuming too far behind through a mirror gets one resync.

mod common;

use common::cluster::{connect, create, Cluster};
use common::*;
use termesh_transport::{ClientMsg, ServerMsg};

fn mirrors_on(cluster: &Cluster, i: usize) -> f64 {
    cluster.metric(i, "termesh_mirrors{")
}

/// A fresh subscription's snapshot: (seq, cols, rows, data).
async fn fresh_snapshot(cluster: &Cluster, i: usize, session: &str) -> (u64, u16, u16, Vec<u8>) {
    let mut c = connect(cluster, i).await;
    c.request(|id| ClientMsg::Subscribe {
        id,
        session: session.into(),
        from_seq: None,
        window: None,
        scrollback: Some(100),
    })
    .await
    .unwrap();
    loop {
        if let ServerMsg::Snapshot {
            seq,
            cols,
            rows,
            data,
            id: None,
            ..
        } = next(&mut c).await
        {
            return (seq, cols, rows, data);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screens_of_a_remote_session_are_the_owners() {
    let cluster = Cluster::start(&["a", "b", "c"]);
    let script = r#"i=0; while [ $i -lt 80 ]; do printf '\033[3%dm%03d\033[0m coloured \033[4munderlined\033[0m line\n' $((i % 8)) $i; i=$((i+1)); done; printf '\033[?25l\033[5;10Hcursor-here'; echo; echo settled; exec sleep 100000"#;
    let session = create(&cluster, 1, "a", script).await;
    let mut c = connect(&cluster, 0).await;
    let mut s = Stream::new(1 << 20);
    subscribe(&mut c, &session, Some(0), 1 << 20).await.unwrap();
    within(
        PATIENCE,
        "the output to settle",
        pump_until(&mut c, &session, &mut s, true, |s| {
            String::from_utf8_lossy(&s.data).contains("settled")
        }),
    )
    .await
    .unwrap();
    let owner = fresh_snapshot(&cluster, 0, &session).await;
    for i in [1, 2] {
        let mirrored = fresh_snapshot(&cluster, i, &session).await;
        assert_eq!(mirrored.0, owner.0, "node {i}: the seq");
        assert_eq!((mirrored.1, mirrored.2), (owner.1, owner.2));
        assert!(mirrored.3 == owner.3, "node {i}: the snapshot differs");
    }
    let ask = |i: usize, make: fn(u64, String) -> ClientMsg| {
        let session = session.clone();
        let cluster = &cluster;
        async move {
            let mut c = connect(cluster, i).await;
            c.request(|id| make(id, session)).await.unwrap()
        }
    };
    let history = |id, session| ClientMsg::History {
        id,
        session,
        limit: None,
        before_seq: None,
        rows: None,
    };
    let screen = |id, session| ClientMsg::Screen {
        id,
        session,
        scrollback: Some(20),
    };
    for make in [history as fn(u64, String) -> ClientMsg, screen] {
        let at_owner = format!("{:?}", ask(0, make).await);
        assert_eq!(format!("{:?}", ask(2, make).await), at_owner);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_lingers_then_goes_and_removal_reaches_remote_viewers() {
    let cluster = Cluster::start_edited(&["a", "b", "c"], |text| {
        text.replacen("[cluster]\n", "[cluster]\nmirror_linger_secs = 2\n", 1)
    });
    let session = create(&cluster, 0, "a", "echo hello; exec sleep 100000").await;
    let mut c = connect(&cluster, 1).await;
    subscribe(&mut c, &session, Some(0), 1 << 20).await.unwrap();
    assert_eq!(mirrors_on(&cluster, 1), 1.0);
    assert_eq!(mirrors_on(&cluster, 0), 0.0, "the owner needs none");
    c.close().await;
    within(PATIENCE, "the mirror to go after its linger", async {
        while mirrors_on(&cluster, 1) != 0.0 {
            poll_pause().await;
        }
    })
    .await;

    // A viewer on b of a session removed on a is told, as on a.
    let mut c = connect(&cluster, 1).await;
    subscribe(&mut c, &session, Some(0), 1 << 20).await.unwrap();
    let mut owner = connect(&cluster, 0).await;
    owner
        .request(|id| ClientMsg::Remove {
            id,
            session: session.clone(),
            purge: None,
        })
        .await
        .unwrap();
    let told = within(PATIENCE, "the removal to reach b's viewer", async {
        loop {
            if let ServerMsg::Error { id: None, code, .. } = next(&mut c).await {
                return code;
            }
        }
    })
    .await;
    assert_eq!(told, termesh_transport::ErrorCode::NotFound);
    within(PATIENCE, "the mirror to go with its session", async {
        while mirrors_on(&cluster, 1) != 0.0 {
            poll_pause().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_endpoint_of_any_node_streams_and_drives_a_remote_session() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let cluster = Cluster::start(&["a", "b", "c"]);
    let script = "stty -echo; echo ready; while read l; do echo \"got $l\"; done";
    let session = create(&cluster, 0, "a", script).await;
    let url = format!(
        "ws://{}/sessions/{session}/raw?token={}",
        cluster.nodes[2].http, cluster.token
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let mut seen = Vec::new();
    wire::raw_read_until(&mut ws, "ready", &mut seen).await;
    ws.send(Message::Binary(b"via-raw-on-c\n".to_vec()))
        .await
        .unwrap();
    wire::raw_read_until(&mut ws, "got via-raw-on-c", &mut seen).await;
    ws.send(Message::Text(
        r#"{"type":"resize","cols":101,"rows":33}"#.into(),
    ))
    .await
    .unwrap();
    within(PATIENCE, "the owner to take the raw client's size", async {
        loop {
            let mut c = connect(&cluster, 0).await;
            if let Ok(ServerMsg::Sessions { sessions, .. }) = c.request(ClientMsg::list).await {
                if sessions
                    .iter()
                    .any(|s| s.id == session && (s.cols, s.rows) == (101, 33))
                {
                    return;
                }
            }
            poll_pause().await;
        }
    })
    .await;
}

/// Resumes `session` on node `on` from `from`, a seq that left every
/// 64 KiB ring: one `resync_required`, a snapshot, then output that
/// continues without a hole up to `marker`, typed in after the snapshot.
async fn resume_too_old(cluster: &Cluster, on: usize, session: &str, from: u64, marker: &str) {
    let window = 1 << 20;
    let mut c = connect(cluster, on).await;
    let ServerMsg::Subscribed { last_seq, .. } = subscribe(&mut c, session, Some(from), window)
        .await
        .unwrap()
    else {
        unreachable!()
    };
    let mut s = Stream::new(window);
    s.last_seq = from;
    let first = next(&mut c).await;
    assert!(
        matches!(first, ServerMsg::ResyncRequired { .. }),
        "node {on}: got {first:?}"
    );
    s.apply(session, &first);
    let snap = next(&mut c).await;
    assert!(
        matches!(snap, ServerMsg::Snapshot { .. }),
        "node {on}: got {snap:?}"
    );
    s.apply(session, &snap);
    assert!(s.last_seq >= last_seq, "the snapshot is at least as new");
    common::cluster::type_line(cluster, 0, session, marker).await;
    within(
        PATIENCE,
        "output after the snapshot",
        pump_until(&mut c, session, &mut s, true, |s| {
            String::from_utf8_lossy(&s.data).contains(&format!("after {marker}\n"))
        }),
    )
    .await
    .unwrap();
    assert_eq!(s.resyncs, 1, "node {on}: exactly one resync_required");
    assert_eq!(s.snapshots.len(), 1);
    assert_eq!(
        String::from_utf8_lossy(&s.data),
        format!("after {marker}\n"),
        "node {on}: contiguous output right after the snapshot"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_too_far_behind_through_a_mirror_gets_one_resync() {
    let cluster = Cluster::start_with(&["a", "b", "c"], "\n[session]\nring_bytes = \"64KiB\"\n");
    let script = "stty -onlcr -echo; seq 1 100; read a; seq 1 200000; echo gap-done; \
                  while read line; do echo \"after $line\"; done";
    let session = create(&cluster, 0, "a", script).await;
    let window = 1 << 20;

    // A client on b reads the first lines through b's mirror, then drops.
    let mut c = connect(&cluster, 1).await;
    subscribe(&mut c, &session, Some(0), window).await.unwrap();
    let mut s = Stream::new(window);
    within(
        PATIENCE,
        "the first lines",
        pump_until(&mut c, &session, &mut s, true, |s| {
            s.data.ends_with(b"100\n")
        }),
    )
    .await
    .unwrap();
    let from = s.last_seq;
    drop(c);

    // 1.3 MB more while it is away: far past every 64 KiB ring.
    common::cluster::type_line(&cluster, 0, &session, "").await;
    within(PATIENCE, "the gap's output on the owner", async {
        loop {
            let (_, _, _, screen) = fresh_snapshot(&cluster, 0, &session).await;
            if String::from_utf8_lossy(&screen).contains("gap-done") {
                return;
            }
            poll_pause().await;
        }
    })
    .await;

    // On c, whose new mirror asks a for the old seq; then on b, whose
    // lingering mirror went on without it.
    resume_too_old(&cluster, 2, &session, from, "one").await;
    resume_too_old(&cluster, 1, &session, from, "two").await;
}
