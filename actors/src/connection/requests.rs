//! Routing of each client request (PROTOCOL.md section 5) for one connection.

use std::sync::atomic::Ordering;

use actix::prelude::*;
use actix_web_actors::ws::WebsocketContext;
use bytes::Bytes;
use termesh_config::Role;
use termesh_transport::{ClientMsg, ErrorCode, ServerMsg, MAX_SCROLLBACK};

use super::{ConnectionActor, Sub};
use crate::error::ApiError;
use crate::forward::Route;
use crate::publisher::Kind;
use crate::registry::{Watch, NEXT_SUB_ID};
use crate::session::{Ack, ScreenWant, Subscribe, Unsubscribe};
use crate::tokens::Recheck;
use crate::watch::WatchQueue;

/// The least role a message needs (PROTOCOL.md section 2).
pub fn required_role(msg: &ClientMsg) -> Role {
    match msg {
        ClientMsg::Auth { .. }
        | ClientMsg::List { .. }
        | ClientMsg::Watch { .. }
        | ClientMsg::Subscribe { .. }
        | ClientMsg::Unsubscribe { .. }
        | ClientMsg::Ack { .. }
        | ClientMsg::Screen { .. }
        | ClientMsg::History { .. }
        | ClientMsg::Events { .. }
        | ClientMsg::ReadOutput { .. }
        | ClientMsg::Ping { .. } => Role::Viewer,
        ClientMsg::Create { .. }
        | ClientMsg::Input { .. }
        | ClientMsg::Resize { .. }
        | ClientMsg::Kill { .. }
        | ClientMsg::Rename { .. }
        | ClientMsg::Tag { .. }
        | ClientMsg::Remove { .. }
        | ClientMsg::Revive { .. } => Role::Operator,
    }
}

/// The request id and session a message names, for its error reply.
fn ids(msg: &ClientMsg) -> (Option<u64>, Option<String>) {
    match msg {
        ClientMsg::Auth { id, .. }
        | ClientMsg::List { id }
        | ClientMsg::Watch { id }
        | ClientMsg::Create { id, .. } => (Some(*id), None),
        ClientMsg::Subscribe { id, session, .. }
        | ClientMsg::Screen { id, session, .. }
        | ClientMsg::History { id, session, .. }
        | ClientMsg::Kill { id, session, .. }
        | ClientMsg::Rename { id, session, .. }
        | ClientMsg::Tag { id, session, .. }
        | ClientMsg::Remove { id, session, .. }
        | ClientMsg::Events { id, session, .. }
        | ClientMsg::ReadOutput { id, session, .. }
        | ClientMsg::Revive { id, session } => (Some(*id), Some(session.clone())),
        ClientMsg::Unsubscribe { session }
        | ClientMsg::Ack { session, .. }
        | ClientMsg::Input { session, .. }
        | ClientMsg::Resize { session, .. } => (None, Some(session.clone())),
        ClientMsg::Ping { .. } => (None, None),
    }
}

type Ctx = WebsocketContext<ConnectionActor>;

/// Screen and history requests one connection may have in flight: each
/// can cost a render of 10,000 lines, so a client looping them is bounded.
pub const MAX_SCREENS_IN_FLIGHT: usize = 4;

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
        let needed = required_role(&msg);
        if role < needed {
            let err = ApiError::new(
                ErrorCode::Forbidden,
                format!(
                    "`{}` needs the {} role; this token is {}",
                    msg.kind(),
                    needed.as_str(),
                    role.as_str()
                ),
            );
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

    /// Sends a request about another node's session (or a create for
    /// another node) to that node, and relays its answer (`slot`: it holds
    /// a screen slot, released with the answer).
    fn forward(&mut self, owner: String, msg: ClientMsg, slot: bool, ctx: &mut Ctx) {
        let (id, session) = ids(&msg);
        let answer = self
            .node
            .forward(&owner, msg, termesh_transport::peer::HOP_BUDGET - 1);
        match id {
            Some(id) => self.spawn_reply(ctx, id, session, answer, slot),
            // Input and resize: only an error is worth a message.
            None => {
                ctx.spawn(answer.into_actor(self).map(move |answer, act, ctx| {
                    let out = match answer {
                        Ok(msg @ ServerMsg::Error { .. }) => msg,
                        Ok(_) => return,
                        Err(e) => e.to_message(None, session),
                    };
                    act.send(ctx, &out);
                }));
            }
        }
    }

    /// The node that answers `msg`, when it is not this one.
    fn owner_of(&self, msg: &ClientMsg) -> Result<Option<String>, ApiError> {
        let route = match msg {
            ClientMsg::Create { req, .. } => self.node.route_create(req.node.as_deref())?,
            ClientMsg::Input { session, .. }
            | ClientMsg::Resize { session, .. }
            | ClientMsg::Kill { session, .. }
            | ClientMsg::Rename { session, .. }
            | ClientMsg::Tag { session, .. }
            | ClientMsg::Remove { session, .. }
            | ClientMsg::Screen { session, .. }
            | ClientMsg::History { session, .. }
            | ClientMsg::Events { session, .. }
            | ClientMsg::ReadOutput { session, .. }
            | ClientMsg::Revive { session, .. } => self.node.route_session(session)?,
            _ => Route::Here,
        };
        Ok(match route {
            Route::Here => None,
            Route::Owner(node) => Some(node),
        })
    }

    /// Routes a request; screens and histories take a slot first, wherever
    /// they are answered (a remote session's too).
    fn route(&mut self, msg: ClientMsg, ctx: &mut Ctx) -> Result<(), ApiError> {
        let slot = matches!(msg, ClientMsg::Screen { .. } | ClientMsg::History { .. });
        if slot {
            self.take_screen_slot()?;
        }
        let routed = self.route_with_slot(msg, slot, ctx);
        if routed.is_err() && slot {
            self.screens_in_flight -= 1;
        }
        routed
    }

    fn route_with_slot(
        &mut self,
        msg: ClientMsg,
        slot: bool,
        ctx: &mut Ctx,
    ) -> Result<(), ApiError> {
        if let Some(owner) = self.owner_of(&msg)? {
            self.forward(owner, msg, slot, ctx);
            return Ok(());
        }
        match msg {
            // Answered by `dispatch` before routing.
            ClientMsg::Auth { .. } => {}
            ClientMsg::Ping { nonce } => self.send(ctx, &ServerMsg::Pong { nonce }),
            ClientMsg::List { id } => {
                let sessions = self.node.list();
                self.send(ctx, &ServerMsg::Sessions { id, sessions });
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
                        known_remote: self.node.cluster.list().into_iter().map(|s| s.id).collect(),
                    });
                }
                self.send(ctx, &ServerMsg::Ok { id });
            }
            ClientMsg::Create { id, req } => {
                let node = self.node.clone();
                let session = None;
                self.reply_async(ctx, id, session, async move {
                    node.create(req)
                        .await
                        .map(|session| ServerMsg::Created { id, session })
                });
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
                let sub_id =
                    existing.unwrap_or_else(|| NEXT_SUB_ID.fetch_add(1, Ordering::Relaxed));
                // A replacement discards what the old subscription still had
                // in flight: nothing of it may follow the new `subscribed`.
                let awaiting = existing.is_none() || from_seq.is_some();
                let prior_awaiting = self.subs.get(&key).is_some_and(|s| s.awaiting);
                self.subs.insert(
                    key,
                    Sub {
                        id: sub_id,
                        feed: feed.clone(),
                        awaiting: awaiting || prior_awaiting,
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
            }
            // An ack that raced an unsubscribe is ignored (section 8).
            ClientMsg::Ack { session, seq } => {
                if let Some(sub) = self.subs.get(session.as_str()) {
                    sub.feed.ack.do_send(Ack { sub: sub.id, seq });
                }
            }
            ClientMsg::Input { session, data } => self.node.input(&session, Bytes::from(data))?,
            ClientMsg::Resize {
                session,
                cols,
                rows,
            } => self.node.resize(&session, cols, rows)?,
            ClientMsg::Screen {
                id,
                session,
                scrollback,
            } => {
                let node = self.node.clone();
                let scrollback = scrollback.unwrap_or(0) as usize;
                self.reply_screen(ctx, id, Some(session.clone()), async move {
                    let r = node
                        .screen(&session, ScreenWant::Snapshot { scrollback })
                        .await?;
                    let data = r
                        .out
                        .into_snapshot()
                        .map(|d| d.to_vec())
                        .unwrap_or_default();
                    Ok(ServerMsg::Snapshot {
                        id: Some(id),
                        session,
                        seq: r.seq,
                        cols: r.cols,
                        rows: r.rows,
                        data,
                    })
                });
            }
            ClientMsg::History { id, session, limit } => {
                let node = self.node.clone();
                self.reply_screen(ctx, id, Some(session.clone()), async move {
                    match limit {
                        Some(limit) => {
                            let tail = node.raw_tail(&session, raw_limit(limit)).await?;
                            Ok(ServerMsg::History {
                                id,
                                session,
                                seq: tail.last_seq,
                                lines: None,
                                data: Some(tail.data.to_vec()),
                            })
                        }
                        None => {
                            let r = node
                                .screen(
                                    &session,
                                    ScreenWant::Lines {
                                        max: MAX_SCROLLBACK as usize,
                                    },
                                )
                                .await?;
                            let lines = r.out.into_lines().unwrap_or_default();
                            Ok(ServerMsg::History {
                                id,
                                session,
                                seq: r.seq,
                                lines: Some(lines),
                                data: None,
                            })
                        }
                    }
                });
            }
            ClientMsg::Kill {
                id,
                session,
                signal,
            } => {
                self.node.kill(&session, signal.as_deref())?;
                self.send(ctx, &ServerMsg::Ok { id });
            }
            ClientMsg::Rename { id, session, name } => {
                self.node.rename(&session, name)?;
                self.send(ctx, &ServerMsg::Ok { id });
            }
            ClientMsg::Tag { id, session, tags } => {
                self.node.tag(&session, tags)?;
                self.send(ctx, &ServerMsg::Ok { id });
            }
            msg @ (ClientMsg::Remove { id, .. }
            | ClientMsg::Events { id, .. }
            | ClientMsg::ReadOutput { id, .. }
            | ClientMsg::Revive { id, .. }) => {
                let (node, session) = (self.node.clone(), ids(&msg).1);
                self.reply_async(ctx, id, session, async move {
                    Ok(crate::forward::answer_later(node, msg).await)
                });
            }
        }
        Ok(())
    }

    fn take_screen_slot(&mut self) -> Result<(), ApiError> {
        if self.screens_in_flight >= MAX_SCREENS_IN_FLIGHT {
            return Err(ApiError::bad_request(format!(
                "{MAX_SCREENS_IN_FLIGHT} screen or history requests are already in flight \
                 on this connection; wait for their replies"
            )));
        }
        self.screens_in_flight += 1;
        Ok(())
    }

    /// `reply_async` for a request holding a screen slot, released with
    /// the reply.
    fn reply_screen<F>(&mut self, ctx: &mut Ctx, id: u64, session: Option<String>, work: F)
    where
        F: std::future::Future<Output = Result<ServerMsg, ApiError>> + 'static,
    {
        self.spawn_reply(ctx, id, session, work, true);
    }

    /// Runs `work` without blocking this connection and sends its reply.
    fn reply_async<F>(&mut self, ctx: &mut Ctx, id: u64, session: Option<String>, work: F)
    where
        F: std::future::Future<Output = Result<ServerMsg, ApiError>> + 'static,
    {
        self.spawn_reply(ctx, id, session, work, false);
    }

    fn spawn_reply<F>(
        &mut self,
        ctx: &mut Ctx,
        id: u64,
        session: Option<String>,
        work: F,
        screen_slot: bool,
    ) where
        F: std::future::Future<Output = Result<ServerMsg, ApiError>> + 'static,
    {
        ctx.spawn(work.into_actor(self).map(move |result, act, ctx| {
            if screen_slot {
                act.screens_in_flight -= 1;
            }
            match result {
                Ok(msg) => act.send(ctx, &msg.bounded()),
                Err(err) => act.send_error(ctx, Some(id), session, err),
            }
        }));
    }
}

/// The bytes a raw `history{limit}` returns: the newest `limit`, at most
/// a reply's bound.
pub fn raw_limit(limit: u64) -> usize {
    limit.min(termesh_transport::MAX_REPLY as u64) as usize
}

fn not_subscribed(session: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("this connection is not subscribed to `{session}`"),
    )
}
