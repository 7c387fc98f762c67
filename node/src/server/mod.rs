//! The node server: binds the listener, starts the registry and the HTTP
//! routes, and owns the one shutdown path (stop accepting, close client
//! connections with 1001, stop sessions, exit).

mod auth;
mod body;
mod console;
mod data_dir;
mod listener;
mod membership;
mod nodes;
mod process;
mod reload;
mod rest;
pub mod runtime_file;
mod stored;
mod streams;
pub mod url_file;
mod ws;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix_web::{web, App, HttpServer};
use anyhow::Context;
use process::{raise_fd_limit, settled, wait_for_stop, StopSignals};
use termesh_actors::directory::create::CreateDefaults;
use termesh_actors::directory::hook::HookSecret;
use termesh_actors::directory::registry::{Directory, Registry, RegistryConfig};
use termesh_actors::directory::restore::{Restore, Shutdown};
use termesh_actors::front::connection::Connections;
use termesh_actors::front::ops::NodeCtx;
use termesh_actors::liveness::stall::StallClock;
use termesh_actors::liveness::watchdog::WatchdogActor;
use termesh_actors::metrics::Metrics;
use termesh_actors::session::SessionSettings;
use termesh_actors::store::StoreHandle;
use termesh_config::{defaults, Config, Role, TokenEntry};
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

/// Connects to the data dir's PTY keeper, starting one when none runs:
/// when the node owns its process (`signals`: the keeper is this binary),
/// keeps a store (the sessions to take the programs up again) and was not
/// told otherwise (`--no-keeper`). Answers it and the programs it holds.
fn connect_keeper(
    config: &Config,
    signals: bool,
) -> anyhow::Result<(
    Option<termesh_actors::keeper::Keeper>,
    Vec<termesh_actors::keeper::Held>,
)> {
    if !(signals && config.node.keeper && config.store.enabled) {
        if signals && termesh_actors::keeper::Keeper::listening(&config.node.data_dir) {
            // Its programs' sessions would show `lost` while they run on.
            anyhow::bail!(
                "a PTY keeper runs on {} and holds this node's programs: start the node with its keeper \
                 (without --no-keeper), or stop the keeper first (its programs end: `kill $(cat {})`)",
                config.node.data_dir.display(),
                config.node.data_dir.join("keeper.lock").display()
            );
        }
        return Ok((None, Vec::new()));
    }
    let exe = std::env::current_exe().context("cannot find this binary to start the keeper")?;
    let (keeper, held) =
        termesh_actors::keeper::Keeper::connect_or_start(&config.node.data_dir, &exe)
            .context("the PTY keeper (--no-keeper runs programs as the node's children)")?;
    Ok((Some(keeper), held))
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

/// HTTP worker threads (`http.max_connections` is shared out between
/// them, rounded up).
const WORKERS: usize = 2;

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
    let scheme = if tls.is_some() { "https" } else { "http" };
    let addr = listener.local_addr()?;
    let system = actix_rt::System::new();
    system.block_on(settled(async move {
        let metrics = Arc::new(Metrics::default());
        let dir = Directory::default();
        let stall = StallClock::new(config.watchdog.tick);
        let hook_secret = HookSecret::random();
        // Before any actor starts: a store that cannot be opened ends the
        // start with its message alone.
        let (store, restored) = open_store(&config, &metrics)?;
        let (keeper, kept) = connect_keeper(&config, signals)?;
        WatchdogActor::new(
            stall.clone(),
            config.watchdog.tick,
            config.watchdog.psi_path.clone(),
        )
        .start();
        let registry = Registry::new(
            RegistryConfig {
                node: config.node.name.clone(),
                defaults: CreateDefaults {
                    command: config.session.command.clone(),
                    cols: config.session.cols,
                    rows: config.session.rows,
                },
                settings: SessionSettings {
                    ring_bytes: config.session.ring_bytes,
                    ring_frames: config.session.ring_frames,
                    kill_grace: config.session.kill_grace,
                    model_idle: config.session.model_idle,
                    store: store.clone(),
                },
                max_sessions: config.session.max_sessions,
                http_base: format!("{scheme}://{addr}"),
                hook_secret: hook_secret.clone(),
                // HTTPS with a certificate from the cluster CA (as `cluster
                // init --http-tls` writes it): programs get that CA.
                ca: config
                    .http
                    .tls
                    .as_ref()
                    .and(config.cluster.as_ref())
                    .map(|c| c.ca.clone()),
                keeper,
            },
            dir.clone(),
            metrics.clone(),
        )
        .start();
        if !restored.is_empty() || !kept.is_empty() {
            let restore = Restore {
                sessions: restored,
                kept,
            };
            let count = registry.send(restore).await.unwrap_or_default();
            tracing::info!(
                sessions = count.sessions,
                running = count.running,
                lost = count.lost,
                "sessions restored from the store (running: their programs ran on under the PTY keeper; lost: their programs died)"
            );
        }
        let vacuum = store
            .clone()
            .map(|store| actix_rt::spawn(vacuum_loop(store, config.store.clone())));
        let budget = store.clone().map(|store| {
            let max = max_output_bytes(&config);
            actix_rt::spawn(budget_loop(store, max))
        });
        let cluster_view = termesh_actors::cluster::peer::view::ClusterView::default();
        let state = AppState {
            node: NodeCtx {
                node: config.node.name.clone(),
                version: VERSION,
                registry: registry.clone(),
                dir: dir.clone(),
                metrics: metrics.clone(),
                tokens: termesh_actors::front::tokens::Tokens::new(config.auth.tokens.clone()),
                ws: config.ws.clone(),
                stall: stall.clone(),
                hook_secret,
                default_window: config.session.default_window,
                window_bounds: (defaults::WINDOW_MIN, defaults::WINDOW_MAX),
                store: store.clone(),
                mesh: termesh_actors::cluster::ClusterCtx {
                    node: config.node.name.clone(),
                    dir: dir.clone(),
                    metrics: metrics.clone(),
                    stall: stall.clone(),
                    view: cluster_view,
                    peers: Default::default(),
                    mirrors: Default::default(),
                    mirror: termesh_actors::cluster::mirror::MirrorSettings {
                        ring_bytes: config.session.ring_bytes,
                        ring_frames: config.session.ring_frames,
                        linger: config
                            .cluster
                            .as_ref()
                            .map_or(std::time::Duration::from_secs(60), |c| c.mirror_linger),
                    },
                },
            },
            connections: Connections::default(),
            http_addr: addr,
            allowed_origins: Arc::new(config.http.allowed_origins.clone()),
            config_source: config.source.clone(),
            data_dir: config.node.data_dir.clone(),
            quic_addr: config
                .cluster
                .as_ref()
                .map(|c| c.this(&config.node.name).quic),
            membership: Default::default(),
            https_cert: https_cert.clone(),
            reloading: Arc::default(),
            logs_streams: Arc::new(tokio::sync::Semaphore::new(rest::MAX_LOGS_STREAMS)),
            streams: streams::Streams::new(config.http.max_connections_per_address),
        };
        if let Some(cluster) = &config.cluster {
            let started = membership::Membership::start(&config, cluster, &state.node)?;
            *membership::lock(&state.membership) = Some(started);
        }
        // The certificate's expiry is warned of twice a day once it is near.
        let expiry = state.membership.clone();
        let expiry = actix_rt::spawn(async move {
            loop {
                actix_rt::time::sleep(Duration::from_secs(12 * 3600)).await;
                if let Some(m) = membership::lock(&expiry).as_ref() {
                    m.warn_expiry();
                }
            }
        });
        let app_state = state.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(web::Data::new(app_state.clone()))
                .configure(ws::routes)
                .configure(rest::routes)
                .configure(console::routes)
        })
        .on_connect(|conn, _| {
            // Small frames (keystrokes, echoes, acks) must not wait for Nagle.
            if let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() {
                let _ = tcp.set_nodelay(true);
            }
        })
        .workers(WORKERS)
        // Past it a worker stops accepting until a connection closes.
        .max_connections(config.http.max_connections.div_ceil(WORKERS))
        // A request head (an upgrade's too) dribbled slower is closed.
        .client_request_timeout(config.http.request_head_timeout)
        // One request per connection: actix times only a connection's
        // first head, so a kept-alive connection could dribble its next
        // one for ever. Clients here make few requests (WebSockets and
        // streams are one request each), so a new connection costs little.
        .keep_alive(actix_web::http::KeepAlive::Disabled)
        .disable_signals()
        .shutdown_timeout(2);
        let server = match tls {
            Some(tls) => server.listen_rustls_0_23(listener, tls),
            None => server.listen(listener),
        }
        .context("cannot serve on the listener")?
        .run();
        let server_handle = server.handle();
        let serving = actix_rt::spawn(server);
        let hup = signals.then(|| actix_rt::spawn(reload::on_sighup(state.clone())));
        tracing::info!(node = %config.node.name, %addr, "node serving");
        let url = format!("{scheme}://{addr}");
        let url_file = url_file::write(&config.node.data_dir, &url);
        // The record names a process: only a node that is its process's
        // own (the binary, which also takes the signals) writes one; nodes
        // embedded in a test process are reached by their address.
        let runtime_file = signals.then(|| {
            runtime_file::write(&config.node.name, &url, addr.port(), &config.node.data_dir)
        });
        // Before the node says it is ready: a SIGTERM sent as soon as it
        // says so (a supervisor, a test) must stop it cleanly, not kill it.
        let stop_signals = signals.then(StopSignals::listen).flatten();
        ready(Ready {
            addr,
            tls: scheme == "https",
            admin_token: generated.as_ref().map(|(t, _, _)| t.clone()),
            token_file: generated.map(|(_, p, _)| p),
        });

        wait_for_stop(stop_signals, stop).await;
        tracing::info!("shutting down");
        // One place for shutdown: stop accepting (a client reconnecting now
        // must not find the sessions gone and give up on them), tell
        // clients, stop sessions, flush the store.
        server_handle.pause().await;
        for task in [vacuum, budget].into_iter().flatten() {
            task.abort();
        }
        if let Some(hup) = hup {
            hup.abort();
        }
        expiry.abort();
        let closing = state.connections.close_all(1001);
        let stopped = registry.send(Shutdown).await.unwrap_or(0);
        if let Some(store) = &store {
            // Every session has stopped: what they read is in the store's
            // queue, ahead of this flush.
            // Bounded, so a stuck disk cannot keep the node from stopping.
            match tokio::time::timeout(Duration::from_secs(10), store.flush()).await {
                Ok(Ok(())) => tracing::info!("store flushed"),
                Ok(Err(e)) => tracing::error!("store flush failed: {e}"),
                Err(_) => tracing::error!("the store did not flush within 10 s; stopping anyway"),
            }
        }
        tracing::info!(
            connections = closing,
            sessions = stopped,
            "closed connections and sessions"
        );
        // Give close frames a moment to flush before the workers stop.
        actix_rt::time::sleep(Duration::from_millis(200)).await;
        server_handle.stop(true).await;
        let _ = serving.await;
        // The mesh closes its endpoint and ends its tasks.
        drop(membership::lock(&state.membership).take());
        if let Some(file) = url_file {
            file.remove();
        }
        if let Some(file) = runtime_file.flatten() {
            file.remove();
        }
        anyhow::Ok(())
    }))?;
    Ok(())
}

/// The store in `<data dir>/store`, and the sessions it holds; `None`
/// when persistence is off (said loudly). A store that cannot be opened
/// stops the start with the path and the cause.
fn open_store(
    config: &Config,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<(Option<StoreHandle>, Vec<termesh_actors::store::Restored>)> {
    if !config.store.enabled {
        tracing::warn!(
            "persistence is OFF (--no-store or store.enabled = false): sessions, output and events die with this process"
        );
        return Ok((None, Vec::new()));
    }
    let path = config.node.data_dir.join("store");
    data_dir::prepare_private(&path)?;
    let (store, restored) = StoreHandle::open(
        &path,
        config.session.ring_bytes,
        config.store.output_bytes,
        metrics.clone(),
    )
    .map_err(|e| anyhow::anyhow!("{e}; to run without persistence, start with --no-store"))?;
    tracing::info!(path = %path.display(), sessions = restored.len(), "store opened");
    Ok((Some(store), restored))
}

/// Trims the store to the retention config every `vacuum_every`.
async fn vacuum_loop(store: StoreHandle, config: termesh_config::StoreConfig) {
    let keep = termesh_actors::store::Retention {
        output_bytes: config.output_bytes,
        event_age_ms: config.event_age.as_millis() as u64,
        events: config.events,
    };
    loop {
        actix_rt::time::sleep(config.vacuum_every).await;
        let started = std::time::Instant::now();
        match store.vacuum(keep).await {
            Ok(deleted) => tracing::info!(
                deleted,
                ms = started.elapsed().as_millis() as u64,
                "store vacuumed"
            ),
            Err(e) => tracing::error!("store vacuum failed: {e}"),
        }
    }
}

/// `store.max_bytes` in bytes: a share of the data dir's file system is
/// read off the file system once, at start.
fn max_output_bytes(config: &Config) -> u64 {
    let fs_bytes = nix::sys::statvfs::statvfs(&config.node.data_dir)
        .map(|v| v.blocks().saturating_mul(v.fragment_size()))
        .unwrap_or(u64::MAX);
    let max = config.store.max_bytes.resolve(fs_bytes);
    tracing::info!(
        max_bytes = max,
        "store: output kept by the node at most (store.max_bytes)"
    );
    max
}

/// How often the node looks whether its output is over `store.max_bytes`
/// (a counter read; the oldest output goes when it is).
const BUDGET_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Keeps the output log within the node's budget.
async fn budget_loop(store: StoreHandle, max_bytes: u64) {
    loop {
        actix_rt::time::sleep(BUDGET_EVERY).await;
        if let Err(e) = store.keep_within(max_bytes).await {
            tracing::error!("store: keeping output within store.max_bytes failed: {e}");
        }
    }
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
