//! The node server: binds the listener and reads the HTTPS files, then
//! runs a `Node` (`node.rs`) until it is told to stop; the state every
//! HTTP handler shares; a node on a thread of its own for tests.

mod agents;
mod auth;
mod body;
mod console;
mod data_dir;
mod head_watch;
mod hook;
mod listener;
mod membership;
mod node;
mod nodes;
mod process;
mod reload;
mod rest;
pub mod runtime_file;
mod storage;
mod stored;
mod streams;
pub mod url_file;
mod ws;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use process::{raise_fd_limit, settled, wait_for_stop, StopSignals};
use termesh_actors::front::connection::Connections;
use termesh_actors::front::ops::NodeCtx;
use termesh_config::{Config, Role, TokenEntry};
use tokio::sync::oneshot;

pub use auth::presented_token;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Shared by every HTTP handler.
#[derive(Clone)]
pub struct AppState {
    pub node: NodeCtx,
    pub connections: Connections,
    /// Where this node serves HTTP and (in a cluster) QUIC.
    pub http_addr: SocketAddr,
    pub quic_addr: Option<SocketAddr>,
    /// `http.allowed_origins`: pages of other origins allowed WebSockets.
    pub allowed_origins: Arc<Vec<String>>,
    /// The config file a reload reads again, and the data dir.
    pub config_source: Option<PathBuf>,
    pub data_dir: PathBuf,
    /// The cluster's peers as they change by reloads (`None`: one node).
    pub membership: membership::Shared,
    /// The HTTPS certificate a reload replaces (`None`: plain HTTP).
    pub https_cert: Option<Arc<termesh_transport::https::HttpsCert>>,
    /// Held by a reload from reading the file to applying it: two at once
    /// (SIGHUP and REST) apply one after the other, the last read last.
    pub reloading: Arc<std::sync::Mutex<()>>,
    /// `logs?tail=` streams running at once (`rest::MAX_LOGS_STREAMS`).
    pub logs_streams: Arc<tokio::sync::Semaphore>,
    /// WebSockets and streams open per source address.
    pub streams: streams::Streams,
}

/// What a started node reports.
#[derive(Debug, Clone)]
pub struct Ready {
    pub addr: SocketAddr,
    /// Serving HTTPS (and WSS).
    pub tls: bool,
    /// The generated admin token, when none was configured.
    pub admin_token: Option<String>,
    pub token_file: Option<PathBuf>,
}

/// Adds a generated admin token when none is configured (saved in the data
/// dir for local clients); returns it.
pub(super) fn ensure_admin_token(
    config: &mut Config,
) -> anyhow::Result<Option<(String, PathBuf, bool)>> {
    if !config.auth.tokens.is_empty() {
        return Ok(None);
    }
    let (token, created) = crate::token::load_or_create(&config.node.data_dir)?;
    config.auth.tokens.push(TokenEntry {
        name: Some("generated admin".into()),
        hash: termesh_config::parse_token_hash(&termesh_config::hash_token(&token))
            .map_err(anyhow::Error::msg)?,
        role: Role::Admin,
    });
    Ok(Some((
        token,
        crate::token::token_path(&config.node.data_dir),
        created,
    )))
}

/// Runs a node until `stop` fires (or SIGINT/SIGTERM when `signals`: the
/// node owns its process, and also leaves a runtime record for clients).
/// `ready` is told the bound address once the node serves.
pub fn run(
    mut config: Config,
    signals: bool,
    stop: Option<oneshot::Receiver<()>>,
    ready: impl FnOnce(Ready) + Send + 'static,
) -> anyhow::Result<()> {
    raise_fd_limit(&config);
    termesh_actors::os::tune_allocator();
    data_dir::prepare(&config.node.data_dir)?;
    let generated = ensure_admin_token(&mut config)?;
    let listener = listener::bind(&config.http)?;
    // HTTPS: the certificate and key are read now; a bad file stops the
    // start with the path and the cause.
    let (tls, https_cert) = match &config.http.tls {
        Some(files) => {
            let (tls, served) = termesh_transport::https::server_config(&files.cert, &files.key)
                .map_err(|e| anyhow::anyhow!("http TLS: {e}"))?;
            (Some(tls), Some(served))
        }
        None => (None, None),
    };
    let serve = node::Serve {
        listener,
        tls,
        https_cert,
        signals,
    };
    let system = actix_rt::System::new();
    system.block_on(settled(async move {
        let node = node::Node::start(&config, serve).await?;
        // Before the node says it is ready: a SIGTERM sent as soon as it
        // says so (a supervisor, a test) must stop it cleanly, not kill it.
        let stop_signals = signals.then(StopSignals::listen).flatten();
        ready(Ready {
            addr: node.state.http_addr,
            tls: node.url.starts_with("https"),
            admin_token: generated.as_ref().map(|(t, _, _)| t.clone()),
            token_file: generated.map(|(_, p, _)| p),
        });
        wait_for_stop(stop_signals, stop).await;
        node.shutdown().await;
        anyhow::Ok(())
    }))?;
    Ok(())
}

/// A node running on its own thread (tests, benchmarks); stops on drop.
pub struct NodeThread {
    pub ready: Ready,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl NodeThread {
    pub fn start(config: Config) -> anyhow::Result<NodeThread> {
        let (stop_tx, stop_rx) = oneshot::channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("termesh-node".into())
            .spawn(move || {
                run(config, false, Some(stop_rx), move |r| {
                    let _ = ready_tx.send(r);
                })
            })?;
        match ready_rx.recv_timeout(Duration::from_secs(30)) {
            Ok(ready) => Ok(NodeThread {
                ready,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Err(_) => {
                let result = thread
                    .join()
                    .map_err(|_| anyhow::anyhow!("node thread panicked"))?;
                result.and(Err(anyhow::anyhow!("node did not start")))
            }
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.ready.addr
    }

    /// Stops the node and waits for its shutdown to finish.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .map_err(|_| anyhow::anyhow!("node thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for NodeThread {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
