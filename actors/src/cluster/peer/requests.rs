//! Requests across the link: a client's request forwarded to the peer
//! (`Forward`, its answer awaited and timed), and the peer's requests
//! answered here as for a local client; what goes unanswered feeds the
//! breaker.

use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;
use termesh_transport::peer::PeerMsg;
use termesh_transport::{ClientMsg, ServerMsg};

use super::{breaker, PeerActor, CLOSED, HELD, OPEN};
use crate::error::ApiError;

/// Forward a client's request to this peer; `reply` gets the message the
/// client gets, and is dropped unanswered when the link is down (or goes
/// down before the answer). Sent with `do_send`, so it is queued at once
/// and in order whatever the mailbox holds.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Forward {
    pub msg: ClientMsg,
    pub hops: u8,
    pub reply: tokio::sync::oneshot::Sender<ServerMsg>,
}

/// A forwarded request to this peer went unanswered; `sent_at` is this
/// node's stall total when it was sent.
#[derive(Message)]
#[rtype(result = "()")]
pub struct TimedOut {
    pub sent_at: Duration,
}

impl PeerActor {
    /// The peer answered something: a streak of silence is over.
    pub(super) fn on_answer(&mut self) {
        self.breaker.answered();
        if self.stats.breaker.load(Ordering::Relaxed) == HELD {
            self.stats.breaker.store(CLOSED, Ordering::Relaxed);
        }
    }

    /// A request (or ping) went unanswered: the breaker decides.
    pub(super) fn timed_out(&mut self, sent_at: Duration) {
        self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
        match self.breaker.timed_out(sent_at, self.stall_total()) {
            breaker::Verdict::Wait(streak) => {
                tracing::debug!(peer = %self.name, streak, "a request to the peer went unanswered");
            }
            breaker::Verdict::Hold(stalled) => {
                self.stats.holds.fetch_add(1, Ordering::Relaxed);
                self.stats.breaker.store(HELD, Ordering::Relaxed);
                tracing::warn!(
                    peer = %self.name,
                    stalled_ms = stalled.as_millis() as u64,
                    "breaker held: this node was stalled itself, so the link stays"
                );
            }
            breaker::Verdict::Trip => {
                self.stats.trips.fetch_add(1, Ordering::Relaxed);
                self.stats.breaker.store(OPEN, Ordering::Relaxed);
                tracing::warn!(
                    peer = %self.name,
                    unanswered = breaker::STREAK,
                    "breaker tripped: the link is dropped and made again"
                );
                // Dropping the sender ends the link; it is made again.
                self.on_down(format!(
                    "breaker tripped after {} unanswered requests",
                    breaker::STREAK
                ));
            }
        }
    }

    /// A request the peer forwarded: answered here, as for a local client.
    pub(super) fn on_request(&mut self, req: u64, msg: ClientMsg, ctx: &mut Context<Self>) {
        let Some((answer, _)) = self.node.clone() else {
            let err = ApiError::new(
                termesh_transport::ErrorCode::Unavailable,
                "this node is starting",
            );
            self.reply(req, err.to_message(None, None));
            return;
        };
        let msg = match answer.now(msg) {
            crate::cluster::Now::Answer(now) => return self.reply(req, now),
            crate::cluster::Now::Later(msg) => msg,
        };
        ctx.spawn(
            answer
                .later(msg)
                .into_actor(self)
                .map(move |later, act, _| {
                    act.reply(req, later);
                }),
        );
    }

    /// Answers a forwarded request: small answers on the control stream,
    /// in order with everything else; large ones on a stream of their own,
    /// so they hold up nothing (ARCHITECTURE.md, "Request table and traffic
    /// classes").
    pub(super) fn reply(&mut self, req: u64, msg: ServerMsg) {
        let msg = PeerMsg::Reply {
            req,
            msg: msg.bounded(),
        };
        match &self.replies {
            Some(replies) if reply_len(&msg) > SMALL_REPLY => {
                let _ = replies.send(msg);
            }
            _ => self.send(msg),
        }
    }
}

impl Handler<Forward> for PeerActor {
    type Result = ();

    fn handle(&mut self, msg: Forward, _: &mut Context<Self>) {
        if !self.link_open() {
            return;
        }
        termesh_transport::hops::pass_input("in_forward", &msg.msg);
        let req = self.next_req;
        self.next_req += 1;
        self.waiting.insert(req, msg.reply);
        self.send(PeerMsg::Request {
            req,
            hops: msg.hops,
            msg: msg.msg,
        });
    }
}

impl Handler<TimedOut> for PeerActor {
    type Result = ();

    fn handle(&mut self, msg: TimedOut, _: &mut Context<Self>) {
        self.timed_out(msg.sent_at);
    }
}

/// Replies larger than this leave the control stream.
const SMALL_REPLY: usize = 4 << 10;

fn reply_len(msg: &PeerMsg) -> usize {
    match msg {
        PeerMsg::Reply { msg, .. } => msg.payload_len(),
        _ => 0,
    }
}
