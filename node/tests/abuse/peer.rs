//! A peer with a valid certificate (node a's own files, a stopped) that
//! misbehaves on the mesh towards node b: garbage on the control stream,
//! a flood of output frames for no session, and reply frames begun and
//! never finished. b closes what is malformed, keeps its memory within a
//! bound, and its programs and keystrokes carry on.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use termesh_transport::peer::tls::Identity;
use termesh_transport::peer::{frame, DataMsg, PeerMsg, PEER_PROTO};

use crate::common::cluster::{create, Cluster};
use crate::common::*;
use crate::{rss_kib, RssWatch};

/// What the flood and the unfinished replies may add to b's memory.
const PEER_BOUND_MIB: f64 = 128.0;

/// The value of `key = "..."` in the `[cluster]` section of `config`.
fn cluster_value(config: &Path, key: &str) -> String {
    let doc: toml_edit::DocumentMut = std::fs::read_to_string(config).unwrap().parse().unwrap();
    doc["cluster"][key].as_str().unwrap().to_string()
}

/// b's mesh address, from a's config.
fn quic_of(config: &Path, name: &str) -> SocketAddr {
    let doc: toml_edit::DocumentMut = std::fs::read_to_string(config).unwrap().parse().unwrap();
    let nodes = doc["cluster"]["nodes"].as_array_of_tables().unwrap();
    let node = nodes.iter().find(|n| n["name"].as_str() == Some(name));
    node.unwrap()["quic"].as_str().unwrap().parse().unwrap()
}

/// A connection to b as node a, past the hellos.
struct Rogue {
    conn: quinn::Connection,
    control: quinn::SendStream,
    _endpoint: quinn::Endpoint,
    _recv: quinn::RecvStream,
}

impl Rogue {
    async fn connect(cluster: &Cluster) -> Rogue {
        let config = &cluster.nodes[0].config;
        let dir = config.parent().unwrap();
        let identity = Identity::load(
            &dir.join("ca.pem"),
            &dir.join("node.pem"),
            &dir.join("node.key"),
        )
        .unwrap();
        let endpoint = identity.endpoint("127.0.0.1:0".parse().unwrap()).unwrap();
        let b = quic_of(config, "b");
        let conn = within(PATIENCE, "b accepts a", async {
            endpoint
                .connect_with(identity.client_config().unwrap(), b, "b")
                .unwrap()
                .await
                .unwrap()
        })
        .await;
        let (mut control, mut recv) = conn.open_bi().await.unwrap();
        let hello = PeerMsg::Hello {
            cluster: cluster_value(config, "id"),
            node: "a".into(),
            proto: PEER_PROTO,
            boot: "rogue".into(),
            upto: None,
        };
        frame::write(&mut control, &hello).await.unwrap();
        let theirs: Option<PeerMsg> = frame::read(&mut recv).await.unwrap();
        assert!(matches!(theirs, Some(PeerMsg::Hello { .. })), "{theirs:?}");
        Rogue {
            conn,
            control,
            _endpoint: endpoint,
            _recv: recv,
        }
    }
}

/// b echoes keystrokes in its own session.
async fn echo_on_b(cluster: &Cluster, session: &str, rounds: usize) {
    if let Err(what) = crate::echo_at(&cluster.target(1), session, rounds).await {
        panic!("{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_with_a_valid_certificate_cannot_break_or_bloat_a_node() {
    let mut cluster = Cluster::start(&["a", "b"]);
    let session = create(&cluster, 1, "b", "exec cat").await;
    echo_on_b(&cluster, &session, 1).await;
    // a stops; the test speaks for it with its certificate and key.
    cluster.kill_node(0);
    let b = cluster.pid(1);

    // Garbage on the control stream: b ends that link.
    let mut rogue = Rogue::connect(&cluster).await;
    rogue
        .control
        .write_all(&100u32.to_be_bytes())
        .await
        .unwrap();
    rogue.control.write_all(&[0xc1; 100]).await.unwrap();
    let closed = within(
        PATIENCE,
        "b closes a link that sent garbage",
        rogue.conn.closed(),
    )
    .await;
    println!("garbage: b closed the link ({closed})");
    echo_on_b(&cluster, &session, 1).await;

    let before = rss_kib(b) as f64 / 1024.0;
    let watch = RssWatch::start(b);
    // A flood of output for no session on the data stream, 10 s or 2 GB.
    let rogue = Rogue::connect(&cluster).await;
    let flood = {
        let conn = rogue.conn.clone();
        tokio::spawn(async move {
            let mut data = conn.open_uni().await.unwrap();
            data.write_all(&[0]).await.unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            let chunk = bytes::Bytes::from(vec![b'x'; 60 << 10]);
            let mut sent = 0u64;
            for seq in 1..=(2u64 << 30) / (60 << 10) {
                let msg = DataMsg::Output {
                    session: "no-such-session".into(),
                    seq,
                    data: chunk.clone(),
                };
                let bytes = frame::encode(&msg).unwrap();
                match tokio::time::timeout_at(deadline, data.write_all(&bytes)).await {
                    Ok(Ok(())) => sent += bytes.len() as u64,
                    _ => break,
                }
            }
            sent
        })
    };
    // Meanwhile, replies begun and never finished: each stream sends a
    // frame's length (the bound) and all but its last byte.
    let mut held = Vec::new();
    for _ in 0..32 {
        let Ok(Ok(mut s)) =
            tokio::time::timeout(Duration::from_secs(2), rogue.conn.open_uni()).await
        else {
            break; // b allows no more streams at once: the bound.
        };
        let len = frame::MAX_FRAME as u32;
        s.write_all(&[1]).await.unwrap();
        s.write_all(&len.to_be_bytes()).await.unwrap();
        let body = vec![0x90u8; len as usize - 1];
        for part in body.chunks(1 << 20) {
            if tokio::time::timeout(Duration::from_secs(2), s.write_all(part))
                .await
                .is_err()
            {
                break; // b reads no more of it: flow control holds it.
            }
        }
        held.push(s);
    }
    echo_on_b(&cluster, &session, 3).await;
    let sent = flood.await.unwrap();
    let peak = watch.peak_mib();
    println!(
        "peer flood: {:.0} MB of output frames for no session, {} unfinished replies \
         open; b's RSS {before:.1} MiB before, {peak:.1} MiB at the peak",
        sent as f64 / 1e6,
        held.len()
    );
    assert!(
        peak - before < PEER_BOUND_MIB,
        "the peer grew b by {:.1} MiB (bound {PEER_BOUND_MIB})",
        peak - before
    );
    drop(held);
    drop(rogue);
    echo_on_b(&cluster, &session, 1).await;
}
