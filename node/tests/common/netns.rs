//! Separate hosts on one machine: network namespaces, each joined to this
//! (the root) namespace by a veth pair and to nothing else, torn down on
//! drop; and a UDP relay in the root namespace, the only path between
//! two hosts, that delays, drops or partitions what crosses it (the
//! kernel here has no `netem`, so the impairment is done in user space).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One namespace: `ip` inside it, `gateway` on the root side of its veth.
pub struct Host {
    pub ns: String,
    pub ip: Ipv4Addr,
    pub gateway: Ipv4Addr,
    root_veth: String,
}

impl Host {
    /// The command prefix that runs a program inside this host.
    pub fn exec(&self) -> Vec<String> {
        ["ip", "netns", "exec", &self.ns].map(String::from).to_vec()
    }
}

pub struct Hosts(pub Vec<Host>);

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Hosts {
    /// `n` hosts, or why this machine refuses them (not root, no
    /// iproute2, namespaces not allowed).
    pub fn create(n: usize) -> Result<Hosts, String> {
        let pid = std::process::id();
        // A /24 per host in a 10.x block of this process's own.
        let block = 100 + (pid % 100) as u8;
        let mut hosts = Hosts(Vec::new());
        for i in 0..n {
            let host = Host {
                ns: format!("tm{pid}h{i}"),
                ip: Ipv4Addr::new(10, block, i as u8 + 1, 2),
                gateway: Ipv4Addr::new(10, block, i as u8 + 1, 1),
                root_veth: format!("tm{pid}r{i}"),
            };
            let inner = format!("tm{pid}n{i}");
            ip(&["netns", "add", &host.ns])?;
            let (ns, root) = (host.ns.clone(), host.root_veth.clone());
            let (cidr, gateway) = (format!("{}/24", host.ip), format!("{}/24", host.gateway));
            hosts.0.push(host);
            ip(&["link", "add", &root, "type", "veth", "peer", "name", &inner])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["addr", "add", &gateway, "dev", &root])?;
            ip(&["link", "set", &root, "up"])?;
            let inside = |args: &[&str]| {
                let mut all = vec!["netns", "exec", &ns, "ip"];
                all.extend_from_slice(args);
                ip(&all)
            };
            inside(&["addr", "add", &cidr, "dev", &inner])?;
            inside(&["link", "set", &inner, "up"])?;
            inside(&["link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for host in &self.0 {
            let _ = ip(&["link", "del", &host.root_veth]);
            let _ = ip(&["netns", "del", &host.ns]);
        }
    }
}

#[derive(Default)]
struct Impairment {
    loss: f64,
    delay: Duration,
    partitioned: AtomicBool,
    passed: AtomicU64,
    dropped: AtomicU64,
}

/// A UDP relay: datagrams to `addr` go to `upstream` (sent from
/// `back_ip`), replies go back to whoever last sent to `addr`. Each way,
/// each datagram is delayed by `delay` (order kept) and dropped with
/// probability `loss`; while partitioned, every datagram is dropped.
pub struct UdpImpair {
    pub addr: SocketAddr,
    state: Arc<Impairment>,
    tasks: Vec<JoinHandle<()>>,
}

impl UdpImpair {
    pub async fn start(
        front_ip: Ipv4Addr,
        back_ip: Ipv4Addr,
        upstream: SocketAddr,
        delay: Duration,
        loss: f64,
    ) -> UdpImpair {
        let front = Arc::new(UdpSocket::bind((front_ip, 0)).await.expect("bind front"));
        let back = Arc::new(UdpSocket::bind((back_ip, 0)).await.expect("bind back"));
        back.connect(upstream).await.expect("connect upstream");
        let addr = front.local_addr().unwrap();
        let state = Arc::new(Impairment {
            loss,
            delay,
            ..Default::default()
        });
        let client: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let seed: u64 = rand::random();
        println!("relay {addr} -> {upstream}: delay {delay:?} each way, loss {loss}, seed {seed}");
        let (to_back, from_front) = mpsc::unbounded_channel();
        let (to_front, from_back) = mpsc::unbounded_channel();
        let tasks = vec![
            tokio::spawn(impair(
                front.clone(),
                state.clone(),
                seed,
                to_back,
                Some(client.clone()),
            )),
            tokio::spawn(impair(
                back.clone(),
                state.clone(),
                seed ^ 0x5555,
                to_front,
                None,
            )),
            tokio::spawn(deliver(from_front, move |d| {
                let back = back.clone();
                async move {
                    let _ = back.send(&d).await;
                }
            })),
            tokio::spawn(deliver(from_back, move |d| {
                let (front, client) = (front.clone(), *client.lock().unwrap());
                async move {
                    if let Some(to) = client {
                        let _ = front.send_to(&d, to).await;
                    }
                }
            })),
        ];
        UdpImpair { addr, state, tasks }
    }

    /// Drops everything both ways while `on`.
    pub fn partition(&self, on: bool) {
        self.state.partitioned.store(on, Ordering::SeqCst);
    }

    /// Datagrams passed and dropped so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.state.passed.load(Ordering::Relaxed),
            self.state.dropped.load(Ordering::Relaxed),
        )
    }
}

type Queue = mpsc::UnboundedSender<(Instant, Vec<u8>)>;

/// One direction's intake: each datagram `sock` receives is dropped (while
/// partitioned, or with the state's `loss` probability) or queued to leave
/// after its `delay`; `sender` remembers who sent last (where replies go).
async fn impair(
    sock: Arc<UdpSocket>,
    state: Arc<Impairment>,
    seed: u64,
    queue: Queue,
    sender: Option<Arc<Mutex<Option<SocketAddr>>>>,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, from) = match sock.recv_from(&mut buf).await {
            Ok(got) => got,
            // The upstream is not listening (yet, or any more: a node
            // killed and restarted): the ICMP that says so is no reason to
            // stop relaying.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
            Err(_) => return,
        };
        if let Some(sender) = &sender {
            *sender.lock().unwrap() = Some(from);
        }
        if state.partitioned.load(Ordering::SeqCst) || rng.gen_bool(state.loss) {
            state.dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        state.passed.fetch_add(1, Ordering::Relaxed);
        let _ = queue.send((Instant::now() + state.delay, buf[..n].to_vec()));
    }
}

/// Sends each queued datagram once its time has come, in order.
async fn deliver<F, Fut>(mut queue: mpsc::UnboundedReceiver<(Instant, Vec<u8>)>, send: F)
where
    F: Fn(Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    while let Some((at, data)) = queue.recv().await {
        // The delay is the impairment: the datagram is held until then.
        tokio::time::sleep_until(at).await;
        send(data).await;
    }
}

impl Drop for UdpImpair {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The address `ip:port` as a socket address.
pub fn at(ip: Ipv4Addr, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(ip), port)
}
