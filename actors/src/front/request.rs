//! The request table (ARCHITECTURE.md, "Request table and traffic
//! classes"): every client request kind is declared once here, with the
//! role it needs, how it is routed, its traffic class (which also says
//! whether a peer may forward it), and the one answer every front end
//! gives it: the WebSocket connection, REST, and the peer side of a
//! forwarded request all call `spec` and `answer_now`/`answer_later`, so a
//! request behaves the same whichever way it came and on whichever node.

use bytes::Bytes;
use termesh_config::Role;
use termesh_transport::{
    ClientMsg, RequestKind, SendWhen, ServerMsg, MAX_EVENTS, MAX_READ_OUTPUT, MAX_REPLY,
    MAX_SCROLLBACK, WAIT_MAX_MS,
};

use crate::cluster::forward::Route;
use crate::cluster::Now;
use crate::error::ApiError;
use crate::front::ops::NodeCtx;
use crate::session::page::MAX_PAGE_BYTES;
use crate::session::ScreenWant;

/// Who answers a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// The node the client is connected to.
    Here,
    /// The owner of the session the request names.
    Owner,
    /// The node the request names (`create`'s `node`), else this one.
    Named,
}

/// What a request costs and how it travels; the in-flight bound of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The connection's own state (auth, list, watch, subscriptions,
    /// ping): answered by the connection, never forwarded (`list` is
    /// gathered on a blocking thread, holding a screen slot).
    Connection,
    /// Small, answered at once and in order (input, resize, kill, rename,
    /// tag): never waits behind other work; bounded by the input limit.
    Immediate,
    /// Renders the screen or reads stored output (screen, history,
    /// events, read_output): at most `MAX_SCREENS_IN_FLIGHT` per
    /// connection and `MAX_UNSENT_REPLIES` bytes, counted until the socket
    /// has taken the reply (a `list`, gathered off the connection's
    /// thread, takes one of these slots too), wherever answered; replies
    /// bounded by `MAX_REPLY`.
    Screen,
    /// Waits for the registry or the keeper (create, remove, revive);
    /// small replies.
    Deferred,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    pub role: Role,
    pub routing: Routing,
    pub class: Class,
}

impl Spec {
    /// Whether a peer may send it here to answer (the connection-state
    /// kinds mean nothing on another node).
    pub fn forwardable(&self) -> bool {
        self.class != Class::Connection
    }
}

/// The table: one row per request kind (PROTOCOL.md sections 2 and 5).
pub fn spec_of(kind: RequestKind) -> Spec {
    use Class::*;
    use Routing::*;
    let (role, routing, class) = match kind {
        RequestKind::Auth
        | RequestKind::List
        | RequestKind::Watch
        | RequestKind::Subscribe
        | RequestKind::Unsubscribe
        | RequestKind::Ack
        | RequestKind::Ping => (Role::Viewer, Here, Connection),
        RequestKind::Screen
        | RequestKind::History
        | RequestKind::Events
        | RequestKind::ReadOutput
        | RequestKind::Read => (Role::Viewer, Owner, Screen),
        // Answered where asked, from what this node knows of the session.
        RequestKind::Wait => (Role::Viewer, Here, Deferred),
        // On the node it names; without one, the connection asks them all.
        RequestKind::Grep => (Role::Viewer, Named, Screen),
        RequestKind::Create => (Role::Operator, Named, Deferred),
        RequestKind::Input
        | RequestKind::Resize
        | RequestKind::Kill
        | RequestKind::Rename
        | RequestKind::Detach
        | RequestKind::Tag => (Role::Operator, Owner, Immediate),
        RequestKind::Remove | RequestKind::Revive | RequestKind::Send => {
            (Role::Operator, Owner, Deferred)
        }
    };
    Spec {
        role,
        routing,
        class,
    }
}

/// The role check every front end makes (WebSocket, REST): `what` names
/// the request in the refusal.
pub fn check_role(what: &str, needed: Role, have: Role) -> Result<(), ApiError> {
    if have >= needed {
        return Ok(());
    }
    Err(ApiError::new(
        termesh_transport::ErrorCode::Forbidden,
        format!(
            "{what} needs the {} role; this token is {}",
            needed.as_str(),
            have.as_str()
        ),
    ))
}

/// The row of `msg`'s kind.
pub fn spec(msg: &ClientMsg) -> Spec {
    spec_of(msg.kind_of())
}

/// The request id and session a message names, for its error reply.
pub fn ids(msg: &ClientMsg) -> (Option<u64>, Option<String>) {
    match msg {
        ClientMsg::Auth { id, .. }
        | ClientMsg::List { id, .. }
        | ClientMsg::Grep { id, .. }
        | ClientMsg::Watch { id }
        | ClientMsg::Create { id, .. } => (Some(*id), None),
        ClientMsg::Subscribe { id, session, .. }
        | ClientMsg::Screen { id, session, .. }
        | ClientMsg::History { id, session, .. }
        | ClientMsg::Kill { id, session, .. }
        | ClientMsg::Rename { id, session, .. }
        | ClientMsg::Detach { id, session, .. }
        | ClientMsg::Tag { id, session, .. }
        | ClientMsg::Remove { id, session, .. }
        | ClientMsg::Events { id, session, .. }
        | ClientMsg::ReadOutput { id, session, .. }
        | ClientMsg::Send { id, session, .. }
        | ClientMsg::Wait { id, session, .. }
        | ClientMsg::Read { id, session, .. }
        | ClientMsg::Revive { id, session } => (Some(*id), Some(session.clone())),
        ClientMsg::Unsubscribe { session }
        | ClientMsg::Ack { session, .. }
        | ClientMsg::Input { session, .. }
        | ClientMsg::Resize { session, .. } => (None, Some(session.clone())),
        ClientMsg::Ping { .. } => (None, None),
    }
}

/// About how many bytes a `Screen`-class request's reply takes, counted
/// against the connection's reply bound until the reply is made: the
/// asked size where the request names one (at most what it can get), a
/// screen's by its scrollback (about 200 bytes a row), a page of lines or
/// of events at its bound, a list at a typical page's.
pub fn expected_reply(msg: &ClientMsg) -> usize {
    const TYPICAL: usize = 64 << 10;
    match msg {
        ClientMsg::Screen { scrollback, .. } => {
            TYPICAL + scrollback.unwrap_or(0).min(MAX_SCROLLBACK) as usize * 200
        }
        ClientMsg::History { limit: Some(l), .. } => raw_limit(*l),
        ClientMsg::History { .. } => MAX_PAGE_BYTES,
        // About 200 bytes a hit with its context, up to the reply bound.
        ClientMsg::Grep { max_hits, .. } => {
            (max_hits.unwrap_or(termesh_transport::GREP_DEFAULT_HITS) as usize * 200).min(MAX_REPLY)
        }
        ClientMsg::ReadOutput { max_bytes, .. } | ClientMsg::Read { max_bytes, .. } => {
            max_bytes.unwrap_or(MAX_READ_OUTPUT).min(MAX_READ_OUTPUT) as usize
        }
        // An event is a few hundred bytes at most.
        ClientMsg::Events { limit, .. } => {
            limit.unwrap_or(MAX_EVENTS).min(MAX_EVENTS) as usize * 512
        }
        _ => TYPICAL,
    }
}

/// The bytes a raw `history{limit}` returns: the newest `limit`, at most
/// a reply's bound.
pub fn raw_limit(limit: u64) -> usize {
    limit.min(MAX_REPLY as u64) as usize
}

/// The reply to a submitted request.
pub type Reply =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<ServerMsg, ApiError>> + 'static>>;

impl NodeCtx {
    /// Which node answers `msg`, by its row's routing.
    pub fn route(&self, msg: &ClientMsg) -> Result<Route, ApiError> {
        match (spec(msg).routing, msg) {
            (Routing::Named, ClientMsg::Create { req, .. }) => {
                self.route_create(req.node.as_deref())
            }
            (Routing::Named, ClientMsg::Grep { node, .. }) => self.route_create(node.as_deref()),
            (Routing::Owner, _) => match ids(msg).1 {
                Some(session) => self.route_session(&session),
                None => Ok(Route::Here),
            },
            _ => Ok(Route::Here),
        }
    }

    /// The one dispatch every front end uses, after its role check:
    /// `msg` routed by its row, then answered here or sent to its owner.
    /// Done before this returns: an `Immediate` request takes effect here
    /// (so requests take effect in the order they came) and a forward is
    /// queued to the peer; the future answers with the reply (an `error`
    /// reply included; `Err` when routing or the forward failed). An
    /// answer made at once is ready when first polled.
    pub fn submit(&self, msg: ClientMsg) -> Reply {
        match self.route(&msg) {
            Err(e) => Box::pin(std::future::ready(Err(e))),
            Ok(Route::Owner(owner)) => match msg {
                // Held here (a forward is bounded in time), then written.
                ClientMsg::Send {
                    id,
                    session,
                    text,
                    submit,
                    when: Some(SendWhen::Waiting),
                } => {
                    let node = self.clone();
                    Box::pin(async move {
                        let until = crate::front::wait::Until::parse(&["waiting".into()])?;
                        let limit = std::time::Duration::from_millis(WAIT_MAX_MS);
                        let (state, _) = node.wait(&session, &until, limit).await?;
                        if state == "exited" {
                            return Err(ApiError::exited(&session));
                        }
                        let msg = ClientMsg::Send {
                            id,
                            session,
                            text,
                            submit,
                            when: Some(SendWhen::Now),
                        };
                        node.forward(&owner, msg).await
                    })
                }
                msg => Box::pin(self.forward(&owner, msg)),
            },
            Ok(Route::Here) => match answer_now(self, msg) {
                Now::Answer(answer) => Box::pin(std::future::ready(Ok(answer))),
                Now::Later(msg) => {
                    let node = self.clone();
                    Box::pin(async move { Ok(answer_later(node, msg).await) })
                }
            },
        }
    }

    /// `msg` answered wherever it is answered (here, or by its owner); an
    /// `error` reply comes back as the error. For front ends without a
    /// connection's state (REST).
    pub async fn ask(&self, msg: ClientMsg) -> Result<ServerMsg, ApiError> {
        let reply = self.submit(msg).await?;
        match ApiError::from_message(&reply) {
            Some(e) => Err(e),
            None => Ok(reply),
        }
    }
}

/// The answer to an `Immediate` request (input, resize, kill, rename,
/// tag), computed at once so that such requests take effect in
/// the order they came; the others are handed back. Taken by value: a
/// keystroke's bytes move into the input queue without a copy.
pub fn answer_now(node: &NodeCtx, msg: ClientMsg) -> Now {
    let (id, session, result) = match msg {
        ClientMsg::Input { session, data } => {
            termesh_transport::hops::pass("in_taken", &data);
            let done = node.input(&session, Bytes::from(data));
            (None, session, done)
        }
        ClientMsg::Resize {
            session,
            cols,
            rows,
        } => {
            let done = node.resize(&session, cols, rows);
            (None, session, done)
        }
        ClientMsg::Kill {
            id,
            session,
            signal,
        } => {
            let done = node.kill(&session, signal.as_deref());
            (Some(id), session, done)
        }
        ClientMsg::Rename { id, session, name } => {
            let done = node.rename(&session, name);
            (Some(id), session, done)
        }
        ClientMsg::Tag { id, session, tags } => {
            let done = node.tag(&session, tags);
            (Some(id), session, done)
        }
        ClientMsg::Detach { id, session, keep } => {
            let done = node.detach(&session, keep);
            (Some(id), session, done)
        }
        other => return Now::Later(other),
    };
    Now::Answer(match result {
        Ok(()) => ServerMsg::Ok {
            id: id.unwrap_or(0),
        },
        Err(e) => e.to_message(id, Some(session)),
    })
}

/// The answer to a `Screen` or `Deferred` request, bounded by `MAX_REPLY`.
pub async fn answer_later(node: NodeCtx, msg: ClientMsg) -> ServerMsg {
    let (id, session) = ids(&msg);
    let (Some(id), Class::Screen | Class::Deferred) = (id, spec(&msg).class) else {
        return ApiError::bad_request(format!("`{}` is not answered this way", msg.kind()))
            .to_message(id, session);
    };
    let result = match msg {
        ClientMsg::Create { id, mut req } => {
            // It runs here, whatever node the client named.
            req.node = None;
            node.create(req)
                .await
                .map(|session| ServerMsg::Created { id, session })
        }
        ClientMsg::Screen {
            id,
            session,
            scrollback,
        } => {
            let scrollback = scrollback.unwrap_or(0).min(MAX_SCROLLBACK) as usize;
            node.screen(&session, ScreenWant::Snapshot { scrollback })
                .await
                .map(|r| ServerMsg::Snapshot {
                    id: Some(id),
                    session,
                    seq: r.seq,
                    cols: r.cols,
                    rows: r.rows,
                    data: r
                        .out
                        .into_snapshot()
                        .map(|d| d.to_vec())
                        .unwrap_or_default(),
                })
        }
        ClientMsg::History {
            id,
            session,
            limit,
            before_seq,
            rows,
        } => history(&node, id, session, limit, before_seq, rows).await,
        ClientMsg::Send {
            id,
            session,
            text,
            submit,
            when,
        } => node
            .send(
                &session,
                text,
                submit.unwrap_or(true),
                when.unwrap_or_default(),
            )
            .await
            .map(|_| ServerMsg::Ok { id }),
        ClientMsg::Remove { id, session, purge } => node
            .remove(&session, purge.unwrap_or(false))
            .await
            .map(|_| ServerMsg::Ok { id }),
        ClientMsg::Events {
            id,
            session,
            after,
            limit,
        } => node
            .events(&session, after.unwrap_or(0), limit.unwrap_or(MAX_EVENTS))
            .await
            .map(|events| ServerMsg::Events {
                id,
                session,
                events,
            }),
        ClientMsg::ReadOutput {
            id,
            session,
            after,
            max_bytes,
        } => node
            .read_output(
                &session,
                after.unwrap_or(0),
                max_bytes.unwrap_or(MAX_READ_OUTPUT),
            )
            .await
            .map(|frames| ServerMsg::StoredOutput {
                id,
                session,
                frames,
            }),
        ClientMsg::Revive { id, session } => {
            node.revive(&session).await.map(|_| ServerMsg::Ok { id })
        }
        ClientMsg::Wait {
            id,
            session,
            until,
            timeout_ms,
        } => match (
            crate::front::wait::Until::parse(&until),
            crate::front::wait::wait_limit(timeout_ms),
        ) {
            (Ok(until), Ok(limit)) => {
                node.wait(&session, &until, limit)
                    .await
                    .map(|(state, seq)| ServerMsg::State {
                        id,
                        session,
                        state,
                        seq,
                    })
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        },
        ClientMsg::Grep { .. } => match crate::front::grep::GrepSpec::parse(&msg) {
            Ok(spec) => node.grep_here(id, spec).await,
            Err(e) => Err(e),
        },
        ClientMsg::Read {
            id,
            session,
            since_seq,
            max_bytes,
        } => node
            .read_text(&session, since_seq.unwrap_or(0), max_bytes)
            .await
            .map(|(seq, text)| ServerMsg::Text {
                id,
                session,
                seq,
                text,
            }),
        // Every Screen and Deferred kind has its arm above (checked at the top).
        _ => unreachable!("sorted above"),
    };
    // Bounded here too, so a forwarded reply is the same on every node
    // and never too big for the link.
    result.map_or_else(|e| e.to_message(Some(id), session), ServerMsg::bounded)
}

/// `history`, by what it asks (PROTOCOL.md section 14): raw output (a
/// page before a seq, or the newest), the model's lines, or a page of
/// lines.
async fn history(
    node: &NodeCtx,
    id: u64,
    session: String,
    limit: Option<u64>,
    before_seq: Option<u64>,
    rows: Option<u32>,
) -> Result<ServerMsg, ApiError> {
    match (limit, before_seq, rows) {
        (Some(_), _, Some(_)) => Err(ApiError::bad_request(
            "`limit` (raw output) does not go with `rows` (pages of lines)",
        )),
        (Some(limit), Some(before), None) => node
            .raw_page(&session, before, raw_limit(limit))
            .await
            .map(|page| ServerMsg::History {
                id,
                session,
                seq: page.end_seq,
                lines: None,
                data: Some(page.data.to_vec()),
                first_seq: Some(page.first_seq),
                more: Some(page.more),
            }),
        (Some(limit), None, None) => {
            node.raw_tail(&session, raw_limit(limit))
                .await
                .map(|tail| ServerMsg::History {
                    id,
                    session,
                    seq: tail.last_seq,
                    lines: None,
                    data: Some(tail.data.to_vec()),
                    first_seq: None,
                    more: None,
                })
        }
        (None, None, None) => node
            .screen(
                &session,
                ScreenWant::Lines {
                    max: MAX_SCROLLBACK as usize,
                },
            )
            .await
            .map(|r| ServerMsg::History {
                id,
                session,
                seq: r.seq,
                lines: Some(r.out.into_lines().unwrap_or_default()),
                data: None,
                first_seq: None,
                more: None,
            }),
        (None, before_seq, rows) => {
            node.history_page(&session, before_seq, rows)
                .await
                .map(|page| ServerMsg::History {
                    id,
                    session,
                    seq: page.last_seq,
                    lines: Some(page.lines),
                    data: None,
                    first_seq: Some(page.first_seq),
                    more: Some(page.more),
                })
        }
    }
}

/// The request table as the peer side answers a forwarded request: what
/// `spec` says may be forwarded, answered as for a client here.
pub struct TableAnswer(pub NodeCtx);

impl crate::cluster::Answer for TableAnswer {
    fn now(&self, msg: ClientMsg) -> Now {
        if !spec(&msg).forwardable() {
            let (id, session) = ids(&msg);
            let err = ApiError::bad_request(format!("`{}` cannot be forwarded", msg.kind()));
            return Now::Answer(err.to_message(id, session));
        }
        answer_now(&self.0, msg)
    }

    fn later(
        &self,
        msg: ClientMsg,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ServerMsg>>> {
        Box::pin(answer_later(self.0.clone(), msg))
    }
}
