//! The socket-death matrix: the kernel closes a client that stopped reading
//! (TCP_USER_TIMEOUT) while everyone else flows; silence reaps only a
//! connection that holds nothing; a node stalled by SIGSTOP or by memory
//! pressure blames no client for its own stall.

mod common;

use std::time::{Duration, Instant};

use common::wire::{self, Got};
use common::*;
use termesh_transport::{ClientMsg, ServerMsg};

/// A session that prints a numbered line every 20 ms, forever.
const TICKER: &[&str] = &[
    "sh",
    "-c",
    "i=0; while :; do i=$((i+1)); echo tick $i; sleep 0.02; done",
];

async fn wait_metric(url: &str, name: &str, what: &str, cond: impl Fn(f64) -> bool) -> f64 {
    within(PATIENCE, what, async {
        loop {
            let value = wire::metric(url, name).await;
            if cond(value) {
                return value;
            }
            poll_pause().await;
        }
    })
    .await
}

fn subscribe_msg(session: &str, window: u64) -> ClientMsg {
    ClientMsg::Subscribe {
        id: 1,
        session: session.to_string(),
        from_seq: None,
        window: Some(window),
        scrollback: None,
    }
}

/// (a) A client that stops reading while output is in flight freezes its
/// connection actor; the kernel closes it after TCP_USER_TIMEOUT, and
/// meanwhile the session, its other viewer and other sessions flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stopped_reading_is_closed_by_the_kernel_and_hurts_nobody() {
    let node = TestNode::start_with(|c| c.http.user_timeout = Duration::from_secs(3));
    let url = node.url();
    let flood = node.create(&["yes", "termesh flood line"]).await.id;
    let echo = node.create(&["cat"]).await.id;

    // The stuck client: a tiny receive buffer, the largest window, and it
    // never reads again after subscribing.
    let mut stuck = wire::connect(node.node.addr(), VIEWER, Some(4096)).await;
    let _welcome = wire::read_msg(&mut stuck).await;
    wire::send(&mut stuck, &subscribe_msg(&flood, 16 << 20)).await;
    wait_metric(&url, "termesh_subscribers", "the stuck subscription", |v| {
        v >= 1.0
    })
    .await;

    // A healthy viewer of the same flood, and a typist on another session.
    let mut viewer = node.client(VIEWER).await;
    subscribe(&mut viewer, &flood, None, 1 << 20).await.unwrap();
    let mut typist = node.client(OPERATOR).await;
    subscribe_fresh(&mut typist, &echo, 1 << 20).await;
    wait_metric(&url, "termesh_connections", "three connections", |v| {
        v == 3.0
    })
    .await;

    let started = Instant::now();
    let mut stream = Stream::new(1 << 20);
    let mut typed = 0u32;
    let mut echoed = String::new();
    // Until the node has closed the stuck client: the viewer keeps
    // reading the flood and the typist keeps getting echoes.
    let closed_after = within(PATIENCE, "the kernel to close the stuck client", async {
        loop {
            let before = stream.data.len();
            pump_until(&mut viewer, &flood, &mut stream, true, |s| {
                s.data.len() >= before + (256 << 10)
            })
            .await
            .unwrap();
            typed += 1;
            let word = format!("key{typed}.");
            typist
                .send(&ClientMsg::Input {
                    session: echo.clone(),
                    data: format!("{word}\n").into_bytes(),
                })
                .await
                .unwrap();
            while !echoed.contains(&word) {
                if let ServerMsg::Output { data, .. } = next(&mut typist).await {
                    echoed.push_str(&String::from_utf8_lossy(&data));
                }
            }
            if wire::metric(&url, "termesh_connections").await == 2.0 {
                return started.elapsed();
            }
        }
    })
    .await;
    assert!(
        closed_after >= Duration::from_secs(3),
        "closed after {closed_after:?}, before the user timeout"
    );
    assert!(typed >= 2, "echoes kept coming while the client was stuck");
    // Nothing the stuck client held is left.
    wait_metric(
        &url,
        "termesh_subscribers",
        "the stuck subscription to go",
        |v| v == 2.0,
    )
    .await;
    let info = node.info(&flood).await.unwrap();
    assert_eq!(info.viewers, 1);
    assert_eq!(wire::metric(&url, "termesh_reaps_total").await, 0.0);
    // The healthy viewer still flows.
    let before = stream.data.len();
    pump_until(&mut viewer, &flood, &mut stream, true, |s| {
        s.data.len() >= before + (1 << 20)
    })
    .await
    .unwrap();
}

/// (b) Silence closes a connection that holds no subscription, and only
/// after the reap timeout; a silent subscribed one is marked stale and kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silence_reaps_only_after_the_timeout_and_never_a_subscriber() {
    let reap_after = Duration::from_millis(1500);
    let node = TestNode::start_with(|c| {
        c.ws.ping_interval = Duration::from_millis(100);
        c.ws.stale_after = Duration::from_millis(600);
        c.ws.reap_after = reap_after;
    });
    let url = node.url();
    let session = node.create(&["sleep", "1000"]).await.id;

    // Silent from here on, but subscribed.
    let mut subscriber = wire::connect(node.node.addr(), VIEWER, None).await;
    let _welcome = wire::read_msg(&mut subscriber).await;
    wire::send(&mut subscriber, &subscribe_msg(&session, 1 << 20)).await;
    assert!(matches!(
        wire::read_msg(&mut subscriber).await,
        ServerMsg::Subscribed { .. }
    ));
    assert!(matches!(
        wire::read_msg(&mut subscriber).await,
        ServerMsg::Snapshot { .. }
    ));

    // Two idle clients, one after the other, each silent from its start.
    for round in 1..=2 {
        let opened = Instant::now();
        let mut idle = wire::connect(node.node.addr(), VIEWER, None).await;
        wait_metric(&url, "termesh_reaps_total", "the idle client's reap", |v| {
            v >= round as f64
        })
        .await;
        let lived = opened.elapsed();
        assert!(
            lived >= reap_after,
            "reaped after {lived:?}, before the reap timeout"
        );
        loop {
            match wire::read(&mut idle).await {
                Got::Closed(_) => break,
                Got::Msg(_) | Got::Ping => {}
            }
        }
    }
    // The subscriber was silent longer than both idle clients: stale, kept.
    assert_eq!(wire::metric(&url, "termesh_reaps_total").await, 2.0);
    assert!(wire::metric(&url, "termesh_stale_connections").await >= 1.0);
    wire::send(&mut subscriber, &ClientMsg::Ping { nonce: None }).await;
    loop {
        match wire::read(&mut subscriber).await {
            Got::Msg(ServerMsg::Pong { .. }) => break,
            Got::Msg(_) | Got::Ping => {}
            Got::Closed(why) => panic!("the subscriber was closed: {why}"),
        }
    }
    wait_metric(&url, "termesh_stale_connections", "recovery", |v| v == 0.0).await;
}

/// (c) The whole node stopped for longer than the stale and reap timeouts,
/// then continued: nobody is marked stale, nobody is reaped, and every
/// stream continues without a hole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_blames_no_client_for_its_own_stall() {
    let node = common::binary::BinaryNode::start(
        "[ws]\nping_interval = \"200ms\"\nstale_after = \"1s\"\nreap_after = \"2s\"\n\
         [watchdog]\ntick = \"50ms\"\n",
    );
    let url = node.url.clone();
    let ticker = {
        let mut c = termesh_node::client::Client::connect(&node.target(OPERATOR))
            .await
            .unwrap();
        let reply = c
            .request(|id| ClientMsg::Create {
                id,
                req: termesh_transport::CreateRequest {
                    command: Some(TICKER.iter().map(|s| s.to_string()).collect()),
                    ..Default::default()
                },
            })
            .await
            .unwrap();
        c.close().await;
        match reply {
            ServerMsg::Created { session, .. } => session.id,
            other => panic!("{other:?}"),
        }
    };
    let mut viewer = termesh_node::client::Client::connect(&node.target(VIEWER))
        .await
        .unwrap();
    subscribe(&mut viewer, &ticker, None, 1 << 20)
        .await
        .unwrap();
    // An idle connection that answers every ping (it reads all the time).
    let mut idle = wire::connect(node.addr, VIEWER, None).await;
    let pings = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let idle_task = tokio::spawn({
        let pings = pings.clone();
        async move {
            loop {
                match wire::read(&mut idle).await {
                    Got::Ping => {
                        pings.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    Got::Msg(_) => {}
                    Got::Closed(why) => return why,
                }
            }
        }
    });
    let mut stream = Stream::new(1 << 20);
    pump_until(&mut viewer, &ticker, &mut stream, true, |s| {
        s.last_seq >= 20
    })
    .await
    .unwrap();

    nix::sys::signal::kill(node.pid(), nix::sys::signal::Signal::SIGSTOP).unwrap();
    // The length of the stall is the event under test: twice the reap
    // timeout, with the node unable to run at all.
    std::thread::sleep(Duration::from_secs(4));
    nix::sys::signal::kill(node.pid(), nix::sys::signal::Signal::SIGCONT).unwrap();
    let resumed = pings.load(std::sync::atomic::Ordering::SeqCst);

    // Every ping comes from the tick that also judges liveness: three of
    // them after the stall mean three judgements were made.
    within(PATIENCE, "three liveness ticks after the stall", async {
        while pings.load(std::sync::atomic::Ordering::SeqCst) < resumed + 3 {
            assert!(
                !idle_task.is_finished(),
                "the idle client was closed after the stall; node log:\n{}",
                node.log()
            );
            let next = stream.last_seq + 1;
            pump_until(&mut viewer, &ticker, &mut stream, true, |s| {
                s.last_seq >= next
            })
            .await
            .unwrap();
        }
    })
    .await;
    let target = stream.last_seq + 20;
    pump_until(&mut viewer, &ticker, &mut stream, true, |s| {
        s.last_seq >= target
    })
    .await
    .unwrap();
    let m = wire::metrics(&url).await;
    assert!(
        m["termesh_host_stall_seconds_total"] >= 3.5,
        "the stall was credited: {m:?}"
    );
    assert_eq!(m["termesh_stale_episodes_total"], 0.0, "{m:?}");
    assert_eq!(m["termesh_reaps_total"], 0.0, "{m:?}");
    assert_eq!(m["termesh_connections"], 2.0, "{m:?}");
    assert!(!idle_task.is_finished(), "the idle client was closed");
    assert_eq!(stream.resyncs, 0);
    let text = String::from_utf8_lossy(&stream.data);
    let ticks: Vec<u64> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("tick ")?.parse().ok())
        .collect();
    assert!(
        ticks.windows(2).all(|w| w[1] == w[0] + 1),
        "the program's own numbering has no hole either"
    );
    idle_task.abort();
}

/// (d) Memory pressure (PSI `some total` growing) counts as the node's own
/// stall: a silent client is not stale while it grows, and is once it stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_pressure_is_not_the_clients_silence() {
    let psi = tempfile::NamedTempFile::new().unwrap();
    let psi_path = psi.path().to_path_buf();
    let write_psi = |total_us: u64| {
        std::fs::write(
            &psi_path,
            format!(
                "some avg10=90.00 avg60=50.00 avg300=10.00 total={total_us}\n\
                 full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
            ),
        )
        .unwrap();
    };
    write_psi(1_000_000);
    let stale_after = Duration::from_secs(1);
    let node = TestNode::start_with(|c| {
        c.ws.ping_interval = Duration::from_millis(100);
        c.ws.stale_after = stale_after;
        c.watchdog.tick = Duration::from_millis(50);
        c.watchdog.psi_path = Some(psi.path().to_path_buf());
    });
    let url = node.url();
    let session = node.create(&["sleep", "1000"]).await.id;
    let mut silent = wire::connect(node.node.addr(), VIEWER, None).await;
    let _welcome = wire::read_msg(&mut silent).await;
    wire::send(&mut silent, &subscribe_msg(&session, 1 << 20)).await;
    wait_metric(&url, "termesh_subscribers", "the subscription", |v| {
        v == 1.0
    })
    .await;

    // Pressure that stalls the host all the time, for three stale bounds:
    // the file is this test's simulated kernel, paced by real time.
    let start = Instant::now();
    let mut total = 1_000_000u64;
    while start.elapsed() < 3 * stale_after {
        total += 20_000;
        write_psi(total);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let m = wire::metrics(&url).await;
    assert_eq!(m["termesh_stale_episodes_total"], 0.0, "{m:?}");
    assert!(m["termesh_host_stall_seconds_total"] >= 2.0, "{m:?}");
    // The pressure ends: now the silence is the client's.
    wait_metric(
        &url,
        "termesh_stale_episodes_total",
        "the stale mark",
        |v| v == 1.0,
    )
    .await;
    assert_eq!(wire::metric(&url, "termesh_stale_connections").await, 1.0);
}

/// The node's side of its TCP connection to `client`, from
/// `/proc/net/tcp`: its socket inode (0 while it waits to be accepted).
fn node_side_inode(node: std::net::SocketAddr, client: std::net::SocketAddr) -> Option<u64> {
    let hex = |a: std::net::SocketAddr| match a {
        std::net::SocketAddr::V4(v4) => format!(
            "{:08X}:{:04X}",
            u32::from_ne_bytes(v4.ip().octets()),
            v4.port()
        ),
        std::net::SocketAddr::V6(_) => unreachable!("the test node listens on IPv4"),
    };
    let (local, remote) = (hex(node), hex(client));
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(1) == Some(&local.as_str()) && f.get(2) == Some(&remote.as_str()))
            .then(|| f.get(9)?.parse().ok())
            .flatten()
    })
}

/// (e) A request head that arrived while the node itself was stopped is
/// answered: the node was slow, not the client. The node has accepted the
/// connection (its head timer runs), is stopped for three head timeouts,
/// and the whole head comes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_that_came_while_the_node_was_stopped_is_answered() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = common::binary::BinaryNode::start(
        "[http]\nrequest_head_timeout = \"1s\"\n[watchdog]\ntick = \"50ms\"\n",
    );
    let mut tcp = tokio::net::TcpStream::connect(node.addr).await.unwrap();
    let me = tcp.local_addr().unwrap();
    within(PATIENCE, "the node accepting the connection", async {
        while node_side_inode(node.addr, me).unwrap_or(0) == 0 {
            poll_pause().await;
        }
    })
    .await;
    nix::sys::signal::kill(node.pid(), nix::sys::signal::Signal::SIGSTOP).unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // The stall is the event under test: three head timeouts.
    std::thread::sleep(Duration::from_secs(3));
    nix::sys::signal::kill(node.pid(), nix::sys::signal::Signal::SIGCONT).unwrap();
    let mut answer = Vec::new();
    within(PATIENCE, "the answer", tcp.read_to_end(&mut answer))
        .await
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "a head sent in time was refused for the node's own stall: {answer:?}"
    );
}

/// (f) A head that does not come is still refused in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_that_never_ends_is_refused_in_time() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = common::binary::BinaryNode::start("[http]\nrequest_head_timeout = \"1s\"\n");
    let mut tcp = tokio::net::TcpStream::connect(node.addr).await.unwrap();
    let opened = Instant::now();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    let mut answer = Vec::new();
    within(PATIENCE, "the refusal", tcp.read_to_end(&mut answer))
        .await
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(
        opened.elapsed() < Duration::from_secs(10),
        "refused only after {:?}",
        opened.elapsed()
    );
}
