//! `RawActor`: the raw terminal endpoint (`/sessions/{id}/raw`, PROTOCOL.md
//! section 11) for simple clients such as xterm.js's attach addon. It sends
//! raw bytes (a snapshot, then live output) and writes what it receives to
//! the PTY, except a JSON resize text frame.
//!
//! Flow control: the client cannot ack, so this actor acks each frame as it
//! hands it to the socket. When the socket's write buffer is full the actor
//! is not polled, so acks stop and the session stops sending: the window
//! still bounds what a slow raw client pins. A raw client that falls out of
//! the replay window is repainted (reset + fresh snapshot).

use actix::prelude::*;
use actix_web_actors::ws::{self, CloseCode, CloseReason};
use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use termesh_config::Role;
use termesh_transport::{ClientMsg, ServerMsg};

use crate::directory::registry::NEXT_SUB_ID;
use crate::front::connection::{close_revoked, CloseConnection, Connections};
use crate::front::fragments::{Assembled, Reassembler};
use crate::front::frames::Incoming;
use crate::front::ops::NodeCtx;
use crate::front::request::{check_role, spec};
use crate::front::tokens::{HeldToken, Recheck};
use crate::output::feed::Feed;
use crate::output::publisher::Kind;
use crate::session::{Ack, Deliver, Delivery, SubId, Subscribe, Unsubscribe};
use termesh_transport::MAX_INBOUND_FRAME;

/// Window of a raw subscription.
const RAW_WINDOW: u64 = 256 * 1024;

pub struct RawActor {
    conn: u64,
    node: NodeCtx,
    connections: Connections,
    id: Arc<str>,
    feed: Feed,
    sub: SubId,
    role: Role,
    /// The token the upgrade presented, followed across reloads: a revoked
    /// one closes the connection, a changed role applies at once.
    token: HeldToken,
    /// A resync is under way: the next snapshot repaints from a reset.
    repaint: bool,
    /// A fragmented message being assembled (within the 1 MiB bound).
    partial: Reassembler,
    /// The client's decoded frames, until `started` adds them.
    incoming: Option<Incoming>,
}

#[derive(Deserialize)]
struct ResizeText {
    #[serde(rename = "type")]
    kind: String,
    cols: u64,
    rows: u64,
}

impl RawActor {
    /// `feed` is the session's (or its mirror's), from `NodeCtx::feed`;
    /// `digest` the presented token's (`termesh_config::digest`).
    pub fn new(
        node: NodeCtx,
        connections: Connections,
        session: (Arc<str>, Feed),
        role: Role,
        digest: Option<[u8; 32]>,
    ) -> Self {
        RawActor {
            token: HeldToken::new(&node.tokens, digest),
            conn: Connections::next_id(),
            node,
            connections,
            id: session.0,
            feed: session.1,
            sub: NEXT_SUB_ID.fetch_add(1, Ordering::Relaxed),
            role,
            repaint: false,
            partial: Reassembler::new(MAX_INBOUND_FRAME),
            incoming: None,
        }
    }

    /// Takes the client's frames from `incoming` (decoded one at a time,
    /// see `front::frames`) rather than from the context's own stream.
    pub fn with_incoming(mut self, incoming: Incoming) -> Self {
        self.incoming = Some(incoming);
        self
    }

    fn input(&self, data: Bytes) {
        self.to_owner(ClientMsg::Input {
            session: self.id.to_string(),
            data: data.to_vec(),
        });
    }

    /// Input and resize through the request table, as a WebSocket client's:
    /// its role checked, here or forwarded to the session's owner, in
    /// order. Only failures are worth a word (in the log: the raw protocol
    /// has no error message).
    fn to_owner(&self, msg: ClientMsg) {
        if let Err(e) = check_role(msg.kind(), spec(&msg).role, self.role) {
            tracing::debug!(session = %self.id, "raw {e}");
            return;
        }
        let mut reply = self.node.submit(msg);
        let id = self.id.clone();
        let said = move |answer: Result<ServerMsg, crate::error::ApiError>| match answer {
            Ok(ServerMsg::Error { message, .. }) => {
                tracing::debug!(session = %id, "raw input refused: {message}")
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(session = %id, "raw input refused: {e}"),
        };
        // Answered here at once (the usual case): nothing to wait for.
        match futures_util::FutureExt::now_or_never(&mut reply) {
            Some(answer) => said(answer),
            None => {
                actix::spawn(async move { said(reply.await) });
            }
        }
    }

    fn text(&self, text: &str) {
        if let Ok(resize) = serde_json::from_str::<ResizeText>(text) {
            if resize.kind == "resize" {
                self.to_owner(ClientMsg::Resize {
                    session: self.id.to_string(),
                    cols: resize.cols,
                    rows: resize.rows,
                });
                return;
            }
        }
        self.input(Bytes::copy_from_slice(text.as_bytes()));
    }
}

impl RawActor {
    /// `false` when the token was revoked and the connection closes.
    fn token_still_good(&mut self, ctx: &mut ws::WebsocketContext<Self>) -> bool {
        match self.token.recheck(&self.node.tokens) {
            Recheck::Same => true,
            Recheck::Role(role) => {
                self.role = role;
                true
            }
            Recheck::Revoked => {
                tracing::info!(session = %self.id, "closing a raw connection whose token was revoked");
                close_revoked(ctx);
                false
            }
        }
    }

    fn too_big(ctx: &mut ws::WebsocketContext<Self>) {
        ctx.close(Some(CloseReason {
            code: CloseCode::Size,
            description: Some(format!("messages are limited to {MAX_INBOUND_FRAME} bytes")),
        }));
        ctx.stop();
    }
}

impl Actor for RawActor {
    type Context = ws::WebsocketContext<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(incoming) = self.incoming.take() {
            ctx.add_stream(incoming);
        }
        self.connections.add(self.conn, ctx.address().recipient());
        self.feed.subscribe.do_send(Subscribe {
            sub: self.sub,
            sink: ctx.address().recipient(),
            req_id: 0,
            from_seq: None,
            window: RAW_WINDOW,
            scrollback: 0,
            kind: Kind::Viewer,
        });
        ctx.run_interval(self.node.ws.ping_interval, |act, ctx| {
            // A revoked token closes even a connection that only watches.
            if act.token_still_good(ctx) {
                ctx.ping(b"");
            }
        });
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        self.connections.remove(self.conn);
        self.feed.unsubscribe.do_send(Unsubscribe { sub: self.sub });
    }
}

impl Handler<Deliver> for RawActor {
    type Result = ();

    fn handle(&mut self, msg: Deliver, ctx: &mut Self::Context) {
        match msg.item {
            Delivery::Output(frame) => {
                ctx.binary(frame.data);
                self.feed.ack.do_send(Ack {
                    sub: self.sub,
                    seq: frame.seq,
                });
            }
            Delivery::Snapshot { data, .. } => {
                if std::mem::take(&mut self.repaint) {
                    let mut out = BytesMut::from(&b"\x1bc"[..]);
                    out.extend_from_slice(&data);
                    ctx.binary(out.freeze());
                } else {
                    ctx.binary(data);
                }
            }
            Delivery::ResyncRequired { .. } => self.repaint = true,
            Delivery::Closed { removed } => {
                ctx.close(Some(CloseReason {
                    code: if removed {
                        CloseCode::Normal
                    } else {
                        CloseCode::Away
                    },
                    description: Some(
                        if removed {
                            "session removed"
                        } else {
                            "node shutting down"
                        }
                        .into(),
                    ),
                }));
                ctx.stop();
            }
            Delivery::Failed { message, .. } => {
                tracing::error!(session = %self.id, "raw client closed: {message}");
                ctx.close(Some(CloseReason {
                    code: CloseCode::Error,
                    description: Some("snapshot failed".into()),
                }));
                ctx.stop();
            }
            Delivery::Subscribed { .. } | Delivery::Event(_) => {}
        }
    }
}

impl Handler<CloseConnection> for RawActor {
    type Result = ();

    fn handle(&mut self, msg: CloseConnection, ctx: &mut Self::Context) {
        ctx.close(Some(CloseReason {
            code: CloseCode::from(msg.code),
            description: Some("node shutting down".into()),
        }));
        ctx.stop();
    }
}

impl StreamHandler<Result<ws::Message, ws::ProtocolError>> for RawActor {
    fn handle(&mut self, item: Result<ws::Message, ws::ProtocolError>, ctx: &mut Self::Context) {
        if !self.token_still_good(ctx) {
            return;
        }
        match item {
            Ok(ws::Message::Binary(data)) => self.input(data),
            Ok(ws::Message::Text(text)) => self.text(&text),
            Ok(ws::Message::Ping(p)) => ctx.pong(&p),
            Ok(ws::Message::Close(reason)) => {
                ctx.close(reason);
                ctx.stop();
            }
            Ok(ws::Message::Continuation(item)) => match self.partial.push(item) {
                Assembled::Message { binary: true, data } => self.input(data),
                Assembled::Message {
                    binary: false,
                    data,
                } => self.text(&String::from_utf8_lossy(&data)),
                Assembled::TooBig => Self::too_big(ctx),
                Assembled::Pending | Assembled::Orphan => {}
            },
            Ok(ws::Message::Pong(_) | ws::Message::Nop) => {}
            Err(ws::ProtocolError::Overflow) => Self::too_big(ctx),
            Err(_) => ctx.stop(),
        }
    }
}
