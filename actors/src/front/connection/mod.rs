//! `ConnectionActor`: one per client WebSocket (`/ws`). Decodes frames,
//! enforces authentication and roles, routes requests, and encodes what
//! sessions deliver. It keeps no session state beyond its subscriptions.
//!
//! Slow consumers: output reaches this actor only within the subscription's
//! credit window, so its mailbox, the bulk output its lanes hold (`lanes`:
//! typed-into sessions first, the rest within a flight learned from ping
//! marks) and the socket's write buffer together hold at most the sum of
//! its windows; a client that stops reading stops receiving, and
//! TCP_USER_TIMEOUT (set on the listener) reaps a dead peer.

mod deliver;
mod grep;
mod lanes;
mod requests;
mod slots;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use actix_web_actors::ws::{self, CloseCode, CloseReason};
use termesh_config::Role;
use termesh_transport::{encode_server, ErrorCode, ServerMsg, MAX_INBOUND_FRAME, PROTO_VERSION};

use crate::directory::registry::Unwatch;
use crate::directory::watch::WatchQueue;
use crate::error::ApiError;
use crate::front::fragments::{Assembled, Reassembler};
use crate::front::frames::Incoming;
use crate::front::ops::NodeCtx;
use crate::front::tokens::HeldToken;
use crate::liveness::conn::{Liveness, Verdict};
use crate::metrics::Metrics;
use crate::output::feed::Feed;
use crate::session::{SubId, Unsubscribe};

pub use deliver::CloseConnection;
pub use slots::{Outgoing, PullClock, MAX_SCREENS_IN_FLIGHT, MAX_UNSENT_REPLIES};

/// Close code for "not authenticated in time".
pub const CLOSE_UNAUTHENTICATED: u16 = 4401;

/// Closes a WebSocket (protocol or raw) whose token a reload revoked.
pub(crate) fn close_revoked<A>(ctx: &mut ws::WebsocketContext<A>)
where
    A: Actor<Context = ws::WebsocketContext<A>>,
{
    ctx.close(Some(CloseReason {
        code: CloseCode::Other(CLOSE_UNAUTHENTICATED),
        description: Some("token revoked".into()),
    }));
    ctx.stop();
}

static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

/// Open connections, so node shutdown can close each with 1001.
#[derive(Clone, Default)]
pub struct Connections(Arc<Mutex<HashMap<u64, Recipient<CloseConnection>>>>);

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Connections")
    }
}

impl Connections {
    pub fn add(&self, id: u64, sink: Recipient<CloseConnection>) {
        if let Ok(mut map) = self.0.lock() {
            map.insert(id, sink);
        }
    }

    pub fn remove(&self, id: u64) {
        if let Ok(mut map) = self.0.lock() {
            map.remove(&id);
        }
    }

    /// Asks every open connection to close with `code`; returns how many.
    pub fn close_all(&self, code: u16) -> usize {
        let sinks: Vec<_> = self
            .0
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        for sink in &sinks {
            sink.do_send(CloseConnection { code });
        }
        sinks.len()
    }

    pub fn next_id() -> u64 {
        NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed)
    }
}

/// One subscription of this connection.
struct Sub {
    id: SubId,
    feed: Feed,
    /// Until the session's `subscribed` for the latest request arrives,
    /// deliveries are leftovers of a replaced subscription and are dropped.
    awaiting: bool,
    /// The latest subscribe's request id: a failure before its
    /// `subscribed` is that request's answer.
    req_id: u64,
}

pub struct ConnectionActor {
    id: u64,
    node: NodeCtx,
    connections: Connections,
    /// `None` until authenticated.
    role: Option<Role>,
    subs: HashMap<Arc<str>, Sub>,
    /// Where the registry coalesces this connection's watch notifications.
    watch: Option<WatchQueue>,
    /// Last sign of life from the client (any frame, pong included).
    liveness: Liveness,
    /// A fragmented message being assembled (bounded by the frame limit).
    partial: Reassembler,
    /// Screen, history, list, events and read_output replies in flight
    /// or not yet taken by the socket (bounded).
    slots: slots::ReplySlots,
    /// The token this connection authenticated with, followed across
    /// reloads.
    token: HeldToken,
    /// The client's decoded frames, until `started` adds them.
    incoming: Option<Incoming>,
    /// Session traffic on its way out: interactive first, bulk within
    /// the flight limit.
    lanes: lanes::Lanes,
    /// A check on unanswered marks is scheduled.
    checking: bool,
    /// The lanes' held bytes as the node's gauge has them.
    held_reported: usize,
}

impl ConnectionActor {
    /// `role` is what the upgrade request's token granted, if any.
    /// `digest` is that token's (`termesh_config::digest`), kept to check
    /// it again when the node's tokens are reloaded.
    pub fn new(
        node: NodeCtx,
        connections: Connections,
        role: Option<Role>,
        digest: Option<[u8; 32]>,
    ) -> Self {
        let open = node.tokens.current().is_empty();
        let role = if open { Some(Role::Admin) } else { role };
        ConnectionActor {
            token: HeldToken::new(&node.tokens, digest),
            id: Connections::next_id(),
            liveness: Liveness::new(&node.stall),
            node,
            connections,
            role,
            subs: HashMap::new(),
            watch: None,
            partial: Reassembler::new(MAX_INBOUND_FRAME),
            slots: slots::ReplySlots::default(),
            incoming: None,
            lanes: lanes::Lanes::default(),
            checking: false,
            held_reported: 0,
        }
    }

    /// Takes the client's frames from `incoming` (decoded one at a time,
    /// see `front::frames`) rather than from the context's own stream.
    pub fn with_incoming(mut self, incoming: Incoming) -> Self {
        self.incoming = Some(incoming);
        self
    }

    /// The clock to wrap this connection's outgoing byte stream in (for
    /// the HTTP response): it tells the reply slots when the socket has
    /// taken their bytes.
    pub fn pull_clock(&self) -> PullClock {
        self.slots.clock()
    }

    fn send(&self, ctx: &mut ws::WebsocketContext<Self>, msg: &ServerMsg) {
        ctx.binary(encode_server(msg));
    }

    /// A frame of `session`'s traffic (`output`: an output frame), through
    /// the lanes: now, or once the flight has room.
    fn send_session(
        &mut self,
        ctx: &mut ws::WebsocketContext<Self>,
        session: &Arc<str>,
        frame: bytes::Bytes,
        output: bool,
    ) {
        let now = std::time::Instant::now();
        termesh_transport::hops::pass("out_connection", &frame);
        match self.lanes.offer(session, frame, output, now) {
            lanes::Offer::Now(frame) => {
                ctx.binary(frame);
                self.mark(ctx, now);
            }
            lanes::Offer::Held => {
                self.report_held();
                self.mark(ctx, now);
                self.check_later(ctx);
            }
        }
    }

    /// The node's gauge of held output follows this connection's.
    fn report_held(&mut self) {
        let now = self.lanes.held_bytes();
        let delta = now as i64 - self.held_reported as i64;
        if delta != 0 {
            Metrics::gauge(&self.node.metrics.held_bytes, delta);
            self.held_reported = now;
        }
    }

    /// Sends what the lanes let go now.
    pub(super) fn pump(&mut self, ctx: &mut ws::WebsocketContext<Self>) {
        let now = std::time::Instant::now();
        while let Some(frame) = self.lanes.next(now) {
            ctx.binary(frame);
            self.mark(ctx, now);
        }
        if self.lanes.watch_due() {
            self.drain_watch(ctx);
        }
        // Frames still held: a mark on its way lets them go.
        self.mark(ctx, now);
        self.report_held();
    }

    pub(super) fn mark(&mut self, ctx: &mut ws::WebsocketContext<Self>, now: std::time::Instant) {
        if let Some(payload) = self.lanes.mark(now) {
            ctx.ping(&payload);
        }
    }

    /// While frames are held, looks now and then for a client that
    /// answers no marks (its frames then go within its windows alone).
    pub(super) fn check_later(&mut self, ctx: &mut ws::WebsocketContext<Self>) {
        if self.checking {
            return;
        }
        self.checking = true;
        ctx.run_later(std::time::Duration::from_secs(1), |act, ctx| {
            act.checking = false;
            if act.lanes.check(std::time::Instant::now()) {
                Metrics::add(&act.node.metrics.pongless, 1);
                tracing::info!(
                    conn = act.id,
                    "client answers no pings: output limited by its windows alone"
                );
                act.pump(ctx);
            }
            if act.lanes.holding() {
                act.check_later(ctx);
            }
        });
    }

    fn send_error(
        &self,
        ctx: &mut ws::WebsocketContext<Self>,
        id: Option<u64>,
        session: Option<String>,
        err: ApiError,
    ) {
        self.send(
            ctx,
            &ServerMsg::Error {
                id,
                session,
                code: err.code,
                message: err.message,
            },
        );
    }

    fn heard(&mut self) {
        if self.liveness.heard(&self.node.stall) {
            Metrics::gauge(&self.node.metrics.stale_now, -1);
            tracing::info!(conn = self.id, "connection answered again; no longer stale");
        }
    }

    /// Pings, marks staleness (never a teardown), reaps an idle connection
    /// with no subscription, and closes one not authenticated in time.
    /// Silence excludes the time the node itself was stalled.
    fn start_timers(&self, ctx: &mut ws::WebsocketContext<Self>) {
        let ws = self.node.ws.clone();
        ctx.run_interval(ws.ping_interval, move |act, ctx| {
            // A revoked token closes even a connection that only listens.
            if !act.check_token_again(ctx) {
                return;
            }
            ctx.ping(b"");
            let silent = act.liveness.silent(&act.node.stall);
            let reapable = act.subs.is_empty();
            match act
                .liveness
                .check(silent, ws.stale_after, ws.reap_after, reapable)
            {
                Verdict::Alive | Verdict::Stale => {}
                Verdict::BecameStale => {
                    Metrics::add(&act.node.metrics.stale_episodes, 1);
                    Metrics::gauge(&act.node.metrics.stale_now, 1);
                    tracing::warn!(
                        conn = act.id,
                        silent_ms = silent.as_millis() as u64,
                        "connection stale (late pongs; host stall discounted)"
                    );
                }
                Verdict::Reap => {
                    Metrics::add(&act.node.metrics.reaps, 1);
                    tracing::info!(
                        conn = act.id,
                        silent_ms = silent.as_millis() as u64,
                        "closing silent connection with no subscription"
                    );
                    ctx.close(Some(CloseReason {
                        code: CloseCode::Normal,
                        description: Some("idle".into()),
                    }));
                    ctx.stop();
                }
            }
        });
        if self.role.is_none() {
            ctx.run_later(ws.auth_timeout, |act, ctx| {
                if act.role.is_none() {
                    ctx.close(Some(CloseReason {
                        code: CloseCode::Other(CLOSE_UNAUTHENTICATED),
                        description: Some("not authenticated in time".into()),
                    }));
                    ctx.stop();
                }
            });
        }
    }

    fn on_message(&mut self, data: &[u8], ctx: &mut ws::WebsocketContext<Self>) {
        match termesh_transport::decode_client(data) {
            Ok(msg) => self.dispatch(msg, ctx),
            Err(e) => {
                Metrics::add(&self.node.metrics.bad_frames, 1);
                self.send_error(ctx, e.id, e.session, ApiError::new(e.code, e.message));
            }
        }
    }

    fn bad_frame(&mut self, ctx: &mut ws::WebsocketContext<Self>, message: &str) {
        Metrics::add(&self.node.metrics.bad_frames, 1);
        self.send_error(ctx, None, None, ApiError::new(ErrorCode::BadFrame, message));
    }

    fn too_big(&mut self, ctx: &mut ws::WebsocketContext<Self>) {
        ctx.close(Some(CloseReason {
            code: CloseCode::Size,
            description: Some(format!("frames are limited to {MAX_INBOUND_FRAME} bytes")),
        }));
        ctx.stop();
    }
}

impl Actor for ConnectionActor {
    type Context = ws::WebsocketContext<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(incoming) = self.incoming.take() {
            ctx.add_stream(incoming);
        }
        Metrics::gauge(&self.node.metrics.connections, 1);
        self.connections.add(self.id, ctx.address().recipient());
        self.send(
            ctx,
            &ServerMsg::Welcome {
                proto: PROTO_VERSION,
                node: self.node.node.clone(),
                version: self.node.version.to_string(),
                ping_interval_ms: self.node.ws.ping_interval.as_millis() as u64,
                auth_required: !self.node.tokens.current().is_empty(),
            },
        );
        self.start_timers(ctx);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        Metrics::gauge(&self.node.metrics.connections, -1);
        if self.liveness.is_stale() {
            Metrics::gauge(&self.node.metrics.stale_now, -1);
        }
        self.connections.remove(self.id);
        Metrics::gauge(&self.node.metrics.held_bytes, -(self.held_reported as i64));
        for (_, sub) in self.subs.drain() {
            sub.feed.unsubscribe.do_send(Unsubscribe { sub: sub.id });
        }
        if self.watch.is_some() {
            self.node.registry.do_send(Unwatch { conn: self.id });
        }
    }
}

impl StreamHandler<Result<ws::Message, ws::ProtocolError>> for ConnectionActor {
    fn handle(&mut self, item: Result<ws::Message, ws::ProtocolError>, ctx: &mut Self::Context) {
        let msg = match item {
            Ok(msg) => msg,
            Err(ws::ProtocolError::Overflow) => return self.too_big(ctx),
            Err(e) => {
                tracing::debug!(conn = self.id, "websocket protocol error: {e}");
                ctx.stop();
                return;
            }
        };
        self.heard();
        match msg {
            ws::Message::Binary(data) => self.on_message(&data, ctx),
            ws::Message::Text(_) => self.bad_frame(
                ctx,
                "text frames are not part of the protocol; send binary MessagePack",
            ),
            ws::Message::Ping(p) => ctx.pong(&p),
            ws::Message::Pong(p) => {
                if self.lanes.pong(&p, std::time::Instant::now()) {
                    Metrics::add(&self.node.metrics.marks_answered, 1);
                    self.pump(ctx);
                }
            }
            ws::Message::Nop => {}
            ws::Message::Close(reason) => {
                ctx.close(reason);
                ctx.stop();
            }
            ws::Message::Continuation(item) => self.on_fragment(item, ctx),
        }
    }
}

impl ConnectionActor {
    fn on_fragment(&mut self, item: actix_http::ws::Item, ctx: &mut ws::WebsocketContext<Self>) {
        match self.partial.push(item) {
            Assembled::Pending => {}
            Assembled::Message { binary: true, data } => self.on_message(&data, ctx),
            Assembled::Message { binary: false, .. } => self.bad_frame(
                ctx,
                "text frames are not part of the protocol; send binary MessagePack",
            ),
            Assembled::TooBig => self.too_big(ctx),
            Assembled::Orphan => self.bad_frame(ctx, "continuation frame without a first frame"),
        }
    }
}
