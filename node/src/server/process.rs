//! The node's process around its run: the stop signals (listened for
//! before the node says it serves), the open-file limit, and a start
//! that fails half way.

use tokio::sync::oneshot;

use termesh_config::Config;

/// `start`'s result, after the actors it started have run once: an actor
/// never polled runs its `started` when the runtime drops it, outside the
/// runtime, and panics there (a watchdog's timer); so a start that fails
/// half way (the mesh's port taken) lets them start before it returns.
pub(super) async fn settled<T>(
    start: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let result = start.await;
    if result.is_err() {
        for _ in 0..4 {
            actix_rt::task::yield_now().await;
        }
    }
    result
}

/// Each session holds a descriptor (its PTY master) and each client one:
/// lift the soft limit to the hard one so a node of this size can hold
/// thousands, and say so when the limit is below what the config's bounds
/// allow (connections past it would be refused by the kernel, not by a
/// bound with a clear error).
pub(super) fn raise_fd_limit(config: &Config) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let mut limit = soft;
    if soft < hard {
        match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => limit = hard,
            Err(e) => tracing::warn!("cannot raise the open-file limit from {soft} to {hard}: {e}"),
        }
    }
    // Store files, the mesh, the keeper and the listener.
    const RESERVE: u64 = 256;
    // A connection waiting for its request head holds two descriptors
    // (its head watch keeps a duplicate).
    let wanted =
        2 * config.http.max_connections as u64 + config.session.max_sessions as u64 + RESERVE;
    if limit < wanted {
        tracing::warn!(
            limit,
            wanted,
            "the open-file limit is below what http.max_connections and session.max_sessions \
             allow (two per connection, plus {RESERVE}): raise it (LimitNOFILE= in the unit, ulimit -n) or lower \
             those bounds"
        );
    }
}

/// SIGTERM and SIGINT, listened for (the default action, death, is off
/// from the moment this exists).
pub(super) struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    pub(super) fn listen() -> Option<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Some(StopSignals { term, int }),
            _ => {
                tracing::warn!("cannot listen for SIGTERM and SIGINT: they end the node at once");
                None
            }
        }
    }
}

pub(super) async fn wait_for_stop(
    signals: Option<StopSignals>,
    stop: Option<oneshot::Receiver<()>>,
) {
    let stop = async move {
        match stop {
            Some(rx) => {
                let _ = rx.await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let Some(mut signals) = signals else {
        return stop.await;
    };
    tokio::select! {
        _ = stop => {}
        _ = signals.term.recv() => {}
        _ = signals.int.recv() => {}
    }
}
