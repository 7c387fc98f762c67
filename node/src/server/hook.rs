//! `POST /api/v1/sessions/{id}/hook`: agent CLI lifecycle hooks, which
//! set a session's phase and state; the program inside the session
//! authenticates with the key in its `TERMESH_HOOK_URL`.

use actix_web::{http::StatusCode, web, HttpRequest, HttpResponse};
use serde::Deserialize;
use termesh_actors::error::ApiError;
use termesh_config::Role;
use termesh_transport::ErrorCode;

use super::auth::{query, require, respond};
use super::body::required_json;
use super::AppState;

type Result<T> = std::result::Result<T, ApiError>;

#[derive(Deserialize)]
struct HookQuery {
    key: Option<String>,
}

/// Hook payloads are kept up to this size; a larger one is stored cut,
/// with `truncated: true`.
const MAX_HOOK_PAYLOAD: usize = 16 * 1024;
/// How long a hook with its session's key waits for the session to be
/// listed (its program may post before the registry has listed it).
const HOOK_START_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The session `id` is listed; with its key (`keyed`: the id is one this
/// node made), a session still being registered is waited for, at most
/// `HOOK_START_WAIT`: a program that posts its first hook at once (a
/// start hook) must not lose it to the registry being slower than it.
async fn registered(state: &AppState, id: &str, keyed: bool) -> Result<()> {
    let deadline = std::time::Instant::now() + HOOK_START_WAIT;
    loop {
        match state.node.session(id) {
            Ok(_) => return Ok(()),
            Err(e)
                if keyed
                    && e.code == ErrorCode::NotFound
                    && std::time::Instant::now() < deadline =>
            {
                actix_rt::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Agent CLI lifecycle hooks set the session's phase. The program inside
/// the session authenticates with the key in its `TERMESH_HOOK_URL`.
pub(super) async fn hook(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            // Authorize before looking anything up: an unauthorized caller
            // learns nothing about which sessions exist.
            let key: HookQuery = query(&req)?;
            let key_ok = key
                .key
                .is_some_and(|k| state.node.hook_secret.verify(&path, &k));
            if !key_ok {
                require(&req, &state.node.tokens, Role::Operator)?;
            }
            registered(&state, &path, key_ok).await?;
            let body: serde_json::Value = required_json(payload).await?;
            let name = termesh_actors::session::agent::hooks::name(&body)
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "the hook body needs `hook_event_name` (or Codex's `type`), a string",
                    )
                })?
                .to_string();
            // Stored before the phase and state it sets (their events
            // follow it).
            if let Some(store) = &state.node.store {
                store.record_event(&path, hook_event(&name, body.clone()));
            }
            state.node.hooked(&path, &name, &body)?;
            Ok(HttpResponse::build(StatusCode::NO_CONTENT).finish())
        }
        .await,
    )
}

/// The stored event of a hook: its name and payload (cut when large).
fn hook_event(name: &str, body: serde_json::Value) -> serde_json::Value {
    let size = body.to_string().len();
    if size <= MAX_HOOK_PAYLOAD {
        return serde_json::json!({ "kind": "hook", "hook_event_name": name, "payload": body });
    }
    let text = body.to_string();
    let mut cut = MAX_HOOK_PAYLOAD;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    serde_json::json!({
        "kind": "hook",
        "hook_event_name": name,
        "payload": &text[..cut],
        "truncated": true,
        "size": size,
    })
}
