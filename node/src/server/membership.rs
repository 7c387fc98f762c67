//! The cluster's membership while the node runs: the peers of the config
//! it started with, then those a reload names (SIGHUP, `termesh config
//! reload`): a new peer gets its actor and its link at once; a removed
//! peer's link closes, its sessions leave the directory (watchers are
//! told) and its connections are refused from then on. New certificate
//! files (a CA rotation: `cluster rotate-ca`) are taken for the links made
//! from then on; the links up stay up. The other links, and the viewers on
//! them, are not touched. The cluster id and this node's own addresses
//! are read at start only. The certificate's expiry is shown (`/api/v1/nodes`,
//! `/metrics`) and warned of 30 days ahead.

use std::sync::{Arc, Mutex, MutexGuard};

use actix::Actor;
use termesh_actors::cluster::peer::{Forget, LinkStats, PeerActor, SetNode};
use termesh_actors::front::ops::NodeCtx;
use termesh_config::{ClusterConfig, Config, NodeEntry};
use termesh_transport::peer::link::{Mesh, MeshConfig, PeerSpec};

/// The node's membership, shared with the reload.
pub type Shared = Arc<Mutex<Option<Membership>>>;

pub fn lock(shared: &Shared) -> MutexGuard<'_, Option<Membership>> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct Membership {
    mesh: Mesh,
    me: String,
    /// The peers linked to now, as the config names them.
    peers: Vec<NodeEntry>,
    /// The peer actors run on an arbiter of their own: mesh work is
    /// neither delayed by nor counted as the main arbiter's stall (the
    /// watchdog's lateness), so the breaker judges the peer, not this
    /// node's load. The mesh's QUIC endpoint and links run on the same
    /// thread: a keystroke or a frame crosses no thread between the socket
    /// and its peer actor (two fewer wake-ups per node it passes).
    arbiter: actix::ArbiterHandle,
    /// The certificate files as last applied (their bytes), and when this
    /// node's certificate expires (unix seconds).
    files: Vec<u8>,
    pub not_after: Option<i64>,
}

/// A certificate this close to its end is warned of.
const EXPIRY_WARNING_DAYS: i64 = 30;

/// What a reload changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changed {
    pub added: Vec<String>,
    pub removed: Vec<String>,
}

impl Membership {
    /// Starts the mesh with the peers of `cluster`.
    pub fn start(config: &Config, cluster: &ClusterConfig, node: &NodeCtx) -> anyhow::Result<Self> {
        let me = config.node.name.clone();
        let identity =
            termesh_transport::peer::tls::Identity::load(&cluster.ca, &cluster.cert, &cluster.key)?;
        let not_after = identity.not_after();
        let files = certificate_files(cluster);
        let arbiter = actix::Arbiter::new().handle();
        let peers: Vec<NodeEntry> = cluster.peers(&me).cloned().collect();
        let specs = peers
            .iter()
            .map(|entry| peer(entry, &me, node, &arbiter))
            .collect();
        let mesh = MeshConfig {
            me: me.clone(),
            cluster: cluster.id.clone(),
            boot: uuid::Uuid::new_v4().simple().to_string(),
            listen: cluster.this(&me).quic,
            identity,
        };
        let mesh = termesh_transport::peer::link::start(mesh, specs, &runtime_of(&arbiter)?)?;
        tracing::info!(cluster = %cluster.id, quic = %cluster.this(&me).quic, peers = peers.len(), "peer mesh started");
        let membership = Membership {
            mesh,
            me,
            peers,
            arbiter,
            files,
            not_after,
        };
        membership.warn_expiry();
        warn_rotation(cluster);
        Ok(membership)
    }

    /// Takes new certificate files for the links made from now on, once
    /// they check out (this node's certificate under the CAs, for its
    /// name); answers whether they changed.
    pub fn apply_certificates(&mut self, cluster: &ClusterConfig) -> Result<bool, String> {
        let files = certificate_files(cluster);
        if files == self.files {
            return Ok(false);
        }
        let identity =
            termesh_transport::peer::tls::Identity::load(&cluster.ca, &cluster.cert, &cluster.key)
                .map_err(|e| e.to_string())?;
        identity.check_names(&self.me)?;
        self.not_after = identity.not_after();
        self.mesh.set_identity(identity);
        self.files = files;
        self.warn_expiry();
        warn_rotation(cluster);
        Ok(true)
    }

    /// Logs a warning when this node's certificate ends within 30 days.
    pub fn warn_expiry(&self) {
        let Some(not_after) = self.not_after else {
            return;
        };
        let now = termesh_actors::clock::now_ms() as i64 / 1000;
        let days = (not_after - now) / 86_400;
        if days < EXPIRY_WARNING_DAYS {
            tracing::warn!(
                days_left = days,
                "this node's mesh certificate expires in {days} days: rotate it (docs/operations.md, \"Rotate the cluster CA\")"
            );
        }
    }

    /// Links to the peers `cluster` names now: new ones are added, gone
    /// ones removed, one whose addresses changed is linked anew.
    pub fn apply(&mut self, cluster: &ClusterConfig, node: &NodeCtx) -> Changed {
        let wanted: Vec<NodeEntry> = cluster.peers(&self.me).cloned().collect();
        let mut changed = Changed::default();
        for old in &self.peers {
            if !wanted.contains(old) {
                self.mesh.remove_peer(&old.name);
                if let Some(handle) = node.mesh.peers.remove(&old.name) {
                    handle.addr.do_send(Forget);
                }
                changed.removed.push(old.name.clone());
            }
        }
        for new in &wanted {
            if !self.peers.contains(new) {
                self.mesh.add_peer(peer(new, &self.me, node, &self.arbiter));
                changed.added.push(new.name.clone());
            }
        }
        // A peer whose addresses changed is both: the same name, linked anew.
        changed.removed.retain(|r| !changed.added.contains(r));
        self.peers = wanted;
        changed
    }
}

/// Logs a warning while this node trusts more than one CA: a rotation is
/// under way, and the old CA (and whatever it signed: removed nodes'
/// certificates too) is trusted until it is finished.
fn warn_rotation(cluster: &ClusterConfig) {
    let text = std::fs::read_to_string(&cluster.ca).unwrap_or_default();
    let cas = text.matches("-----BEGIN CERTIFICATE-----").count();
    if cas > 1 {
        tracing::warn!(
            ca = %cluster.ca.display(),
            "this node trusts {cas} CAs: a CA rotation is under way, and the old CA stays trusted \
             until it is finished (`termesh cluster rotate-ca --dir CLUSTER --finish`, then reload \
             every node; docs/operations.md, \"Rotate the cluster CA\")"
        );
    }
}

/// The bytes of the CA, certificate and key files (what a reload compares).
fn certificate_files(cluster: &ClusterConfig) -> Vec<u8> {
    [&cluster.ca, &cluster.cert, &cluster.key]
        .iter()
        .flat_map(|path| std::fs::read(path).unwrap_or_default())
        .collect()
}

/// The tokio runtime under `arbiter` (the mesh runs its tasks there).
fn runtime_of(arbiter: &actix::ArbiterHandle) -> anyhow::Result<tokio::runtime::Handle> {
    let (tx, rx) = std::sync::mpsc::channel();
    arbiter.spawn_fn(move || {
        let _ = tx.send(tokio::runtime::Handle::current());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .map_err(|_| anyhow::anyhow!("the mesh's thread did not start"))
}

/// `entry`'s actor (registered with the node) and what the mesh needs to
/// link to it.
fn peer(entry: &NodeEntry, me: &str, node: &NodeCtx, arbiter: &actix::ArbiterHandle) -> PeerSpec {
    let stats = Arc::new(LinkStats::default());
    let actor = PeerActor::new(
        entry.name.clone(),
        me.to_string(),
        node.dir.clone(),
        node.registry.clone(),
        node.mesh.view.clone(),
        stats.clone(),
    );
    let routes = actor.mirror_routes();
    let actor = PeerActor::start_in_arbiter(arbiter, move |_| actor);
    actor.do_send(SetNode {
        answer: Arc::new(termesh_actors::front::request::TableAnswer(node.clone())),
        stall: node.stall.clone(),
    });
    node.mesh
        .peers
        .insert(entry.clone(), actor.clone(), stats.clone());
    PeerSpec {
        name: entry.name.clone(),
        addr: entry.quic,
        key_sha256: entry.key_sha256.clone(),
        sink: routes.sink(actor.recipient()),
        stats,
    }
}
