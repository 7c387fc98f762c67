//! The REST calls that drive agents (PROTOCOL.md section 15): `send`
//! answers a session (held until it waits with `when: "waiting"`). Each
//! goes through the request table, so it works for a session of any node.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use termesh_transport::{ClientMsg, SendWhen};

use termesh_actors::front::request::spec;

use super::auth::{require, respond};
use super::body::required_json;
use super::AppState;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/sessions/{id}/send", web::post().to(send));
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
            let body: SendBody = required_json(payload).await?;
            let msg = ClientMsg::Send {
                id: 1,
                session: path.to_string(),
                text: body.text,
                submit: body.submit,
                when: body.when,
            };
            require(&req, &state.node.tokens, spec(&msg).role)?;
            state.node.ask(msg).await?;
            Ok(HttpResponse::NoContent().finish())
        }
        .await,
    )
}
