//! A running node as one value: what `run` used to keep in locals (the
//! registry, the store, the HTTP server, the background tasks, the files
//! that name it), with `start` and the one `shutdown` path (stop
//! accepting, close client connections with 1001, stop sessions, flush
//! the store, exit).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix_web::dev::Service;
use actix_web::{web, App, HttpServer};
use anyhow::Context;
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
use termesh_config::{defaults, Config};

use super::storage::{budget_loop, connect_keeper, max_output_bytes, open_store, vacuum_loop};
use super::{console, head_watch, membership, reload, rest, runtime_file, streams, url_file, ws};
use super::{AppState, VERSION};

/// HTTP worker threads (`http.max_connections` is shared out between
/// them, rounded up).
const WORKERS: usize = 2;

/// What a node is started with, besides its config.
pub struct Serve {
    pub listener: std::net::TcpListener,
    pub tls: Option<rustls::ServerConfig>,
    pub https_cert: Option<Arc<termesh_transport::https::HttpsCert>>,
    /// The node owns its process: it takes the signals and leaves a
    /// runtime record for clients.
    pub signals: bool,
}

/// A node that serves.
pub struct Node {
    pub state: AppState,
    pub url: String,
    registry: Addr<Registry>,
    store: Option<StoreHandle>,
    server: actix_web::dev::ServerHandle,
    serving: actix_rt::task::JoinHandle<std::io::Result<()>>,
    /// Loops that end with the node (vacuum, budget, SIGHUP, expiry).
    tasks: Vec<actix_rt::task::JoinHandle<()>>,
    url_file: Option<url_file::UrlFile>,
    runtime_file: Option<runtime_file::RuntimeFile>,
}

impl Node {
    /// Opens the store, connects the keeper, restores the sessions,
    /// starts the registry, the mesh and the HTTP server.
    pub async fn start(config: &Config, serve: Serve) -> anyhow::Result<Node> {
        let addr = serve.listener.local_addr()?;
        let scheme = if serve.tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{addr}");
        let metrics = Arc::new(Metrics::default());
        let dir = Directory::default();
        let stall = StallClock::new(config.watchdog.tick);
        let hook_secret = HookSecret::random();
        // Before any actor starts: a store that cannot be opened ends the
        // start with its message alone.
        let (store, restored) = open_store(config, &metrics)?;
        if serve.signals {
            // A node process of its own places itself in its CPU cgroups
            // before its keeper starts (which then starts there).
            termesh_actors::session::prepare_cpu();
        }
        let (keeper, kept) = connect_keeper(config, serve.signals)?;
        WatchdogActor::new(
            stall.clone(),
            config.watchdog.tick,
            config.watchdog.psi_path.clone(),
        )
        .start();
        let notify = termesh_actors::notify::Notifier::start(&config.notify, &metrics)
            .context("the [[notify]] threads")?;
        let registry = Registry::new(
            registry_config(
                config,
                &url,
                (store.clone(), &metrics),
                (hook_secret.clone(), notify),
                keeper,
            ),
            dir.clone(),
            metrics.clone(),
        )
        .start();
        restore(&registry, restored, kept).await;
        let mut tasks = store_tasks(config, store.as_ref());
        let node = NodeCtx {
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
            mesh: mesh_ctx(config, &dir, &metrics, &stall),
            gathers: Arc::new(tokio::sync::Semaphore::new(
                termesh_actors::front::ops::LIST_GATHERS,
            )),
        };
        let state = app_state(config, node, addr, serve.https_cert.clone());
        if let Some(cluster) = &config.cluster {
            let started = membership::Membership::start(config, cluster, &state.node)?;
            *membership::lock(&state.membership) = Some(started);
        }
        tasks.push(actix_rt::spawn(warn_expiry(state.membership.clone())));
        let server = http_server(config, state.clone(), serve.listener, serve.tls)?;
        let handle = server.handle();
        let serving = actix_rt::spawn(server);
        if serve.signals {
            tasks.push(actix_rt::spawn(reload::on_sighup(state.clone())));
        }
        tracing::info!(node = %config.node.name, %addr, "node serving");
        let url_file = url_file::write(&config.node.data_dir, &url);
        // The record names a process: only a node that is its process's
        // own (the binary, which also takes the signals) writes one; nodes
        // embedded in a test process are reached by their address.
        let runtime_file = serve
            .signals
            .then(|| {
                runtime_file::write(&config.node.name, &url, addr.port(), &config.node.data_dir)
            })
            .flatten();
        Ok(Node {
            state,
            url,
            registry,
            store,
            server: handle,
            serving,
            tasks,
            url_file,
            runtime_file,
        })
    }

    /// The one shutdown path: stop accepting (a client reconnecting now
    /// must not find the sessions gone and give up on them), tell clients,
    /// stop sessions, flush the store, stop the mesh, remove the files
    /// that name this node.
    pub async fn shutdown(self) {
        tracing::info!("shutting down");
        self.server.pause().await;
        for task in &self.tasks {
            task.abort();
        }
        let closing = self.state.connections.close_all(1001);
        let stopped = self.registry.send(Shutdown).await.unwrap_or(0);
        if let Some(store) = &self.store {
            // Every session has stopped: what they read is in the store's
            // queue, ahead of this flush. Bounded, so a stuck disk cannot
            // keep the node from stopping.
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
        self.server.stop(true).await;
        let _ = self.serving.await;
        // The mesh closes its endpoint and ends its tasks.
        drop(membership::lock(&self.state.membership).take());
        if let Some(file) = self.url_file {
            file.remove();
        }
        if let Some(file) = self.runtime_file {
            file.remove();
        }
    }
}

/// The sessions found in the store, and the programs the keeper held, back
/// in the registry.
async fn restore(
    registry: &Addr<Registry>,
    sessions: Vec<termesh_actors::store::Restored>,
    kept: Vec<termesh_actors::keeper::Held>,
) {
    if sessions.is_empty() && kept.is_empty() {
        return;
    }
    let count = registry
        .send(Restore { sessions, kept })
        .await
        .unwrap_or_default();
    tracing::info!(
        sessions = count.sessions,
        running = count.running,
        lost = count.lost,
        "sessions restored from the store (running: their programs ran on under the PTY keeper; lost: their programs died)"
    );
}

/// The store's vacuum and budget loops.
fn store_tasks(
    config: &Config,
    store: Option<&StoreHandle>,
) -> Vec<actix_rt::task::JoinHandle<()>> {
    let Some(store) = store else {
        return Vec::new();
    };
    vec![
        actix_rt::spawn(vacuum_loop(store.clone(), config.store.clone())),
        actix_rt::spawn(budget_loop(store.clone(), max_output_bytes(config))),
    ]
}

fn registry_config(
    config: &Config,
    url: &str,
    (store, metrics): (Option<StoreHandle>, &Arc<Metrics>),
    (hook_secret, notify): (HookSecret, termesh_actors::notify::Notifier),
    keeper: Option<termesh_actors::keeper::Keeper>,
) -> RegistryConfig {
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
            store,
            warmth: Default::default(),
            pty_io: termesh_actors::session::pty::PtyIo::counting(
                metrics.bulk_readers.clone(),
                metrics.input_written.clone(),
            ),
            agents: agents(config),
            notify,
            console_url: url.to_string(),
        },
        max_sessions: config.session.max_sessions,
        http_base: url.to_string(),
        hook_secret,
        // HTTPS with a certificate from the cluster CA (as `cluster init
        // --http-tls` writes it): programs get that CA.
        ca: config
            .http
            .tls
            .as_ref()
            .and(config.cluster.as_ref())
            .map(|c| c.ca.clone()),
        keeper,
    }
}

/// The node's agents: the config's `[[agents]]` (checked when the config
/// was read) and the built-in ones.
fn agents(config: &Config) -> termesh_actors::session::agent::Agents {
    termesh_actors::session::agent::Agents::new(&config.agents).unwrap_or_else(|e| {
        tracing::error!("[[agents]]: {e}; the built-in rules only");
        Default::default()
    })
}

fn mesh_ctx(
    config: &Config,
    dir: &Directory,
    metrics: &Arc<Metrics>,
    stall: &StallClock,
) -> termesh_actors::cluster::ClusterCtx {
    termesh_actors::cluster::ClusterCtx {
        node: config.node.name.clone(),
        dir: dir.clone(),
        metrics: metrics.clone(),
        stall: stall.clone(),
        view: Default::default(),
        peers: Default::default(),
        mirrors: Default::default(),
        mirror: termesh_actors::cluster::mirror::MirrorSettings {
            ring_bytes: config.session.ring_bytes,
            ring_frames: config.session.ring_frames,
            linger: config
                .cluster
                .as_ref()
                .map_or(Duration::from_secs(60), |c| c.mirror_linger),
        },
    }
}

fn app_state(
    config: &Config,
    node: NodeCtx,
    addr: SocketAddr,
    https_cert: Option<Arc<termesh_transport::https::HttpsCert>>,
) -> AppState {
    AppState {
        node,
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
        https_cert,
        reloading: Arc::default(),
        logs_streams: Arc::new(tokio::sync::Semaphore::new(rest::MAX_LOGS_STREAMS)),
        streams: streams::Streams::new(config.http.max_connections_per_address),
    }
}

/// The HTTP server on `listener`, with the node's bounds (`[http]`).
fn http_server(
    config: &Config,
    state: AppState,
    listener: std::net::TcpListener,
    tls: Option<rustls::ServerConfig>,
) -> anyhow::Result<actix_web::dev::Server> {
    let head_timeout = config.http.request_head_timeout;
    let server = HttpServer::new(move || {
        App::new()
            .app_data(web::Data::new(state.clone()))
            // The head came: the connection's head watch ends.
            .wrap_fn(|req, srv| {
                if let Some(watch) = req.conn_data::<head_watch::HeadWatch>() {
                    watch.taken();
                }
                srv.call(req)
            })
            .configure(ws::routes)
            .configure(rest::routes)
            .configure(console::routes)
    })
    .on_connect(move |io, data| head_watch::on_connect(io, data, head_timeout))
    .workers(WORKERS)
    // Past it a worker stops accepting until a connection closes.
    .max_connections(config.http.max_connections.div_ceil(WORKERS))
    // A request head (an upgrade's too) dribbled slower than
    // `request_head_timeout` is closed by the connection's head watch,
    // which does not blame the client for the node's own stalls; actix's
    // timer would.
    .client_request_timeout(Duration::ZERO)
    // One request per connection: actix times only a connection's first
    // head, so a kept-alive connection could dribble its next one for
    // ever. Clients here make few requests (WebSockets and streams are one
    // request each), so a new connection costs little.
    .keep_alive(actix_web::http::KeepAlive::Disabled)
    .disable_signals()
    .shutdown_timeout(2);
    let server = match tls {
        Some(tls) => server.listen_rustls_0_23(listener, tls),
        None => server.listen(listener),
    }
    .context("cannot serve on the listener")?;
    Ok(server.run())
}

/// The certificate's expiry is warned of twice a day once it is near.
async fn warn_expiry(membership: membership::Shared) {
    loop {
        actix_rt::time::sleep(Duration::from_secs(12 * 3600)).await;
        if let Some(m) = membership::lock(&membership).as_ref() {
            m.warn_expiry();
        }
    }
}
