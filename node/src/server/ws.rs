//! WebSocket upgrades: `/ws` (the client protocol) and
//! `/sessions/{id}/raw` (raw terminal bytes), each behind the origin
//! check (`http.allowed_origins`) and the bound on streams per source
//! address.

use actix_web::{web, HttpRequest, HttpResponse};
use actix_web_actors::ws::{self, WebsocketContext};
use termesh_actors::error::ApiError;
use termesh_actors::front::connection::ConnectionActor;
use termesh_actors::front::frames::incoming;
use termesh_actors::front::raw::RawActor;
use termesh_config::Role;
use termesh_transport::{ErrorCode, MAX_INBOUND_FRAME, SUBPROTOCOL};

use super::auth::{error_response, require, role_of};
use super::AppState;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/ws", web::get().to(client_ws))
        .route("/sessions/{id}/raw", web::get().to(raw_ws));
}

async fn client_ws(
    req: HttpRequest,
    stream: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, actix_web::Error> {
    if let Err(e) = check_origin(&req, &state) {
        return Ok(error_response(&e));
    }
    // A wrong token on the upgrade is refused with 401; no token at all
    // leaves the connection to authenticate with an `auth` message.
    let role = match role_of(&req, &state.node.tokens) {
        Ok(role) => role,
        Err(e) => return Ok(error_response(&e)),
    };
    let permit = match state.streams.admit(&req) {
        Ok(permit) => permit,
        Err(e) => return Ok(error_response(&e)),
    };
    let digest = super::auth::presented_token(&req).map(|t| termesh_config::digest(&t));
    let actor = ConnectionActor::new(state.node.clone(), state.connections.clone(), role, digest)
        .with_incoming(incoming(stream, MAX_INBOUND_FRAME));
    // Built by hand rather than by `WsResponseBuilder::start`: the
    // outgoing stream is wrapped so the connection learns when the
    // socket has taken its replies (their slots are held until then), and
    // holds the address's stream permit.
    let mut res = ws::handshake_with_protocols(&req, &[SUBPROTOCOL])?;
    let clock = actor.pull_clock();
    let context = WebsocketContext::with_codec(actor, no_payload(), codec());
    Ok(res.streaming(permit.hold(clock.wrap(context))))
}

async fn raw_ws(
    req: HttpRequest,
    path: web::Path<String>,
    stream: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, actix_web::Error> {
    if let Err(e) = check_origin(&req, &state) {
        return Ok(error_response(&e));
    }
    let role = match require(&req, &state.node.tokens, Role::Viewer) {
        Ok(role) => role,
        Err(e) => return Ok(error_response(&e)),
    };
    let handle = match state.node.feed(&path) {
        Ok(handle) => handle,
        Err(e) => return Ok(error_response(&e)),
    };
    let permit = match state.streams.admit(&req) {
        Ok(permit) => permit,
        Err(e) => return Ok(error_response(&e)),
    };
    let digest = super::auth::presented_token(&req).map(|t| termesh_config::digest(&t));
    let actor = RawActor::new(
        state.node.clone(),
        state.connections.clone(),
        handle,
        role,
        digest,
    );
    let actor = actor.with_incoming(incoming(stream, MAX_INBOUND_FRAME));
    let mut res = ws::handshake(&req)?;
    let context = WebsocketContext::with_codec(actor, no_payload(), codec());
    Ok(res.streaming(permit.hold(context)))
}

/// The WebSocket codec (it encodes what the node sends).
fn codec() -> actix_http::ws::Codec {
    actix_http::ws::Codec::new().max_size(MAX_INBOUND_FRAME)
}

/// What the context reads itself: nothing, ever. The actor reads the
/// client's frames from `frames::incoming`, which decodes one before it
/// reads more (actix's own reader buffers all the socket has first).
fn no_payload(
) -> futures_util::stream::Pending<Result<bytes::Bytes, actix_web::error::PayloadError>> {
    futures_util::stream::pending()
}

/// A browser page from another origin may not open a WebSocket here
/// (403 `forbidden`), unless `http.allowed_origins` lists it.
fn check_origin(req: &HttpRequest, state: &AppState) -> Result<(), ApiError> {
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let origin = header("origin");
    if termesh_config::origins::allowed(origin, header("host"), &state.allowed_origins) {
        return Ok(());
    }
    let origin = origin.unwrap_or_default();
    tracing::warn!(%origin, "WebSocket upgrade from another origin refused");
    Err(ApiError::new(
        ErrorCode::Forbidden,
        format!(
            "origin {origin:?} may not open WebSockets on this node: add it to \
             http.allowed_origins"
        ),
    ))
}
