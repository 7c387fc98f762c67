//! The REST calls that drive agents (PROTOCOL.md section 15): `send`
//! answers a session (held until it waits with `when: "waiting"`), `wait`
//! waits for its state, `read` reads what it printed as plain text. Each
//! goes through the request table, so it works for a session of any node.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::json;
use termesh_actors::error::ApiError;
use termesh_transport::{ClientMsg, SendWhen, ServerMsg, MAX_SEND};

use termesh_actors::front::request::spec;

use super::auth::{query, require, respond};
use super::body::read_json_within;
use super::AppState;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/sessions/{id}/send", web::post().to(send))
        .route("/sessions/{id}/wait", web::get().to(wait))
        .route("/sessions/{id}/read", web::get().to(read));
}

#[derive(Deserialize)]
struct WaitQuery {
    /// Comma-separated.
    until: Option<String>,
    timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
struct ReadQuery {
    since_seq: Option<u64>,
    max_bytes: Option<u64>,
}

/// `{"state": ..., "seq": N}` once the session is in one of `until`;
/// 408 `timeout` past `timeout_ms`.
async fn wait(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            let q: WaitQuery = query(&req)?;
            let until = q
                .until
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            let msg = ClientMsg::Wait {
                id: 1,
                session: path.to_string(),
                until,
                timeout_ms: q.timeout_ms,
            };
            ask_json(&req, &state, msg, |reply| match reply {
                ServerMsg::State { state, seq, .. } => Some(json!({ "state": state, "seq": seq })),
                _ => None,
            })
            .await
        }
        .await,
    )
}

/// `{"seq": N, "text": "..."}`: what the session printed after
/// `since_seq`, as plain text.
async fn read(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            let q: ReadQuery = query(&req)?;
            let msg = ClientMsg::Read {
                id: 1,
                session: path.to_string(),
                since_seq: q.since_seq,
                max_bytes: q.max_bytes,
            };
            ask_json(&req, &state, msg, |reply| match reply {
                ServerMsg::Text { seq, text, .. } => Some(json!({ "seq": seq, "text": text })),
                _ => None,
            })
            .await
        }
        .await,
    )
}

/// `msg` asked with the role its kind needs; its answer as JSON by `json`
/// (`None`: the owner answered with another kind).
async fn ask_json(
    req: &HttpRequest,
    state: &AppState,
    msg: ClientMsg,
    json: impl FnOnce(ServerMsg) -> Option<serde_json::Value>,
) -> Result<HttpResponse, ApiError> {
    require(req, &state.node.tokens, spec(&msg).role)?;
    let mut msg = msg;
    by_name(state, &mut msg).await?;
    let kind = msg.kind();
    let reply = state.node.ask(msg).await?;
    let body = json(reply).ok_or_else(|| super::stored::mismatch(kind))?;
    Ok(HttpResponse::Ok().json(body))
}

/// The path's session, given by id or by name, as the id (once the role
/// was checked).
async fn by_name(state: &AppState, msg: &mut ClientMsg) -> Result<(), ApiError> {
    if let ClientMsg::Wait { session, .. }
    | ClientMsg::Read { session, .. }
    | ClientMsg::Send { session, .. } = msg
    {
        *session = state.node.resolve_name(session).await?;
    }
    Ok(())
}

/// `send`'s fields, as the WebSocket message has them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendBody {
    text: String,
    submit: Option<bool>,
    when: Option<SendWhen>,
}

/// 204 once written.
async fn send(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            // The text may be a long paste, each byte escaped.
            let body: SendBody = read_json_within(payload, 8 * MAX_SEND)
                .await?
                .ok_or_else(|| ApiError::bad_request("this request needs a JSON body"))?;
            let msg = ClientMsg::Send {
                id: 1,
                session: path.to_string(),
                text: body.text,
                submit: body.submit,
                when: body.when,
            };
            require(&req, &state.node.tokens, spec(&msg).role)?;
            let mut msg = msg;
            by_name(&state, &mut msg).await?;
            state.node.ask(msg).await?;
            Ok(HttpResponse::NoContent().finish())
        }
        .await,
    )
}
