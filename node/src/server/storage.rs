//! What the node keeps in its data dir, started and looked after: the
//! PTY keeper it connects to (or starts), the store it opens with the
//! sessions it restores, and the store's vacuum and budget loops.

use std::sync::Arc;

use anyhow::Context;
use termesh_actors::metrics::Metrics;
use termesh_actors::store::StoreHandle;
use termesh_config::Config;

use super::data_dir;

/// Connects to the data dir's PTY keeper, starting one when none runs:
/// when the node owns its process (`signals`: the keeper is this binary),
/// keeps a store (the sessions to take the programs up again) and was not
/// told otherwise (`--no-keeper`). Answers it and the programs it holds.
pub(super) fn connect_keeper(
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
        // The programs are this process's children: it says how they run.
        if let Some(hint) = termesh_actors::session::autogroup::hint() {
            tracing::info!("{hint}");
        }
        return Ok((None, Vec::new()));
    }
    let exe = std::env::current_exe().context("cannot find this binary to start the keeper")?;
    let (keeper, held) =
        termesh_actors::keeper::Keeper::connect_or_start(&config.node.data_dir, &exe)
            .context("the PTY keeper (--no-keeper runs programs as the node's children)")?;
    if let Some(hint) = termesh_actors::session::autogroup::keeper_apart(keeper.pid()) {
        tracing::info!("{hint}");
    }
    Ok((Some(keeper), held))
}

/// The store in `<data dir>/store`, and the sessions it holds; `None`
/// when persistence is off (said loudly). A store that cannot be opened
/// stops the start with the path and the cause.
pub(super) fn open_store(
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
pub(super) async fn vacuum_loop(store: StoreHandle, config: termesh_config::StoreConfig) {
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
pub(super) fn max_output_bytes(config: &Config) -> u64 {
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
pub(super) async fn budget_loop(store: StoreHandle, max_bytes: u64) {
    loop {
        actix_rt::time::sleep(BUDGET_EVERY).await;
        if let Err(e) = store.keep_within(max_bytes).await {
            tracing::error!("store: keeping output within store.max_bytes failed: {e}");
        }
    }
}
