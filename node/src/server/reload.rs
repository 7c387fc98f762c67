//! Reload: the node reads its config file again and applies the token
//! changes (added, revoked, roles), the cluster's peer list (nodes added
//! and removed: `membership`), new mesh certificates and the HTTPS
//! certificate files without a restart, on SIGHUP or
//! `POST /api/v1/config/reload` (admin; `termesh config reload`). Open
//! connections check their token against the new set; a revoked one is
//! closed (4401). Other changed settings are logged as taking effect at
//! the next start. A file that does not parse changes nothing. Reloads run
//! one at a time, each from reading the file to applying it, so the file
//! read last is the one in force; tokens are applied first, so a revoked
//! token goes even when a certificate in the same file cannot be taken.

use actix_web::{web, HttpRequest, HttpResponse};
use termesh_actors::error::ApiError;
use termesh_config::{Config, Role};
use termesh_transport::ErrorCode;

use super::auth::require;
use super::auth::respond;
use super::AppState;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/config/reload", web::post().to(reload_route));
}

/// What a reload applied.
#[derive(Debug, serde::Serialize)]
pub struct Reloaded {
    /// Tokens in force now.
    pub tokens: usize,
    /// Peers linked to since, and peers no longer.
    pub peers_added: Vec<String>,
    pub peers_removed: Vec<String>,
    /// New mesh certificates were taken (for links made from now on).
    pub certificates: bool,
}

/// Serves the HTTPS certificate files the config names now (the same
/// files read again: a rotation or a renewal writes over them).
fn apply_https(state: &AppState, config: &Config) -> Result<(), ApiError> {
    match (&state.https_cert, &config.http.tls) {
        (Some(served), Some(files)) => served.replace(&files.cert, &files.key).map_err(|e| {
            ApiError::bad_request(format!(
                "the config was applied but for the HTTPS certificate, which was not taken: {e}"
            ))
        }),
        (None, Some(_)) | (Some(_), None) => {
            tracing::warn!("HTTPS was turned on or off: that takes effect at the next start");
            Ok(())
        }
        (None, None) => Ok(()),
    }
}

/// Reads the config file again, replaces the tokens and applies the
/// cluster's peer list.
pub fn reload(state: &AppState) -> Result<Reloaded, ApiError> {
    let Some(path) = &state.config_source else {
        return Err(ApiError::bad_request(
            "this node was started without a config file (--config): there is nothing to reload",
        ));
    };
    // One at a time, from reading the file to applying it: so the file
    // read last is applied last (a SIGHUP and a REST reload at once).
    let _one_at_a_time = match state.reloading.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            tracing::info!("another reload is running: this one waits for it, then reads the file");
            state.reloading.lock().unwrap_or_else(|p| p.into_inner())
        }
    };
    let mut config = Config::load(path).map_err(|e| {
        ApiError::bad_request(format!("the config was not reloaded, nothing changed: {e}"))
    })?;
    // The node keeps the data dir it started with (its generated token).
    config.node.data_dir = state.data_dir.clone();
    super::ensure_admin_token(&mut config)
        .map_err(|e| ApiError::new(ErrorCode::Internal, format!("{e:#}")))?;
    let n = config.auth.tokens.len();
    // Tokens first: a revocation never waits on a certificate problem.
    state.node.tokens.replace(config.auth.tokens.clone());
    let mut certificates = false;
    let changed = match (
        &mut *super::membership::lock(&state.membership),
        &config.cluster,
    ) {
        (Some(membership), Some(cluster)) => {
            certificates = membership.apply_certificates(cluster).map_err(|e| {
                ApiError::bad_request(format!(
                    "the tokens were applied, but the certificates were not taken (nor the peers): {e}"
                ))
            })?;
            membership.apply(cluster, &state.node)
        }
        (None, Some(_)) | (Some(_), None) => {
            tracing::warn!(
                "the [cluster] section was added or removed: that takes effect at the next start"
            );
            Default::default()
        }
        (None, None) => Default::default(),
    };
    apply_https(state, &config)?;
    tracing::info!(
        path = %path.display(),
        tokens = n,
        peers_added = ?changed.added,
        peers_removed = ?changed.removed,
        certificates,
        "config reloaded: tokens and peers applied (other settings take effect at the next start)"
    );
    Ok(Reloaded {
        tokens: n,
        peers_added: changed.added,
        peers_removed: changed.removed,
        certificates,
    })
}

/// The file is read on a blocking thread, not on the HTTP worker: a
/// config on a slow or hung file system delays only this request.
async fn reload_route(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    if let Err(e) = require(&req, &state.node.tokens, Role::Admin) {
        return respond(Err(e));
    }
    let done = web::block(move || reload(&state)).await;
    respond(match done {
        Ok(Ok(reloaded)) => Ok(HttpResponse::Ok().json(reloaded)),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(ApiError::new(
            ErrorCode::Internal,
            format!("the reload did not run: {e}"),
        )),
    })
}

/// Reloads on every SIGHUP until the node stops.
pub async fn on_sighup(state: AppState) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP: reload with `termesh config reload`");
        return;
    };
    while hup.recv().await.is_some() {
        let state = state.clone();
        match tokio::task::spawn_blocking(move || reload(&state)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!("reload on SIGHUP failed: {}", e.message),
            Err(e) => tracing::error!("reload on SIGHUP did not run: {e}"),
        }
    }
}
