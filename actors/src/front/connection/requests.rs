//! Routing of each client request (PROTOCOL.md section 5) for one connection.

use std::sync::atomic::Ordering;

use actix::prelude::*;
use actix_web_actors::ws::WebsocketContext;
use futures_util::FutureExt;
use termesh_transport::{encode_server, ClientMsg, ErrorCode, ServerMsg, MAX_SCROLLBACK};

use super::slots::Slot;
use super::{ConnectionActor, Sub};
use crate::directory::create::size_field;
use crate::directory::registry::{Watch, NEXT_SUB_ID};
use crate::directory::watch::WatchQueue;
use crate::error::ApiError;
use crate::front::request::{check_role, expected_reply, ids, spec, Class};
use crate::front::tokens::Recheck;
use crate::output::publisher::Kind;
use crate::session::{Ack, ClaimSize, Subscribe, Unsubscribe};
use termesh_config::defaults::{MAX_COLS, MAX_ROWS};

type Ctx = WebsocketContext<ConnectionActor>;

/// Sessions one connection may subscribe to at once: each may hold a
/// snapshot and a window of output queued for it.
pub const MAX_SUBSCRIPTIONS: usize = 256;

impl ConnectionActor {
    pub(super) fn dispatch(&mut self, msg: ClientMsg, ctx: &mut Ctx) {
        let (id, session) = ids(&msg);
        if let ClientMsg::Auth { id, token } = &msg {
            match termesh_config::verify(&self.node.tokens.current(), token) {
                Some(role) => {
                    self.role = Some(role);
                    self.token
                        .set(&self.node.tokens, termesh_config::digest(token));
                    self.send(ctx, &ServerMsg::Ok { id: *id });
                }
                None => self.send_error(
                    ctx,
                    Some(*id),
                    None,
                    ApiError::new(ErrorCode::Unauthorized, "unknown token"),
                ),
            }
            return;
        }
        if !self.check_token_again(ctx) {
            return;
        }
        let Some(role) = self.role else {
            let err = ApiError::new(
                ErrorCode::Unauthorized,
                "authenticate first (auth message, bearer header or ?token=)",
            );
            return self.send_error(ctx, id, session, err);
        };
        let what = format!("`{}`", msg.kind());
        if let Err(err) = check_role(&what, spec(&msg).role, role) {
            return self.send_error(ctx, id, session, err);
        }
        if let Err(err) = self.route(msg, ctx) {
            self.send_error(ctx, id, session, err);
        }
    }

    /// The node's tokens changed (a reload): the token this connection
    /// authenticated with gives its role now; a revoked one closes the
    /// connection (4401). `false` when it closed.
    pub(super) fn check_token_again(&mut self, ctx: &mut Ctx) -> bool {
        match self.token.recheck(&self.node.tokens) {
            Recheck::Same => true,
            Recheck::Role(role) => {
                self.role = Some(role);
                true
            }
            Recheck::Revoked => {
                tracing::info!(
                    conn = self.id,
                    "closing a connection whose token was revoked"
                );
                super::close_revoked(ctx);
                false
            }
        }
    }

    /// Routes a request by its row of the table (`NodeCtx::submit`, as
    /// every front end does): screens and histories take a slot first,
    /// wherever they are answered (a remote session's too); the
    /// connection's own kinds are answered here. An answer made at once is
    /// sent at once, in order; a later one when it comes (holding its slot
    /// until the socket takes it).
    fn route(&mut self, msg: ClientMsg, ctx: &mut Ctx) -> Result<(), ApiError> {
        if let ClientMsg::Grep { node: None, .. } = &msg {
            return self.grep_everywhere(msg, ctx);
        }
        if let ClientMsg::Input { session, .. } = &msg {
            // Its held output (the echo's way) goes first from now on.
            self.lanes.typed(session, std::time::Instant::now());
            self.pump(ctx);
        }
        if let ClientMsg::Resize {
            session,
            cols,
            rows,
        } = &msg
        {
            // Who sized it, so that leaving gives the size back; sent
            // before the resize, which it arrives before. A bad size is
            // the resize's to refuse.
            let size = (
                size_field("cols", Some(*cols), 0, MAX_COLS),
                size_field("rows", Some(*rows), 0, MAX_ROWS),
            );
            if let (Some(sub), (Ok(cols), Ok(rows))) = (self.subs.get(session.as_str()), size) {
                sub.feed.claim.do_send(ClaimSize {
                    sub: sub.id,
                    cols,
                    rows,
                });
            }
        }
        let class = spec(&msg).class;
        if class == Class::Connection {
            return self.connection_request(msg, ctx);
        }
        let slot = match class {
            Class::Screen => Some(self.slots.take(expected_reply(&msg))?),
            _ => None,
        };
        let (id, session) = ids(&msg);
        let mut reply = self.node.submit(msg);
        if let Some(done) = (&mut reply).now_or_never() {
            if let Some(slot) = slot {
                self.slots.release(slot);
            }
            let answer = done?;
            // Input and resize answer only when they fail.
            if id.is_some() || matches!(answer, ServerMsg::Error { .. }) {
                self.send(ctx, &answer);
            }
            return Ok(());
        }
        match id {
            Some(id) => self.spawn_reply(ctx, id, session, reply, slot),
            // Input and resize sent on: only an error is worth a message.
            None => {
                if let Some(slot) = slot {
                    self.slots.release(slot);
                }
                ctx.spawn(reply.into_actor(self).map(move |answer, act, ctx| {
                    let out = match answer {
                        Ok(msg @ ServerMsg::Error { .. }) => msg,
                        Ok(_) => return,
                        Err(e) => e.to_message(None, session),
                    };
                    act.send(ctx, &out);
                }));
            }
        }
        Ok(())
    }

    /// The kinds that are this connection's own state.
    fn connection_request(&mut self, msg: ClientMsg, ctx: &mut Ctx) -> Result<(), ApiError> {
        let expect = expected_reply(&msg);
        match msg {
            // Answered by `dispatch` before routing.
            ClientMsg::Auth { .. } => {}
            ClientMsg::Ping { nonce } => self.send(ctx, &ServerMsg::Pong { nonce }),
            ClientMsg::List { id, after, limit } => {
                // Off this connection's thread (other connections share
                // it), holding a slot like a screen: a client cannot queue
                // gathers of a large directory without bound.
                let slot = self.slots.take(expect)?;
                let node = self.node.clone();
                let work = async move {
                    let (sessions, next) = node.page_off_thread(after, limit).await?;
                    Ok(ServerMsg::Sessions { id, sessions, next })
                };
                self.spawn_reply(ctx, id, None, work, Some(slot));
            }
            ClientMsg::Watch { id } => {
                if self.watch.is_none() {
                    let queue = WatchQueue::default();
                    self.watch = Some(queue.clone());
                    self.node.registry.do_send(Watch {
                        conn: self.id,
                        queue,
                        sink: ctx.address().recipient(),
                        local_only: false,
                        known_remote: self.node.mesh.view.ids().into_iter().collect(),
                    });
                }
                self.send(ctx, &ServerMsg::Ok { id });
            }
            ClientMsg::Subscribe {
                id,
                session,
                from_seq,
                window,
                scrollback,
            } => {
                let (key, feed) = self.node.feed(&session)?;
                let existing = self.subs.get(&key).map(|s| s.id);
                if existing.is_none() && self.subs.len() >= MAX_SUBSCRIPTIONS {
                    return Err(ApiError::bad_request(format!(
                        "a connection may subscribe to at most {MAX_SUBSCRIPTIONS} sessions; \
                         unsubscribe from one first, or open another connection"
                    )));
                }
                let sub_id =
                    existing.unwrap_or_else(|| NEXT_SUB_ID.fetch_add(1, Ordering::Relaxed));
                // A replacement discards what the old subscription still had
                // in flight: nothing of it may follow the new `subscribed`.
                let awaiting = existing.is_none() || from_seq.is_some();
                if existing.is_some() && awaiting {
                    // Its window is new: what was held of the old one goes.
                    self.lanes.forget(&key);
                    self.report_held();
                }
                let prior_awaiting = self.subs.get(&key).is_some_and(|s| s.awaiting);
                self.subs.insert(
                    key,
                    Sub {
                        id: sub_id,
                        feed: feed.clone(),
                        awaiting: awaiting || prior_awaiting,
                        req_id: id,
                    },
                );
                feed.subscribe.do_send(Subscribe {
                    sub: sub_id,
                    sink: ctx.address().recipient(),
                    req_id: id,
                    from_seq,
                    window: self.node.window(window),
                    scrollback: scrollback.unwrap_or(0).min(MAX_SCROLLBACK) as usize,
                    kind: Kind::Viewer,
                });
            }
            ClientMsg::Unsubscribe { session } => {
                let sub = self
                    .subs
                    .remove(session.as_str())
                    .ok_or_else(|| not_subscribed(&session))?;
                sub.feed.unsubscribe.do_send(Unsubscribe { sub: sub.id });
                self.lanes.forget(&session);
                self.report_held();
            }
            // An ack that raced an unsubscribe is ignored (section 8).
            ClientMsg::Ack { session, seq } => {
                if let Some(sub) = self.subs.get(session.as_str()) {
                    sub.feed.ack.do_send(Ack { sub: sub.id, seq });
                }
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "`{}` is not a connection request",
                    other.kind()
                )))
            }
        }
        Ok(())
    }

    /// Runs `work` without blocking this connection and sends its reply
    /// (bounded by `MAX_REPLY`); a reply slot it held stays held until the
    /// socket has taken the reply.
    fn spawn_reply<F>(
        &mut self,
        ctx: &mut Ctx,
        id: u64,
        session: Option<String>,
        work: F,
        slot: Option<Slot>,
    ) where
        F: std::future::Future<Output = Result<ServerMsg, ApiError>> + 'static,
    {
        ctx.spawn(
            work.into_actor(self)
                .map(move |result, act, ctx| match (result, slot) {
                    (Ok(msg), Some(slot)) => {
                        let bytes = act.slots.reply(slot, encode_server(&msg.bounded()));
                        ctx.binary(bytes);
                    }
                    (Ok(msg), None) => act.send(ctx, &msg.bounded()),
                    (Err(err), slot) => {
                        if let Some(slot) = slot {
                            act.slots.release(slot);
                        }
                        act.send_error(ctx, Some(id), session, err)
                    }
                }),
        );
    }
}

fn not_subscribed(session: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("this connection is not subscribed to `{session}`"),
    )
}
