//! Incoming peer handshakes over loopback UDP with real certificates: a
//! client that sends a QUIC Initial and goes silent holds up no real peer;
//! past the limit a handshake is refused at once, and a silent one frees
//! its slot at the timeout; one address holds at most a few slots, and
//! past half of them a silent address is only sent a Retry.

use std::net::SocketAddr;
use std::time::Duration;

use termesh_transport::peer::accept::{AcceptError, Acceptor};
use termesh_transport::peer::certs::Ca;
use termesh_transport::peer::tls::Identity;

const PATIENCE: Duration = Duration::from_secs(30);

fn identity(ca: &Ca, name: &str) -> Identity {
    let issued = ca.issue(name).unwrap();
    Identity::from_pem(&ca.pem().cert_pem, &issued.cert_pem, &issued.key_pem).unwrap()
}

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Sends `to` a real client's first flight (a QUIC Initial carrying a TLS
/// ClientHello with our ALPN) from a socket that answers nothing after.
/// The returned socket must live as long as the stall should.
async fn stall(to: SocketAddr) -> tokio::net::UdpSocket {
    stall_from(to, "127.0.0.1").await
}

/// The same, from the address `ip`.
async fn stall_from(to: SocketAddr, ip: &str) -> tokio::net::UdpSocket {
    let capture = tokio::net::UdpSocket::bind(local()).await.unwrap();
    let client = identity(&Ca::new("x").unwrap(), "z")
        .endpoint(local())
        .unwrap();
    let _connecting = client.connect(capture.local_addr().unwrap(), "b").unwrap();
    let mut initial = vec![0; 65536];
    let n = tokio::time::timeout(PATIENCE, capture.recv(&mut initial))
        .await
        .expect("the client's first flight")
        .unwrap();
    let silent = tokio::net::UdpSocket::bind(format!("{ip}:0"))
        .await
        .unwrap();
    silent.send_to(&initial[..n], to).await.unwrap();
    silent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_handshake_holds_up_no_real_peer() {
    let ca = Ca::new("c1").unwrap();
    let server = identity(&ca, "b").endpoint(local()).unwrap();
    let addr = server.local_addr().unwrap();
    let mut acceptor = Acceptor::new(server);
    let mut stalls = Vec::new();
    for _ in 0..3 {
        stalls.push(stall(addr).await);
    }
    let client = identity(&ca, "a").endpoint(local()).unwrap();
    let me = client.local_addr().unwrap();
    let dialed = tokio::spawn(async move {
        let conn = client.connect(addr, "b").unwrap().await;
        (client, conn)
    });
    let (remote, result) = tokio::time::timeout(PATIENCE, acceptor.next())
        .await
        .expect("a handshake ended")
        .expect("the endpoint is open");
    assert_eq!(
        remote.port(),
        me.port(),
        "the real peer's handshake ends first"
    );
    result.expect("the real peer is accepted");
    let (_client, conn) = dialed.await.unwrap();
    conn.expect("the real peer connected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_limit_handshakes_are_refused_until_a_silent_one_times_out() {
    let ca = Ca::new("c1").unwrap();
    let server = identity(&ca, "b").endpoint(local()).unwrap();
    let addr = server.local_addr().unwrap();
    let timeout = Duration::from_secs(2);
    let mut acceptor = Acceptor::with_limits(server, timeout, 2);
    let _stalls = [stall(addr).await, stall(addr).await];
    let client = identity(&ca, "a").endpoint(local()).unwrap();
    let dial = |client: quinn::Endpoint| async move { client.connect(addr, "b").unwrap().await };
    let first = tokio::spawn(dial(client.clone()));
    let mut timed_out = 0;
    let mut busy = 0;
    // The real dial is refused while both slots are taken; the silent
    // ones time out; a second dial then gets in.
    let accepted = tokio::time::timeout(PATIENCE, async {
        let mut second = None;
        loop {
            let (_, result) = acceptor.next().await.expect("the endpoint is open");
            match result {
                Ok(conn) => return (conn, second),
                Err(AcceptError::Busy(2)) => busy += 1,
                Err(AcceptError::TimedOut(t)) => {
                    assert_eq!(t, timeout);
                    timed_out += 1;
                    if timed_out == 2 {
                        second = Some(tokio::spawn(dial(client.clone())));
                    }
                }
                Err(e) => panic!("unexpected: {e}"),
            }
        }
    })
    .await
    .expect("a real dial got in once the silent ones timed out");
    assert_eq!(busy, 1, "the dial past the limit was refused at once");
    assert_eq!(timed_out, 2);
    assert!(first.await.unwrap().is_err(), "the refused dial failed");
    let (_conn, second) = accepted;
    second
        .expect("dialed again")
        .await
        .unwrap()
        .expect("the second dial connected");
}

/// Polls the acceptor until `done`, failing on any handshake that ends.
async fn drive_until(acceptor: &mut Acceptor, what: &str, done: impl Fn(&Acceptor) -> bool) {
    tokio::time::timeout(PATIENCE, async {
        while !done(acceptor) {
            if let Ok(ended) =
                tokio::time::timeout(Duration::from_millis(20), acceptor.next()).await
            {
                panic!("unexpected: {:?}", ended.map(|(r, e)| (r, e.err())));
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_few_slots_and_past_half_a_silent_one_gets_only_a_retry() {
    let ca = Ca::new("c1").unwrap();
    let server = identity(&ca, "b").endpoint(local()).unwrap();
    let addr = server.local_addr().unwrap();
    let mut acceptor = Acceptor::with_limits(server, PATIENCE, 8);
    // Four silent handshakes from one address: four slots, half of them.
    let mut stalls = Vec::new();
    for k in 0..4 {
        stalls.push(stall(addr).await);
        drive_until(&mut acceptor, "a slot taken", |a| a.in_progress() == k + 1).await;
    }
    // A fifth from the same address is refused at once.
    stalls.push(stall(addr).await);
    let (_, refused) = tokio::time::timeout(PATIENCE, acceptor.next())
        .await
        .expect("refused at once")
        .unwrap();
    assert!(
        matches!(refused, Err(AcceptError::BusySource(4))),
        "{:?}",
        refused.err()
    );
    // Another silent address holds no slot: it is sent a Retry, which it
    // never answers.
    let other = stall_from(addr, "127.0.0.3").await;
    let mut retry = vec![0; 2048];
    tokio::time::timeout(PATIENCE, async {
        tokio::select! {
            got = other.recv(&mut retry) => got.unwrap(),
            ended = acceptor.next() => panic!("unexpected: {:?}", ended.map(|(r, e)| (r, e.err()))),
        }
    })
    .await
    .expect("a Retry for the silent address");
    assert_eq!(acceptor.in_progress(), 4);
    // A real peer from a third address answers the Retry and gets in.
    let client = identity(&ca, "a")
        .endpoint("127.0.0.2:0".parse().unwrap())
        .unwrap();
    let dialed = tokio::spawn(async move {
        let conn = client.connect(addr, "b").unwrap().await;
        (client, conn)
    });
    let (remote, result) = tokio::time::timeout(PATIENCE, acceptor.next())
        .await
        .expect("a handshake ended")
        .unwrap();
    assert_eq!(remote.ip().to_string(), "127.0.0.2");
    result.expect("the real peer is accepted");
    let (_client, conn) = dialed.await.unwrap();
    conn.expect("the real peer connected");
}
