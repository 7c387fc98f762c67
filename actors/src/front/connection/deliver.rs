//! What sessions and the registry send a connection, turned into frames.

use actix::prelude::*;
use actix_web_actors::ws::{CloseCode, CloseReason, WebsocketContext};
use termesh_transport::{encode_output, encode_server, ServerMsg};

use super::ConnectionActor;
use crate::directory::watch::{WatchEvent, WatchReady};
use crate::session::{Deliver, Delivery};

/// Close the connection with this code (node shutdown: 1001).
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct CloseConnection {
    pub code: u16,
}

impl Handler<Deliver> for ConnectionActor {
    type Result = ();

    fn handle(&mut self, msg: Deliver, ctx: &mut WebsocketContext<Self>) {
        let Some(sub) = self.subs.get_mut(&*msg.session) else {
            return;
        };
        if sub.id != msg.sub {
            return;
        }
        // Output, the hot case, encodes straight from the shared id; only
        // the rare messages need an owned copy.
        let session = || msg.session.to_string();
        let out = match msg.item {
            Delivery::Subscribed {
                id,
                last_seq,
                oldest_seq,
                cols,
                rows,
            } => {
                sub.awaiting = false;
                ServerMsg::Subscribed {
                    id,
                    session: session(),
                    last_seq,
                    oldest_seq,
                    cols,
                    rows,
                }
            }
            // Left over from a subscription that a re-subscribe replaced.
            Delivery::Output(_) | Delivery::Snapshot { .. } | Delivery::ResyncRequired { .. }
                if sub.awaiting =>
            {
                return
            }
            Delivery::Output(frame) => {
                let bytes = encode_output(&msg.session, frame.seq, &frame.data);
                self.send_session(ctx, &msg.session, bytes.into(), true);
                return;
            }
            Delivery::Snapshot {
                seq,
                cols,
                rows,
                data,
            } => ServerMsg::Snapshot {
                id: None,
                session: session(),
                seq,
                cols,
                rows,
                data: data.to_vec(),
            },
            Delivery::ResyncRequired { last_seq } => ServerMsg::ResyncRequired {
                session: session(),
                last_seq,
            },
            Delivery::Event(event) => ServerMsg::Event {
                session: session(),
                event,
            },
            // A subscriber of a removed session is told, so a terminal
            // client can say so and stop (before its `subscribed`, as the
            // answer to its subscribe); at shutdown the close says it all.
            Delivery::Closed { removed } => {
                let id = sub.awaiting.then_some(sub.req_id);
                self.subs.remove(&*msg.session);
                if !removed {
                    return;
                }
                ServerMsg::Error {
                    id,
                    session: Some(session()),
                    code: termesh_transport::ErrorCode::NotFound,
                    message: format!("session `{}` was removed", msg.session),
                }
            }
            // Before its `subscribed`, the failure answers the subscribe
            // itself (PROTOCOL.md section 3: an error carries the id of the
            // request it answers).
            Delivery::Failed { code, message } => {
                let id = sub.awaiting.then_some(sub.req_id);
                self.subs.remove(&*msg.session);
                ServerMsg::Error {
                    id,
                    session: Some(session()),
                    code,
                    message,
                }
            }
        };
        // Behind what is held of the same session.
        self.send_session(ctx, &msg.session, encode_server(&out).into(), false);
    }
}

impl Handler<WatchReady> for ConnectionActor {
    type Result = ();

    /// Sends everything the registry coalesced since the last drain, once
    /// the flight has room (until then the registry goes on coalescing).
    fn handle(&mut self, _: WatchReady, ctx: &mut WebsocketContext<Self>) {
        if self.lanes.watch_now() {
            self.drain_watch(ctx);
        } else {
            self.mark(ctx, std::time::Instant::now());
            self.check_later(ctx);
        }
    }
}

impl ConnectionActor {
    pub(super) fn drain_watch(&mut self, ctx: &mut WebsocketContext<Self>) {
        let Some(queue) = &self.watch else {
            return;
        };
        let events = queue.lock().map(|mut q| q.drain()).unwrap_or_default();
        for event in events {
            let out = match event {
                WatchEvent::Changed(session) => ServerMsg::SessionChanged { session },
                WatchEvent::Removed(session) => ServerMsg::SessionRemoved { session },
            };
            let bytes = encode_server(&out);
            self.lanes.sent(bytes.len());
            ctx.binary(bytes);
        }
        self.mark(ctx, std::time::Instant::now());
    }
}

impl Handler<CloseConnection> for ConnectionActor {
    type Result = ();

    fn handle(&mut self, msg: CloseConnection, ctx: &mut WebsocketContext<Self>) {
        ctx.close(Some(CloseReason {
            code: CloseCode::from(msg.code),
            description: Some("node shutting down".into()),
        }));
        ctx.stop();
    }
}
