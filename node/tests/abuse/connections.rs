//! Connections as an attacker opens them: request heads dribbled a line
//! at a time (slowloris), and a thousand idle WebSockets from a few
//! addresses, past the bound of one.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::WebSocketStream;

use crate::common::binary::{create, BinaryNode};

use crate::common::*;
use crate::{echo_works, rss_kib, RssWatch};

/// What 300 slowloris connections may add to the node's memory.
const SLOWLORIS_BOUND_MIB: f64 = 32.0;

/// 300 connections each send the start of an upgrade request and then a
/// header line every 300 ms, never finishing the head: the node closes
/// each once `http.request_head_timeout` (2 s here) has passed since it
/// connected, whatever it still trickles, and typing elsewhere echoes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_heads_that_never_finish_are_closed() {
    let node = BinaryNode::start("[http]\nrequest_head_timeout = \"2s\"\n");
    let typing = create(&node, "exec cat").await.id;
    echo_works(&node, &typing, 1).await;
    let before = rss_kib(node.child.id()) as f64 / 1024.0;
    let watch = RssWatch::start(node.child.id());
    const SLOW: usize = 300;
    let mut dribblers = Vec::new();
    for _ in 0..SLOW {
        let mut tcp = TcpStream::connect(node.addr).await.unwrap();
        dribblers.push(tokio::spawn(async move {
            let opened = Instant::now();
            let head = b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n";
            if tcp.write_all(head).await.is_err() {
                return Some(opened.elapsed());
            }
            // Bounded: 200 lines, 60 s; the node should close long before.
            for _ in 0..200 {
                let mut buf = [0u8; 512];
                match tokio::time::timeout(Duration::from_millis(300), tcp.read(&mut buf)).await {
                    // Closed (after a 408, or at once): what is measured.
                    Ok(Ok(0)) | Ok(Err(_)) => return Some(opened.elapsed()),
                    Ok(Ok(_)) => continue,
                    Err(_) => {}
                }
                if tcp.write_all(b"X-Slow: 1\r\n").await.is_err() {
                    return Some(opened.elapsed());
                }
            }
            None
        }));
    }
    echo_works(&node, &typing, 5).await;
    let mut longest = Duration::ZERO;
    for d in dribblers {
        let closed = d.await.unwrap().expect("a slow head outlived 60 s");
        longest = longest.max(closed);
    }
    let peak = watch.peak_mib();
    println!(
        "slowloris: {SLOW} connections closed, the last {:.1} s after it opened; \
         RSS {before:.1} MiB before, {peak:.1} MiB at the peak",
        longest.as_secs_f64()
    );
    assert!(
        peak - before < SLOWLORIS_BOUND_MIB,
        "slow heads grew the node by {:.1} MiB (bound {SLOWLORIS_BOUND_MIB})",
        peak - before
    );
    echo_works(&node, &typing, 1).await;
}

/// What 1,000 idle authenticated WebSockets may add to the node's memory.
const IDLE_BOUND_MIB: f64 = 32.0;

/// A WebSocket to `node` from `source`, with the viewer token.
async fn ws_from(
    node: &BinaryNode,
    source: Ipv4Addr,
) -> Result<WebSocketStream<TcpStream>, WsError> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((source, 0)))?;
    let tcp = socket.connect(node.addr).await?;
    let mut request = format!("ws://{}/ws", node.addr).into_client_request()?;
    request.headers_mut().insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {VIEWER}")).unwrap(),
    );
    Ok(tokio_tungstenite::client_async(request, tcp).await?.0)
}

/// 1,000 idle WebSockets from four addresses (250 each) are held, at a
/// bounded cost; one address gets `http.max_connections_per_address`
/// (256) and no more (503 `unavailable` naming the bound), while the
/// others still connect; every place comes back when its socket closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_connections_are_held_and_one_address_is_bounded() {
    // The test process holds a socket per connection too.
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    let node = BinaryNode::start("");
    let typing = create(&node, "exec cat").await.id;
    echo_works(&node, &typing, 1).await;
    let before = rss_kib(node.child.id()) as f64 / 1024.0;
    // Not 127.0.0.1: the typing client connects from there.
    let sources: Vec<Ipv4Addr> = (2..=5).map(|i| Ipv4Addr::new(127, 0, 0, i)).collect();
    let mut held = Vec::new();
    within(PATIENCE, "1,000 WebSockets open", async {
        for source in &sources {
            for _ in 0..250 {
                held.push(ws_from(&node, *source).await.unwrap());
            }
        }
    })
    .await;
    let idle = rss_kib(node.child.id()) as f64 / 1024.0;
    // One address takes its last six places, then is refused.
    for _ in 0..6 {
        held.push(ws_from(&node, sources[0]).await.unwrap());
    }
    match ws_from(&node, sources[0]).await {
        Err(WsError::Http(response)) => {
            assert_eq!(response.status(), 503);
            let body = String::from_utf8_lossy(response.body().as_deref().unwrap_or_default())
                .into_owned();
            assert!(body.contains("unavailable"), "{body}");
            assert!(body.contains("max_connections_per_address"), "{body}");
        }
        Ok(_) => panic!("a 257th WebSocket from one address was accepted"),
        Err(e) => panic!("{e}"),
    }
    // Another address is not affected, and typing echoes.
    held.push(ws_from(&node, sources[1]).await.unwrap());
    echo_works(&node, &typing, 3).await;
    println!(
        "idle connections: {} WebSockets open, RSS {before:.1} MiB before, {idle:.1} MiB \
         with 1,000 ({:.1} KiB each)",
        held.len(),
        (idle - before) * 1024.0 / 1000.0
    );
    assert!(
        idle - before < IDLE_BOUND_MIB,
        "1,000 idle connections grew the node by {:.1} MiB (bound {IDLE_BOUND_MIB})",
        idle - before
    );
    // Closing gives the places back (the node learns of each close).
    for mut ws in held.drain(..) {
        let _ = ws.close(None).await;
    }
    within(PATIENCE, "a place for the first address again", async {
        loop {
            match ws_from(&node, sources[0]).await {
                Ok(ws) => return drop(ws),
                Err(WsError::Http(r)) if r.status() == 503 => poll_pause().await,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    echo_works(&node, &typing, 1).await;
}

/// With `http.max_connections` open, the node takes no more until one
/// closes: a further upgrade waits (in the kernel's backlog) and is
/// served once a place is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_node_wide_bound_a_connection_waits_for_a_place() {
    let node = BinaryNode::start("[http]\nmax_connections = 6\n");
    let source = Ipv4Addr::new(127, 0, 0, 2);
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(ws_from(&node, source).await.unwrap());
    }
    let target = node.target(VIEWER);
    let waiting = tokio::spawn(async move { termesh_node::client::Client::connect(&target).await });
    // The kernel completed it and holds it for the node, which does not
    // take it while six are open.
    within(
        PATIENCE,
        "a seventh connection in the accept queue",
        async {
            while accept_queue(node.addr) < 1 {
                poll_pause().await;
            }
        },
    )
    .await;
    assert!(!waiting.is_finished(), "a seventh connection was served");
    held.pop().unwrap().close(None).await.unwrap();
    let client = within(PATIENCE, "the seventh served once one closed", waiting)
        .await
        .unwrap()
        .unwrap();
    client.close().await;
}

/// Connections the kernel completed that the node has not accepted yet on
/// its listener at `addr` (a listening socket's `rx_queue` in
/// /proc/net/tcp).
fn accept_queue(addr: SocketAddr) -> u32 {
    let SocketAddr::V4(v4) = addr else { return 0 };
    let local = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(v4.ip().octets()),
        v4.port()
    );
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 4 && f[1] == local && f[3] == "0A")
        .and_then(|f| {
            f[4].split(':')
                .nth(1)
                .and_then(|q| u32::from_str_radix(q, 16).ok())
        })
        .unwrap_or(0)
}

/// What 32 clients sending 16 MiB frames may add to the node's memory.
const OVERSIZED_BOUND_MIB: f64 = 32.0;

/// 32 connections at once each send a 16 MiB frame (the bound is 1 MiB):
/// each is closed with 1009 from the frame's header, before its payload
/// is read into memory, and typing elsewhere echoes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frames_close_their_connection_and_cost_nothing() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let node = BinaryNode::start("");
    let typing = create(&node, "exec cat").await.id;
    echo_works(&node, &typing, 1).await;
    let before = rss_kib(node.child.id()) as f64 / 1024.0;
    let watch = RssWatch::start(node.child.id());
    let mut senders = Vec::new();
    for _ in 0..32 {
        let ws = ws_from(&node, Ipv4Addr::new(127, 0, 0, 2)).await.unwrap();
        senders.push(tokio::spawn(async move {
            let (mut tx, mut rx) = ws.split();
            let big = Message::Binary(vec![0x90; 16 << 20]);
            // The node closes before it has read it all: the send may fail.
            let _ = tx.send(big).await;
            loop {
                match rx.next().await {
                    Some(Ok(Message::Close(Some(frame)))) => return Some(u16::from(frame.code)),
                    Some(Ok(_)) => continue,
                    _ => return None,
                }
            }
        }));
    }
    echo_works(&node, &typing, 3).await;
    let mut codes = Vec::new();
    for s in senders {
        codes.push(within(PATIENCE, "the close", s).await.unwrap());
    }
    let peak = watch.peak_mib();
    println!(
        "oversized frames: 32 of 16 MiB, closes {:?}; RSS {before:.1} MiB before, \
         {peak:.1} MiB at the peak",
        codes.iter().filter(|c| **c == Some(1009)).count()
    );
    assert!(codes.iter().all(|c| *c == Some(1009)), "{codes:?}");
    assert!(
        peak - before < OVERSIZED_BOUND_MIB,
        "oversized frames grew the node by {:.1} MiB (bound {OVERSIZED_BOUND_MIB})",
        peak - before
    );
    echo_works(&node, &typing, 1).await;
}

/// Past the head: a kept-alive connection cannot dribble a second request
/// (the node serves one request per connection, closing after it), and a
/// body dribbled slower than 10 s is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_request_or_a_body_cannot_be_dribbled() {
    let node = BinaryNode::start("");
    let mut tcp = TcpStream::connect(node.addr).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
        .await
        .unwrap();
    let answer = within(PATIENCE, "the first answer, then the close", async {
        let mut all = Vec::new();
        // Ends at EOF: the node closed after its one answer.
        let _ = tcp.read_to_end(&mut all).await;
        String::from_utf8_lossy(&all).into_owned()
    })
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let mut tcp = TcpStream::connect(node.addr).await.unwrap();
    let head = format!(
        "POST /api/v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPERATOR}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let dribble = async {
        // Bounded: 120 bytes, one every 500 ms; the node answers first.
        for _ in 0..120 {
            if tcp.write_all(b" ").await.is_err() {
                break;
            }
            let mut buf = [0u8; 1024];
            if let Ok(Ok(n)) =
                tokio::time::timeout(std::time::Duration::from_millis(500), tcp.read(&mut buf))
                    .await
            {
                return String::from_utf8_lossy(&buf[..n]).into_owned();
            }
        }
        String::new()
    };
    let answer = within(PATIENCE, "the slow body refused", dribble).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("did not arrive"), "{answer}");
}
