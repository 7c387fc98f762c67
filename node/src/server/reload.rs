//! Reload: the node reads its config file again and applies the token
//! changes (added, revoked, roles) without a restart, on SIGHUP or
//! `POST /api/v1/config/reload` (admin; `termesh config reload`). Open
//! connections check their token against the new set; a revoked one is
//! closed (4401). Other changed settings are logged as taking effect at
//! the next start. A file that does not parse changes nothing.

use actix_web::{web, HttpRequest, HttpResponse};
use termesh_actors::error::ApiError;
use termesh_config::{Config, Role};
use termesh_transport::ErrorCode;

use super::auth::require;
use super::rest::respond;
use super::AppState;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/config/reload", web::post().to(reload_route));
}

/// Reads the config file again and replaces the tokens; answers how many
/// tokens are in force now.
pub fn reload(state: &AppState) -> Result<usize, ApiError> {
    let Some(path) = &state.config_source else {
        return Err(ApiError::bad_request(
            "this node was started without a config file (--config): there is nothing to reload",
        ));
    };
    let mut config = Config::load(path).map_err(|e| {
        ApiError::bad_request(format!("the config was not reloaded, nothing changed: {e}"))
    })?;
    // The node keeps the data dir it started with (its generated token).
    config.node.data_dir = state.data_dir.clone();
    super::ensure_admin_token(&mut config)
        .map_err(|e| ApiError::new(ErrorCode::Internal, format!("{e:#}")))?;
    let n = config.auth.tokens.len();
    state.node.tokens.replace(config.auth.tokens);
    tracing::info!(
        path = %path.display(),
        tokens = n,
        "config reloaded: tokens applied (other settings take effect at the next start)"
    );
    Ok(n)
}

/// The file is read on a blocking thread, not on the HTTP worker: a
/// config on a slow or hung file system delays only this request.
async fn reload_route(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    if let Err(e) = require(&req, &state.node.tokens, Role::Admin) {
        return respond(Err(e));
    }
    let done = web::block(move || reload(&state)).await;
    respond(match done {
        Ok(Ok(tokens)) => Ok(HttpResponse::Ok().json(serde_json::json!({ "tokens": tokens }))),
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
