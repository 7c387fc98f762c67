//! The REST calls over what the store keeps (PROTOCOL.md section 12):
//! a session's events (`/events`, and `/events/stream` as Server-Sent
//! Events), `revive`, and `export` as asciicast v2. Each works for a
//! session of any node: the owner's store answers, through a forwarded
//! `events` / `read_output` / `revive` request when it is another node.

use std::time::{Duration, Instant};

use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use termesh_actors::cluster::forward::Route;
use termesh_actors::error::ApiError;
use termesh_actors::front::ops::NodeCtx;
use termesh_actors::store::LiveEvent;
use termesh_config::Role;
use termesh_transport::{ClientMsg, ErrorCode, ServerMsg, StoredFrame, MAX_EVENTS};
use tokio::sync::broadcast::{self, error::RecvError};

use super::auth::require;
use super::auth::respond;
use super::AppState;
use crate::export::CastWriter;

/// An SSE stream with nothing to say sends a comment this often, so
/// proxies keep it and a dead client is noticed.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// How often the stream of another node's session asks its owner.
const REMOTE_POLL: Duration = Duration::from_secs(1);

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/sessions/{id}/events", web::get().to(events))
        .route("/sessions/{id}/events/stream", web::get().to(events_stream))
        .route("/sessions/{id}/revive", web::post().to(revive))
        .route("/sessions/{id}/export", web::get().to(export));
}

pub(super) fn mismatch(what: &str) -> ApiError {
    ApiError::new(
        ErrorCode::Internal,
        format!("the owner answered `{what}` with another message"),
    )
}

async fn events_page(
    node: &NodeCtx,
    session: &str,
    after: u64,
    limit: u64,
) -> Result<Vec<Value>, ApiError> {
    let msg = ClientMsg::Events {
        id: 1,
        session: session.to_string(),
        after: Some(after),
        limit: Some(limit),
    };
    match node.ask(msg).await? {
        ServerMsg::Events { events, .. } => Ok(events),
        _ => Err(mismatch("events")),
    }
}

async fn output_page(
    node: &NodeCtx,
    session: &str,
    after: u64,
) -> Result<Vec<StoredFrame>, ApiError> {
    let msg = ClientMsg::ReadOutput {
        id: 1,
        session: session.to_string(),
        after: Some(after),
        max_bytes: None,
    };
    match node.ask(msg).await? {
        ServerMsg::StoredOutput { frames, .. } => Ok(frames),
        _ => Err(mismatch("read_output")),
    }
}

fn event_id(e: &Value) -> u64 {
    e.get("id").and_then(Value::as_u64).unwrap_or(0)
}

#[derive(Deserialize)]
struct EventsQuery {
    after: Option<u64>,
    limit: Option<u64>,
}

async fn events(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            require(&req, &state.node.tokens, Role::Viewer)?;
            let path = state.node.resolve_name(&path).await?;
            let q: EventsQuery = super::auth::query(&req)?;
            let limit = q.limit.unwrap_or(MAX_EVENTS);
            let events = events_page(&state.node, &path, q.after.unwrap_or(0), limit).await?;
            Ok(HttpResponse::Ok().json(events))
        }
        .await,
    )
}

#[derive(Deserialize)]
struct StreamQuery {
    last_event_id: Option<String>,
}

/// Where the stream stands.
struct Stream {
    node: NodeCtx,
    session: String,
    /// The last event id sent.
    last: u64,
    /// This node's live events (its own sessions); `None` for another
    /// node's session, which is polled.
    live: Option<broadcast::Receiver<LiveEvent>>,
    /// Stored events still to read before live ones.
    replaying: bool,
    done: bool,
    /// Since when nothing was sent (for the keepalive of a polled stream).
    quiet_since: Instant,
}

impl Stream {
    /// The next chunk of the stream: stored events after `last`, or the
    /// next live one, or a keepalive comment.
    async fn next(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        loop {
            if self.replaying || self.live.is_none() {
                match events_page(&self.node, &self.session, self.last, MAX_EVENTS).await {
                    Ok(page) if !page.is_empty() => return Some(self.send(page)),
                    Ok(_) => self.replaying = false,
                    Err(e) => return Some(self.fail(e)),
                }
            }
            let Some(live) = self.live.as_mut() else {
                if self.quiet_since.elapsed() >= KEEPALIVE {
                    self.quiet_since = Instant::now();
                    return Some(Bytes::from_static(b": keepalive\n\n"));
                }
                tokio::time::sleep(REMOTE_POLL).await;
                continue;
            };
            match tokio::time::timeout(KEEPALIVE, live.recv()).await {
                Err(_) => return Some(Bytes::from_static(b": keepalive\n\n")),
                Ok(Ok(ev)) => {
                    // Repeats of what the replay sent are skipped by id.
                    if *ev.session == *self.session && ev.entry.n > self.last {
                        return Some(self.send(vec![ev.entry.event_json()]));
                    }
                }
                // Fell behind the live channel: read the store again.
                Ok(Err(RecvError::Lagged(_))) => self.replaying = true,
                Ok(Err(RecvError::Closed)) => return None,
            }
        }
    }

    fn send(&mut self, events: Vec<Value>) -> Bytes {
        self.quiet_since = Instant::now();
        let mut out = String::new();
        for e in events {
            self.last = self.last.max(event_id(&e));
            if e.get("kind").and_then(Value::as_str) == Some("removed") {
                self.done = true;
            }
            out.push_str(&format!("id: {}\ndata: {}\n\n", event_id(&e), e));
        }
        Bytes::from(out)
    }

    fn fail(&mut self, e: ApiError) -> Bytes {
        self.done = true;
        let body = serde_json::json!({ "code": e.code.as_str(), "message": e.message });
        Bytes::from(format!("event: error\ndata: {body}\n\n"))
    }
}

/// Server-Sent Events: the stored events after `Last-Event-ID` (or
/// `?last_event_id=`), then live ones, none lost or repeated between the
/// two: the live subscription starts before the store is read, and ids
/// tell what the replay already sent.
async fn events_stream(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            require(&req, &state.node.tokens, Role::Viewer)?;
            let path = state.node.resolve_name(&path).await?;
            let permit = state.streams.admit(&req)?;
            let q: StreamQuery = super::auth::query(&req)?;
            let header = req
                .headers()
                .get("Last-Event-ID")
                .map(|v| v.to_str().unwrap_or("?").to_string());
            let last = match header.or(q.last_event_id) {
                None => 0,
                Some(text) => text.trim().parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "Last-Event-ID {text:?} is not an event id (a whole number)"
                    ))
                })?,
            };
            let node = state.node.clone();
            let live = match node.route_session(&path)? {
                Route::Here => Some(node.store()?.live_events()),
                Route::Owner(_) => None,
            };
            // The first page now: a bad session or a node without a store
            // is an HTTP error, not an event in a 200 stream.
            let first = events_page(&node, &path, last, MAX_EVENTS).await?;
            let mut stream = Stream {
                node,
                session: path.to_string(),
                last,
                live,
                replaying: true,
                done: false,
                quiet_since: Instant::now(),
            };
            let first = (!first.is_empty()).then(|| stream.send(first));
            let body =
                futures_util::stream::unfold((stream, first), |(mut stream, first)| async move {
                    let chunk = match first {
                        Some(chunk) => chunk,
                        None => stream.next().await?,
                    };
                    Some((Ok::<_, actix_web::Error>(chunk), (stream, None)))
                });
            Ok(HttpResponse::Ok()
                .content_type("text/event-stream")
                .insert_header(("Cache-Control", "no-cache"))
                .insert_header(("X-Accel-Buffering", "no"))
                .streaming(permit.hold(body)))
        }
        .await,
    )
}

async fn revive(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            require(&req, &state.node.tokens, Role::Operator)?;
            let path = state.node.resolve_name(&path).await?;
            let msg = ClientMsg::Revive {
                id: 1,
                session: path.to_string(),
            };
            state.node.ask(msg).await?;
            Ok(HttpResponse::NoContent().finish())
        }
        .await,
    )
}

/// The stored output as an asciicast v2 file, streamed page by page.
async fn export(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    respond(
        async {
            require(&req, &state.node.tokens, Role::Viewer)?;
            let path = state.node.resolve_name(&path).await?;
            let permit = state.streams.admit(&req)?;
            let node = state.node.clone();
            let info = node.info(&path)?;
            let events = all_events(&node, &path).await?;
            let first = output_page(&node, &path, 0).await?;
            let (writer, header) = CastWriter::new(&info, &events);
            let session = path.to_string();
            let state = (node, session, writer, Some(header), Some(first), false);
            let body = futures_util::stream::unfold(state, |mut st| async move {
                let (node, session, writer, header, pending, finished) = &mut st;
                if *finished {
                    return None;
                }
                let mut chunk = header.take().unwrap_or_default();
                let page = match pending.take() {
                    Some(page) => Ok(page),
                    None => output_page(node, session, writer.last_seq()).await,
                };
                match page {
                    Ok(page) if page.is_empty() => {
                        chunk.push_str(&writer.finish());
                        *finished = true;
                    }
                    Ok(page) => chunk.push_str(&writer.page(&page)),
                    Err(e) => {
                        // Mid-stream: the status is sent; the file ends short.
                        tracing::warn!(session = %session, "export stopped: {}", e.message);
                        *finished = true;
                    }
                }
                Some((Ok::<_, actix_web::Error>(Bytes::from(chunk)), st))
            });
            Ok(HttpResponse::Ok()
                .content_type("application/x-asciicast")
                .insert_header((
                    "Content-Disposition",
                    format!("attachment; filename=\"{}.cast\"", &*path),
                ))
                .streaming(permit.hold(body)))
        }
        .await,
    )
}

/// Every stored event of a session (at most what retention keeps).
pub async fn all_events(node: &NodeCtx, session: &str) -> Result<Vec<Value>, ApiError> {
    let mut all: Vec<Value> = Vec::new();
    loop {
        let after = all.last().map_or(0, event_id);
        let page = events_page(node, session, after, MAX_EVENTS).await?;
        if page.is_empty() {
            return Ok(all);
        }
        all.extend(page);
    }
}
