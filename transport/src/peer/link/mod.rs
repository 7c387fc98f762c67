//! The mesh: the node's QUIC endpoint on a current-thread tokio runtime
//! the node gives (its peer actors' thread), one link task per configured
//! peer, bridged to that peer's actor by a `LinkSink` (in: what the link
//! says) and channels (out). It knows nothing of actors: the node gives
//! each peer's sink. Of each pair the node with the lower name dials and
//! the other accepts; after the hellos both sides run the link alike. A link that fails is dialed again with jittered
//! backoff. Peers join and leave while it runs (`Mesh::add_peer`,
//! `Mesh::remove_peer`: a config reload), each link on its own.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::peer::accept::{Acceptor, LogLimit};
use crate::peer::stats::LinkStats;
use crate::peer::tls::{key_sha256, peer_chain, Identity};
use crate::peer::{DataMsg, PeerMsg};
use tokio::sync::mpsc;

mod serve;
use serve::serve;

/// What a link tells its peer's actor.
#[derive(Debug)]
pub enum LinkEvent {
    /// The hellos are exchanged: `out` sends on the control stream, `data`
    /// on this side's data stream.
    Up {
        out: mpsc::UnboundedSender<PeerMsg>,
        data: mpsc::UnboundedSender<DataMsg>,
        /// Interactive sessions' output, ahead of `data`'s (a peer of
        /// protocol 2 has none).
        fast: Option<mpsc::UnboundedSender<DataMsg>>,
        /// Large replies, each on a stream of its own.
        replies: mpsc::UnboundedSender<PeerMsg>,
        boot: String,
        /// The revision of the peer protocol the link speaks (the older
        /// of the two sides').
        revision: u32,
    },
    Msg(Box<PeerMsg>),
    Data(DataMsg),
    Down {
        reason: String,
    },
}

/// Where a link's events go (the node hands each to its peer's actor).
#[derive(Clone)]
pub struct LinkSink(std::sync::Arc<dyn Fn(LinkEvent) + Send + Sync>);

impl LinkSink {
    pub fn new(f: impl Fn(LinkEvent) + Send + Sync + 'static) -> Self {
        LinkSink(std::sync::Arc::new(f))
    }

    pub fn send(&self, event: LinkEvent) {
        (self.0)(event)
    }
}

/// How the mesh is set up.
#[derive(Clone)]
pub struct MeshConfig {
    pub me: String,
    pub cluster: String,
    /// Changes at every start of this node.
    pub boot: String,
    pub listen: SocketAddr,
    pub identity: Identity,
}

/// A peer the mesh keeps a link to.
pub struct PeerSpec {
    pub name: String,
    pub addr: SocketAddr,
    /// The SHA-256 of the key its certificate must carry (lowercase hex;
    /// `None`: any key the cluster's CA signed for its name).
    pub key_sha256: Option<String>,
    pub sink: LinkSink,
    /// Where the link's byte counts go.
    pub stats: std::sync::Arc<LinkStats>,
}

/// How long the other side may take to open the control stream and say
/// hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
const FIRST_RETRY: Duration = Duration::from_millis(200);
const MAX_RETRY: Duration = Duration::from_secs(5);
/// A link that stayed up this long resets the backoff.
const HEALTHY: Duration = Duration::from_secs(10);
/// The first byte of every unidirectional stream says what it carries:
/// the sender's data stream (one per link), one reply, or the sender's
/// fast data stream (interactive sessions' output; one per link).
const DATA_STREAM: u8 = 0;
const REPLY_STREAM: u8 = 1;
const FAST_DATA_STREAM: u8 = 2;
use super::REPLY_STREAMS;
/// A refused incoming connection is logged at most this often per remote
/// address (a misconfigured peer dials again every few seconds).
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);
/// Remote addresses the refusal log remembers (bounded memory).
const REFUSAL_LOG_ADDRESSES: usize = 1024;

/// The running mesh; dropping it closes the endpoint and waits (bounded)
/// for its tasks to end.
pub struct Mesh {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: std::sync::mpsc::Receiver<()>,
    /// The thread running the mesh's tasks, once they started.
    thread: std::sync::Arc<std::sync::OnceLock<std::thread::ThreadId>>,
    control: mpsc::UnboundedSender<Change>,
}

/// How long dropping the mesh waits for its endpoint to close.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// A change of the peers the mesh links to, or of its certificates.
enum Change {
    Add(PeerSpec),
    Remove(String),
    Identity(Box<Identity>),
}

impl Mesh {
    /// Starts a link to a new peer (another with the same name goes first).
    pub fn add_peer(&self, peer: PeerSpec) {
        let _ = self.control.send(Change::Add(peer));
    }

    /// Ends the link to `name` and refuses its connections from now on.
    pub fn remove_peer(&self, name: &str) {
        let _ = self.control.send(Change::Remove(name.to_string()));
    }

    /// New certificates (a CA rotation): connections made from now on,
    /// both ways, are made and checked with them; the links up stay up.
    pub fn set_identity(&self, identity: Identity) {
        let _ = self.control.send(Change::Identity(Box::new(identity)));
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // On the mesh's own thread the tasks cannot end while this waits:
        // they end once that thread is free again.
        if self.thread.get() != Some(&std::thread::current().id()) {
            let _ = self.done.recv_timeout(STOP_WAIT);
        }
    }
}

/// Binds the endpoint (an error here is a start-up error) and starts the
/// links on `runtime`: a current-thread runtime the caller runs, so that
/// what handles the links' events (the node's peer actors) can share its
/// thread, and a message crosses no thread between the socket and them.
pub fn start(
    config: MeshConfig,
    peers: Vec<PeerSpec>,
    runtime: &tokio::runtime::Handle,
) -> anyhow::Result<Mesh> {
    let endpoint = {
        let _guard = runtime.enter();
        config.identity.endpoint(config.listen)?
    };
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let (control, changes) = mpsc::unbounded_channel();
    let (finished, done) = std::sync::mpsc::channel();
    let thread = std::sync::Arc::new(std::sync::OnceLock::new());
    let on = thread.clone();
    runtime.spawn(async move {
        let _ = on.set(std::thread::current().id());
        run(config, peers, endpoint.clone(), stopped, changes).await;
        endpoint.close(0u32.into(), b"node stopping");
        let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
        let _ = finished.send(());
    });
    Ok(Mesh {
        stop: Some(stop),
        done,
        thread,
        control,
    })
}

/// The peers incoming connections are taken from: every configured
/// name, and where the connections of those that dial this node go.
struct Members {
    names: Vec<String>,
    /// Each configured peer's address (their handshakes have slots kept).
    addrs: HashMap<String, std::net::IpAddr>,
    /// Each configured peer's pinned key, where the config pins one.
    pins: HashMap<String, String>,
    accepted: HashMap<String, mpsc::Sender<quinn::Connection>>,
    /// What a peer's certificate is checked against, and how dials are
    /// made.
    identity: Identity,
    client: quinn::ClientConfig,
}

type SharedMembers = std::sync::Arc<std::sync::Mutex<Members>>;

fn lock(members: &SharedMembers) -> std::sync::MutexGuard<'_, Members> {
    members.lock().unwrap_or_else(|p| p.into_inner())
}

/// The link task of each peer.
struct Links {
    config: MeshConfig,
    endpoint: quinn::Endpoint,
    members: SharedMembers,
    tasks: HashMap<String, tokio::task::AbortHandle>,
}

impl Links {
    /// Starts `peer`'s link (the lower name dials), replacing one of the
    /// same name.
    fn start(&mut self, peer: PeerSpec, tasks: &mut tokio::task::JoinSet<()>) {
        let name = peer.name.clone();
        let mut m = lock(&self.members);
        m.names.retain(|n| *n != name);
        m.names.push(name.clone());
        m.addrs.insert(name.clone(), peer.addr.ip());
        match &peer.key_sha256 {
            Some(pin) => m.pins.insert(name.clone(), pin.clone()),
            None => m.pins.remove(&name),
        };
        let handle = if peer.name.as_str() > self.config.me.as_str() {
            m.accepted.remove(&name);
            tasks.spawn(dial_loop(
                self.config.clone(),
                self.endpoint.clone(),
                self.members.clone(),
                peer,
            ))
        } else {
            let (tx, rx) = mpsc::channel(4);
            m.accepted.insert(name.clone(), tx);
            tasks.spawn(accept_loop(self.config.clone(), peer, rx))
        };
        if let Some(old) = self.tasks.insert(name, handle) {
            old.abort();
        }
    }

    /// Ends `name`'s link (its task goes, and its connection with it) and
    /// refuses its connections from now on.
    fn stop(&mut self, name: &str) {
        {
            let mut m = lock(&self.members);
            m.names.retain(|n| n != name);
            m.addrs.remove(name);
            m.pins.remove(name);
            m.accepted.remove(name);
        }
        if let Some(link) = self.tasks.remove(name) {
            link.abort();
        }
    }
}

async fn run(
    config: MeshConfig,
    peers: Vec<PeerSpec>,
    endpoint: quinn::Endpoint,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
    mut changes: mpsc::UnboundedReceiver<Change>,
) {
    let client = match config.identity.client_config() {
        Ok(client) => client,
        Err(e) => {
            tracing::error!("the mesh cannot dial: {e}");
            return;
        }
    };
    let members = SharedMembers::new(std::sync::Mutex::new(Members {
        names: Vec::new(),
        addrs: HashMap::new(),
        pins: HashMap::new(),
        accepted: HashMap::new(),
        identity: config.identity.clone(),
        client,
    }));
    let mut tasks = tokio::task::JoinSet::new();
    let mut links = Links {
        config: config.clone(),
        endpoint: endpoint.clone(),
        members: members.clone(),
        tasks: HashMap::new(),
    };
    for peer in peers {
        links.start(peer, &mut tasks);
    }
    tasks.spawn(incoming(endpoint.clone(), members.clone()));
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            change = changes.recv() => match change {
                Some(Change::Add(peer)) => {
                    tracing::info!(peer = %peer.name, addr = %peer.addr, "peer added");
                    links.start(peer, &mut tasks);
                }
                Some(Change::Remove(name)) => {
                    links.stop(&name);
                    tracing::info!(peer = %name, "peer removed: its link is closed");
                }
                Some(Change::Identity(identity)) => match identity.apply(&endpoint) {
                    Ok(client) => {
                        let mut m = lock(&members);
                        m.identity = *identity;
                        m.client = client;
                        tracing::info!("mesh certificates replaced: new links use them");
                    }
                    Err(e) => tracing::error!("mesh certificates not replaced: {e}"),
                },
                None => break,
            },
            // Finished tasks (aborted links) are collected as they end.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    tasks.shutdown().await;
}

/// Takes every incoming connection; hands it to the link of the node its
/// certificate names, if that node is one this node accepts from. Each
/// handshake runs beside the others with a time bound (`Acceptor`), so a
/// client that starts one and goes silent delays no peer. Refusals are
/// logged, at most once a minute per remote address.
async fn incoming(endpoint: quinn::Endpoint, members: SharedMembers) {
    let peers = members.clone();
    let mut acceptor =
        Acceptor::new(endpoint).with_peers(move |ip| lock(&peers).addrs.values().any(|a| *a == ip));
    let mut refusals = LogLimit::new(REFUSAL_LOG_EVERY, REFUSAL_LOG_ADDRESSES);
    let mut refused = |remote: SocketAddr, why: &dyn std::fmt::Display| {
        if let Some(left_out) = refusals.admit(remote.ip(), Instant::now()) {
            tracing::warn!(%remote, left_out, "refused a peer connection: {why}");
        }
    };
    while let Some((remote, result)) = acceptor.next().await {
        let conn = match result {
            Ok(conn) => conn,
            Err(e) => {
                refused(remote, &e);
                continue;
            }
        };
        let chain = peer_chain(&conn).unwrap_or_default();
        let (name, tx, pin) = {
            let m = lock(&members);
            let names: Vec<&str> = m.names.iter().map(String::as_str).collect();
            let name = m.identity.name_of(&chain, &names).map(str::to_string);
            let tx = name.as_ref().and_then(|n| m.accepted.get(n).cloned());
            let pin = name.as_ref().and_then(|n| m.pins.get(n).cloned());
            (name, tx, pin)
        };
        let Some(name) = name else {
            refused(remote, &"its certificate names no configured node");
            conn.close(1u32.into(), b"unknown node");
            continue;
        };
        // Before it reaches the link: a connection with the wrong key must
        // not replace the one that works.
        if let Err(why) = check_pin(&conn, &name, pin.as_deref()) {
            refused(remote, &why);
            continue;
        }
        match tx {
            Some(tx) => {
                let _ = tx.try_send(conn);
            }
            None => {
                tracing::warn!(peer = %name, %remote, "refused a dial from a node this node dials");
                conn.close(1u32.into(), b"the lower name dials");
            }
        }
    }
}

async fn dial_loop(
    config: MeshConfig,
    endpoint: quinn::Endpoint,
    members: SharedMembers,
    peer: PeerSpec,
) {
    let mut attempt = 0u32;
    loop {
        let started = Instant::now();
        let client = lock(&members).client.clone();
        let result = match endpoint.connect_with(client, peer.addr, &peer.name) {
            Ok(connecting) => match connecting.await {
                Ok(conn) => serve(&config, &peer, conn, true).await,
                Err(e) => Err(format!("cannot connect to {}: {e}", peer.addr)),
            },
            Err(e) => Err(format!("cannot dial {}: {e}", peer.addr)),
        };
        if let Err(reason) = result {
            peer.sink.send(LinkEvent::Down { reason });
        }
        if started.elapsed() >= HEALTHY {
            attempt = 0;
        }
        tokio::time::sleep(backoff(attempt)).await;
        attempt = attempt.saturating_add(1);
    }
}

/// Serves the connections the peer makes. A new one replaces the current
/// one at once: the peer dials again only when its old link is gone (it
/// restarted, or gave up on it), so waiting for this side to notice would
/// only delay the new link.
async fn accept_loop(
    config: MeshConfig,
    peer: PeerSpec,
    mut rx: mpsc::Receiver<quinn::Connection>,
) {
    let mut next = rx.recv().await;
    while let Some(conn) = next.take() {
        let replaced = tokio::select! {
            result = serve(&config, &peer, conn, false) => {
                if let Err(reason) = result {
                    peer.sink.send(LinkEvent::Down { reason });
                }
                None
            }
            newer = rx.recv() => Some(newer),
        };
        next = match replaced {
            // The current link's future is dropped: its connection closes.
            Some(newer) => {
                peer.sink.send(LinkEvent::Down {
                    reason: "the peer made a new connection".into(),
                });
                newer
            }
            None => rx.recv().await,
        };
    }
}

/// Refuses (and closes) `conn` when the config pins a key for `name` and
/// the certificate `conn` came with carries another.
fn check_pin(conn: &quinn::Connection, name: &str, pinned: Option<&str>) -> Result<(), String> {
    let Some(pinned) = pinned else {
        return Ok(());
    };
    let theirs =
        peer_chain(conn).and_then(|chain| chain.first().and_then(|c| key_sha256(c.as_ref())));
    if theirs.as_deref() == Some(pinned) {
        return Ok(());
    }
    conn.close(1u32.into(), b"not the pinned key");
    Err(format!(
        "its certificate's key (sha256 {}) is not the one the config pins for {name} \
         (key_sha256 {pinned}): a removed node, or one re-issued without updating the configs",
        theirs.as_deref().unwrap_or("unknown")
    ))
}

fn backoff(attempt: u32) -> Duration {
    let base = FIRST_RETRY
        .saturating_mul(1 << attempt.min(8))
        .min(MAX_RETRY);
    let half = base / 2;
    half + half.mul_f64(rand::random::<f64>())
}
