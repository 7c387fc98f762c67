//! The mesh port of real nodes against clients that are not peers: a
//! stream of handshakes that start and go silent delays no real peer's
//! link, and a certificate of another CA is logged by the node that
//! refuses it, once a minute per address however often it dials.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::cluster::Cluster;
use common::*;
use serde_json::Value;
use termesh_transport::peer::certs::Ca;
use termesh_transport::peer::tls::Identity;

fn nodes(cluster: &Cluster, i: usize) -> Vec<Value> {
    ureq::get(&format!("http://{}/api/v1/nodes", cluster.nodes[i].http))
        .set("authorization", &format!("Bearer {}", cluster.token))
        .timeout(Duration::from_secs(20))
        .call()
        .map(|r| r.into_json().unwrap())
        .unwrap_or_default()
}

fn state(list: &[Value], name: &str) -> String {
    list.iter()
        .find(|n| n["name"] == name)
        .map(|n| n["state"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

/// Waits, within `bound`, until node `i` sees `peer` up.
async fn wait_up(cluster: &Cluster, i: usize, peer: &str, bound: Duration) {
    let up = tokio::time::timeout(bound, async {
        loop {
            if state(&tokio::task::block_in_place(|| nodes(cluster, i)), peer) == "up" {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    if up.is_err() {
        panic!(
            "node {i} did not see {peer} up within {bound:?}; its log:\n{}\n{peer}'s log:\n{}",
            cluster.log(i),
            cluster.log(1 - i)
        );
    }
}

/// Node `i`'s QUIC address, as it reports it.
fn quic_of(cluster: &Cluster, i: usize) -> SocketAddr {
    let list = nodes(cluster, i);
    list.iter().find(|n| n["self"] == true).expect("itself")["quic"]
        .as_str()
        .expect("a QUIC address")
        .parse()
        .unwrap()
}

fn local(ip: &str) -> SocketAddr {
    format!("{ip}:0").parse().unwrap()
}

/// Sends `to` a real client's first flight (a QUIC Initial with a TLS
/// ClientHello naming the mesh's ALPN) from a socket that answers
/// nothing after; the stall lasts as long as the socket.
async fn stall(to: SocketAddr) -> tokio::net::UdpSocket {
    let capture = tokio::net::UdpSocket::bind(local("127.0.0.1"))
        .await
        .unwrap();
    let ca = Ca::new("x").unwrap();
    let issued = ca.issue("z").unwrap();
    let client = Identity::from_pem(&ca.pem().cert_pem, &issued.cert_pem, &issued.key_pem)
        .unwrap()
        .endpoint(local("127.0.0.1"))
        .unwrap();
    let _connecting = client.connect(capture.local_addr().unwrap(), "b").unwrap();
    let mut initial = vec![0; 65536];
    let n = within(
        PATIENCE,
        "the client's first flight",
        capture.recv(&mut initial),
    )
    .await
    .unwrap();
    let silent = tokio::net::UdpSocket::bind(local("127.0.0.1"))
        .await
        .unwrap();
    silent.send_to(&initial[..n], to).await.unwrap();
    silent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_handshakes_on_the_mesh_port_delay_no_peer() {
    let mut cluster = Cluster::start(&["a", "b"]);
    wait_up(&cluster, 0, "b", PATIENCE).await;
    // b accepts a's dials (the lower name dials).
    let quic = quic_of(&cluster, 1);
    cluster.kill_node(0);
    // Handshakes that start and go silent arrive all along, each held by
    // QUIC for its 60 s idle timeout unless the node bounds it.
    let mut held = vec![stall(quic).await, stall(quic).await];
    let stop = Arc::new(AtomicBool::new(false));
    let stalling = tokio::spawn({
        let stop = stop.clone();
        async move {
            while !stop.load(Ordering::Relaxed) {
                held.push(stall(quic).await);
                // Paces the stream of stalls; nothing waits on this.
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            held.len()
        }
    });
    cluster.start_node(0);
    // Well under the idle timeout of the first silent handshake.
    wait_up(&cluster, 0, "b", Duration::from_secs(30)).await;
    wait_up(&cluster, 1, "a", Duration::from_secs(30)).await;
    // The silent ones are dropped at the handshake timeout, or refused
    // past the few one address may hold, and said so (one line a minute
    // per address).
    within(PATIENCE, "b to log a silent handshake it dropped", async {
        loop {
            let log = cluster.log(1);
            if log.contains("no handshake within")
                || log.contains("handshakes from this address already in progress")
            {
                break;
            }
            poll_pause().await;
        }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let stalls = stalling.await.unwrap();
    println!("{stalls} silent handshakes were sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_certificate_is_logged_where_it_is_refused_once_a_minute() {
    let cluster = Cluster::start(&["a", "b"]);
    let quic = quic_of(&cluster, 1);
    let ca_pem = std::fs::read_to_string(cluster.dir.path().join("cluster/ca.pem")).unwrap();
    // Trusts the cluster's CA, but presents another CA's certificate.
    let issued = Ca::new("other").unwrap().issue("a").unwrap();
    let foreign = Identity::from_pem(&ca_pem, &issued.cert_pem, &issued.key_pem).unwrap();
    let dial = |from: &str| {
        let endpoint = foreign.endpoint(local(from)).unwrap();
        async move {
            let result = within(PATIENCE, "the foreign dial to fail", async {
                let conn = endpoint.connect(quic, "b").unwrap().await?;
                Err::<(), _>(conn.closed().await)
            })
            .await;
            assert!(result.is_err(), "a foreign certificate got a link");
        }
    };
    for _ in 0..3 {
        dial("127.0.0.3").await;
    }
    // A dial from another address, after those: once its line is there,
    // the lines of the three are there too (one loop logs them in turn).
    dial("127.0.0.4").await;
    within(PATIENCE, "b to log the refusal", async {
        while !cluster.log(1).contains("remote=127.0.0.4") {
            poll_pause().await;
        }
    })
    .await;
    let log = cluster.log(1);
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("refused a peer connection") && l.contains("remote=127.0.0.3"))
        .collect();
    assert_eq!(lines.len(), 1, "one line for three refusals:\n{log}");
    assert!(
        lines[0].contains("certificate") || lines[0].contains("Issuer"),
        "the line says why: {}",
        lines[0]
    );
}
