//! The REST API under `/api/v1` (PROTOCOL.md section 12, the parts that
//! need neither storage nor peers), `/healthz` and `/metrics`. Every body
//! is read with a bound and every error is `{"code", "message"}` JSON.

use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use serde::Deserialize;
use termesh_actors::cluster::forward::Route;
use termesh_actors::error::ApiError;
use termesh_actors::front::request::{spec, spec_of};
use termesh_actors::session::ScreenWant;
use termesh_config::Role;
use termesh_transport::{
    AgentState, ClientMsg, CreateRequest, ErrorCode, RequestKind, ServerMsg, MAX_INPUT,
};

use super::auth::{error_response, query, require, respond};
use super::body::{read_body, read_json, required_json};
use super::AppState;
use crate::tail::{Ask, Tail};
use termesh_actors::session::screen::Utf8Decoder;

/// Default `logs?tail=` (any tail up to the retained size is streamed).
const DEFAULT_TAIL: u64 = 64 * 1024;
/// `logs` responses a node streams at once (each holds up to 20 MiB and
/// reads the log twice for a large tail); one more is `unavailable`.
pub const MAX_LOGS_STREAMS: usize = 4;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/metrics", web::get().to(metrics))
        .service(
            web::scope("/api/v1")
                .route("/nodes", web::get().to(super::nodes::nodes))
                .route("/sessions", web::get().to(list))
                .route("/sessions", web::post().to(create))
                .route("/sessions/{id}", web::get().to(get_one))
                .route("/sessions/{id}", web::delete().to(remove))
                .route("/sessions/{id}/input", web::post().to(input))
                .route("/sessions/{id}/resize", web::post().to(resize))
                .route("/sessions/{id}/kill", web::post().to(kill))
                .route("/sessions/{id}/logs", web::get().to(logs))
                .route("/sessions/{id}/screen", web::get().to(screen))
                .route("/sessions/{id}/history", web::get().to(history))
                .route("/sessions/{id}/hook", web::post().to(super::hook::hook))
                .configure(super::stored::routes)
                .configure(super::agents::routes)
                .configure(super::reload::routes)
                .default_service(web::to(|| async {
                    error_response(&ApiError::new(ErrorCode::NotFound, "no such API route"))
                })),
        );
}

type Result<T> = std::result::Result<T, ApiError>;

/// The role the request table gives `kind`: REST checks it before it
/// reads a body, as the WebSocket front end does before it answers.
fn role(kind: RequestKind) -> Role {
    spec_of(kind).role
}

/// `msg` answered through the request table, as over WebSocket: the role
/// its row needs, then the answer of whichever node answers it (an error
/// reply as the error).
async fn ask(req: &HttpRequest, state: &AppState, msg: ClientMsg) -> Result<ServerMsg> {
    require(req, &state.node.tokens, spec(&msg).role)?;
    state.node.ask(msg).await
}

/// The session a path names once the request's role is checked: its id,
/// or the exact name of one session (`NodeCtx::resolve_name`).
async fn named(
    req: &HttpRequest,
    state: &AppState,
    path: &str,
    kind: RequestKind,
) -> Result<String> {
    require(req, &state.node.tokens, role(kind))?;
    state.node.resolve_name(path).await
}

/// 200 `ok` while the node serves and can store; 503 naming the cause
/// while its store fails (output is then not kept, and sessions whose
/// seqs cannot be reserved wait).
async fn healthz(state: web::Data<AppState>) -> HttpResponse {
    match state.node.metrics.store_failure() {
        None => HttpResponse::Ok().content_type("text/plain").body("ok\n"),
        Some(e) => HttpResponse::ServiceUnavailable()
            .content_type("text/plain")
            .body(format!("store failing: {e}\n")),
    }
}

async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(
            state
                .node
                .metrics
                .render(&state.node.node, state.node.stall.total())
                + &termesh_actors::metrics::render_states(
                    &state.node.node,
                    &state.node.dir.states(),
                )
                + &termesh_actors::metrics::render_waits(
                    &state.node.node,
                    state.node.dir.bells().held(),
                )
                + &super::nodes::metrics(&state),
        )
}

#[derive(Deserialize)]
struct ListQuery {
    after: Option<String>,
    limit: Option<u32>,
    /// Only sessions in these states (comma-separated).
    state: Option<String>,
}

/// The states `?state=` names (`waiting,idle`).
fn states(text: &str) -> std::result::Result<Vec<AgentState>, ApiError> {
    text.split(',')
        .map(|s| {
            AgentState::parse(s.trim()).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "state {s:?}: one of waiting, working, idle (comma-separated)"
                ))
            })
        })
        .collect()
}

/// Every session, or with `?limit=N[&after=ID]` a page of them ordered by
/// id; a page that is not the last names the next one's `after` in
/// `X-Termesh-Next`. `?state=waiting` keeps the sessions in that state
/// (of the page).
///
/// Gathered on a blocking thread (a large directory takes a while) and
/// bounded like every reply (`too_large` past 8 MiB: page instead).
async fn list(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let asked =
        require(&req, &state.node.tokens, role(RequestKind::List)).and_then(|_| query(&req));
    let asked = asked.and_then(|q: ListQuery| {
        let wanted = q.state.as_deref().map(states).transpose()?;
        Ok((q, wanted))
    });
    let (q, wanted) = match asked {
        Ok(q) => q,
        Err(e) => return error_response(&e),
    };
    let gathered = state.node.page_off_thread(q.after, q.limit).await;
    respond((|| {
        let (mut sessions, next) = gathered?;
        if let Some(wanted) = wanted {
            sessions.retain(|s| s.state.is_some_and(|st| wanted.contains(&st)));
        }
        let reply = ServerMsg::Sessions {
            id: 0,
            sessions,
            next,
        }
        .bounded();
        let ServerMsg::Sessions { sessions, next, .. } = reply else {
            return Err(ApiError::from_message(&reply)
                .unwrap_or_else(|| ApiError::new(ErrorCode::Internal, "list")));
        };
        let mut reply = HttpResponse::Ok();
        if let Some(next) = next {
            reply.insert_header(("X-Termesh-Next", next));
        }
        Ok(reply.json(sessions))
    })())
}

async fn create(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            require(&req, &state.node.tokens, role(RequestKind::Create))?;
            let body: CreateRequest = read_json(payload).await?.unwrap_or_default();
            let msg = ClientMsg::Create { id: 1, req: body };
            let ServerMsg::Created { session: info, .. } = ask(&req, &state, msg).await? else {
                return Err(mismatch());
            };
            Ok(HttpResponse::Created().json(info))
        }
        .await,
    )
}

async fn get_one(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            let id = named(&req, &state, &path, RequestKind::List).await?;
            Ok(HttpResponse::Ok().json(state.node.info(&id)?))
        }
        .await,
    )
}

#[derive(Deserialize)]
struct RemoveQuery {
    #[serde(default)]
    purge: bool,
}

async fn remove(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            let session = named(&req, &state, &path, RequestKind::Remove).await?;
            let purge = query::<RemoveQuery>(&req)?.purge;
            let msg = ClientMsg::Remove {
                id: 1,
                session,
                purge: Some(purge),
            };
            ask(&req, &state, msg).await?;
            Ok(HttpResponse::NoContent().finish())
        }
        .await,
    )
}

async fn input(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            let session = named(&req, &state, &path, RequestKind::Input).await?;
            let body = read_body(payload, MAX_INPUT).await?;
            let msg = ClientMsg::Input {
                session: session.clone(),
                data: body.to_vec(),
            };
            ask(&req, &state, msg).await?;
            Ok(HttpResponse::NoContent().finish())
        }
        .await,
    )
}

#[derive(Deserialize)]
struct ResizeBody {
    cols: u64,
    rows: u64,
}

async fn resize(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            let session = named(&req, &state, &path, RequestKind::Resize).await?;
            let body: ResizeBody = required_json(payload).await?;
            let msg = ClientMsg::Resize {
                session: session.clone(),
                cols: body.cols,
                rows: body.rows,
            };
            ask(&req, &state, msg).await?;
            Ok(HttpResponse::NoContent().finish())
        }
        .await,
    )
}

#[derive(Deserialize, Default)]
struct KillBody {
    signal: Option<String>,
}

async fn kill(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            let session = named(&req, &state, &path, RequestKind::Kill).await?;
            let body: KillBody = read_json(payload).await?.unwrap_or_default();
            let msg = ClientMsg::Kill {
                id: 1,
                session: session.clone(),
                signal: body.signal,
            };
            ask(&req, &state, msg).await?;
            Ok(HttpResponse::NoContent().finish())
        }
        .await,
    )
}

#[derive(Deserialize)]
struct LogsQuery {
    tail: Option<u64>,
}

async fn logs(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            let session = named(&req, &state, &path, RequestKind::History).await?;
            let tail = query::<LogsQuery>(&req)?.tail.unwrap_or(DEFAULT_TAIL);
            let stream_permit = state.streams.admit(&req)?;
            let permit = state
                .logs_streams
                .clone()
                .try_acquire_owned()
                .map_err(|_| {
                    ApiError::new(
                        ErrorCode::Unavailable,
                        format!(
                            "{MAX_LOGS_STREAMS} logs streams already run on this node; \
                         try again when one ends"
                        ),
                    )
                })?;
            let mut ask = NodeAsk(state.clone());
            let plan = Tail::plan(&mut ask, &session, tail)
                .await
                .map_err(api_error)?;
            let seq = plan.seq();
            // Streamed page by page: memory stays bounded for any `tail`.
            // The permit goes with the stream: held until it ends or is
            // dropped (the client went away).
            let body = futures_util::stream::unfold(
                Some((plan, ask, Utf8Decoder::default(), permit)),
                |walk| async move {
                    let (mut plan, mut ask, mut lossy, permit) = walk?;
                    match plan.next(&mut ask).await {
                        Ok(Some(data)) => {
                            let text = lossy.decode(&data).into_owned();
                            Some((Ok(Bytes::from(text)), Some((plan, ask, lossy, permit))))
                        }
                        Ok(None) => lossy
                            .finish()
                            .map(|c| (Ok(Bytes::from(c.to_string())), None)),
                        Err(e) => {
                            tracing::warn!("logs of {}: {e:#}", plan.session());
                            Some((Err(actix_web::error::ErrorInternalServerError(e)), None))
                        }
                    }
                },
            );
            Ok(HttpResponse::Ok()
                .content_type("text/plain; charset=utf-8")
                .insert_header(("X-Termesh-Seq", seq.to_string()))
                .streaming(stream_permit.hold(body)))
        }
        .await,
    )
}

/// The node answering the requests of a streamed reply.
struct NodeAsk(web::Data<AppState>);

impl Ask for NodeAsk {
    async fn ask(&mut self, make: impl FnOnce(u64) -> ClientMsg) -> anyhow::Result<ServerMsg> {
        Ok(self.0.node.ask(make(1)).await?)
    }
}

fn api_error(e: anyhow::Error) -> ApiError {
    match e.downcast::<ApiError>() {
        Ok(e) => e,
        Err(e) => ApiError::new(ErrorCode::Internal, format!("{e:#}")),
    }
}

#[derive(Deserialize)]
struct ScreenQuery {
    format: Option<String>,
    scrollback: Option<usize>,
}

async fn screen(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            let session = named(&req, &state, &path, RequestKind::Screen).await?;
            let q: ScreenQuery = query(&req)?;
            let text = match q.format.as_deref() {
                Some("text") => true,
                None | Some("json") => false,
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "`format` {other:?}: use \"text\" or \"json\""
                    )))
                }
            };
            let text_response = |rows: Vec<String>| {
                HttpResponse::Ok()
                    .content_type("text/plain; charset=utf-8")
                    .body(rows.join("\n") + "\n")
            };
            if text && matches!(state.node.route_session(&session)?, Route::Here) {
                let r = state.node.screen(&session, ScreenWant::Text).await?;
                return Ok(text_response(r.out.into_lines().ok_or_else(mismatch)?));
            }
            // Here or at its owner: the snapshot, as text drawn here.
            let msg = ClientMsg::Screen {
                id: 1,
                session: session.clone(),
                scrollback: q.scrollback.map(|n| n as u64),
            };
            let ServerMsg::Snapshot {
                seq,
                cols,
                rows,
                data,
                ..
            } = ask(&req, &state, msg).await?
            else {
                return Err(mismatch());
            };
            if text {
                return Ok(text_response(crate::text::render_text(&data, cols, rows)));
            }
            Ok(HttpResponse::Ok().json(serde_json::json!({
                "seq": seq,
                "cols": cols,
                "rows": rows,
                "data": String::from_utf8_lossy(&data),
            })))
        }
        .await,
    )
}

/// `GET /sessions/{id}/history`: the screen model's lines, or with
/// `before_seq` or `rows` a page of the stored output (PROTOCOL.md
/// section 14).
#[derive(Deserialize)]
struct HistoryQuery {
    before_seq: Option<u64>,
    rows: Option<u32>,
}

async fn history(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            let session = named(&req, &state, &path, RequestKind::History).await?;
            let q = query::<HistoryQuery>(&req)?;
            let msg = ClientMsg::History {
                id: 1,
                session: session.clone(),
                limit: None,
                before_seq: q.before_seq,
                rows: q.rows,
            };
            let ServerMsg::History {
                seq,
                lines,
                first_seq,
                more,
                ..
            } = ask(&req, &state, msg).await?
            else {
                return Err(mismatch());
            };
            let mut body = serde_json::json!({ "seq": seq, "lines": lines.unwrap_or_default() });
            if let (Some(first_seq), Some(more)) = (first_seq, more) {
                body["first_seq"] = first_seq.into();
                body["more"] = more.into();
            }
            Ok(HttpResponse::Ok().json(body))
        }
        .await,
    )
}

/// Each screen request kind is answered with its own output kind.
fn mismatch() -> ApiError {
    ApiError::new(
        ErrorCode::Internal,
        "the screen model answered the wrong kind",
    )
}
