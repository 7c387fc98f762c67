//! What passes between a mirror and its owner's `PeerActor`, and the
//! requests a mirror makes of the owner: the snapshots its publisher wants
//! (rendered by the owner), and whether a resume seq ahead of the mirror's
//! ring exists at all.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use termesh_transport::peer::{DataMsg, HOP_BUDGET};
use termesh_transport::{ClientMsg, ErrorCode, ServerMsg, MAX_SCROLLBACK};

use super::{Link, MirrorActor};
use crate::publisher::SnapshotWanted;
use crate::session::{ScreenOut, ScreenResult, SubId};

/// From the owner's `PeerActor` to a mirror.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub enum FromOwner {
    /// Something of the mirror's subscription, in the owner's order.
    Data(DataMsg),
    /// The link to the owner came up (`true`) or went down.
    Link(bool),
}

/// From a mirror to its owner's `PeerActor`.
#[derive(Message)]
#[rtype(result = "()")]
pub enum ToOwner {
    /// Subscribe (again) at the owner; answered on `sink`, or with
    /// `Link(false)` while the link is down.
    Subscribe {
        session: Arc<str>,
        from_seq: Option<u64>,
        window: u64,
        sink: Recipient<FromOwner>,
    },
    /// The ring absorbed the owner's output through `seq`.
    Ack { session: Arc<str>, seq: u64 },
    /// The mirror is gone.
    End { session: Arc<str> },
    /// A client resumed here: the owner's program repaints.
    Repaint { session: Arc<str> },
}

/// A snapshot request that failed for want of the link is asked again
/// after this, if the link is live by then (else when it is).
const SNAPSHOT_RETRY: Duration = Duration::from_secs(1);

impl MirrorActor {
    /// Asks the owner for a snapshot the publisher wants. The owner renders
    /// it at its own last seq, which this ring reaches soon after (the
    /// publisher parks it until then).
    pub(super) fn ask_snapshot(&mut self, w: SnapshotWanted, ctx: &mut Context<Self>) {
        if self.link != Link::Live {
            self.snapshots_waiting.push(w);
            return;
        }
        let msg = ClientMsg::Screen {
            id: 0,
            session: self.id.to_string(),
            scrollback: Some((w.scrollback as u64).min(MAX_SCROLLBACK)),
        };
        let reply = self.node.forward(&self.owner, msg, HOP_BUDGET);
        ctx.spawn(reply.into_actor(self).map(move |reply, act, ctx| {
            let Some(publisher) = act.publisher.as_mut() else {
                return;
            };
            match reply {
                Ok(ServerMsg::Snapshot {
                    seq,
                    cols,
                    rows,
                    data,
                    ..
                }) => {
                    let result = ScreenResult {
                        seq,
                        cols,
                        rows,
                        out: ScreenOut::Snapshot(Bytes::from(data)),
                    };
                    publisher.snapshot_done(w.sub, w.generation, result);
                    act.drain_held(ctx);
                }
                Ok(ServerMsg::Error { code, message, .. }) if code != ErrorCode::Unavailable => {
                    publisher.snapshot_failed(w.sub, w.generation, message);
                    act.drain_held(ctx);
                }
                // The link, or the owner, is busy or gone: again later.
                _ => act.retry_snapshot(w, ctx),
            }
        }));
    }

    fn retry_snapshot(&mut self, w: SnapshotWanted, ctx: &mut Context<Self>) {
        self.snapshots_waiting.push(w);
        ctx.run_later(SNAPSHOT_RETRY, |act, ctx| {
            if act.link == Link::Live {
                for w in std::mem::take(&mut act.snapshots_waiting) {
                    act.ask_snapshot(w, ctx);
                }
            }
        });
    }

    /// A subscriber resumes from `from`, past this ring's last seq: fine
    /// when the owner has reached it (this mirror is just behind), else it
    /// resyncs as it would at the owner.
    pub(super) fn probe_ahead(&mut self, sub: SubId, from: u64, ctx: &mut Context<Self>) {
        let msg = ClientMsg::History {
            id: 0,
            session: self.id.to_string(),
            limit: Some(1),
        };
        let reply = self.node.forward(&self.owner, msg, HOP_BUDGET);
        ctx.spawn(reply.into_actor(self).map(move |reply, act, ctx| {
            let Some(publisher) = act.publisher.as_mut() else {
                return;
            };
            match reply {
                Ok(ServerMsg::History { seq, .. }) if seq >= from => {}
                // Not reached (or not answered): as the owner would.
                _ => {
                    publisher.resync_waiting(sub);
                    act.after_publish(ctx);
                }
            }
        }));
    }
}
