//! The requests a mirror makes of its owner (the messages between them
//! are in `cluster::owner`): the snapshots its publisher wants
//! (rendered by the owner), and whether a resume seq ahead of the mirror's
//! ring exists at all.

use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use termesh_transport::{ClientMsg, ErrorCode, ServerMsg, MAX_SCROLLBACK};

use super::MirrorActor;
pub use crate::cluster::owner::{FromOwner, ToOwner};
use crate::output::publisher::SnapshotWanted;
use crate::session::{ScreenOut, ScreenResult, SubId};

/// A snapshot request that failed for want of the link is asked again
/// after this, if the owner is live by then (else when it is).
const SNAPSHOT_RETRY: Duration = Duration::from_secs(1);

impl MirrorActor {
    /// Asks the owner for a snapshot the publisher wants. The owner renders
    /// it at its own last seq, which this ring reaches soon after (the
    /// publisher parks it until then).
    pub(super) fn ask_snapshot(&mut self, w: SnapshotWanted, ctx: &mut Context<Self>) {
        let msg = ClientMsg::Screen {
            id: 0,
            session: self.id.to_string(),
            scrollback: Some((w.scrollback as u64).min(MAX_SCROLLBACK)),
        };
        let reply = self.node.forward(&self.owner, msg);
        ctx.spawn(reply.into_actor(self).map(move |reply, act, ctx| {
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
                    act.core.snapshot_done(w, result);
                }
                Ok(ServerMsg::Error { code, message, .. }) if code != ErrorCode::Unavailable => {
                    act.core.snapshot_failed(w, message);
                }
                // The link, or the owner, is busy or gone: again later.
                _ => {
                    act.core.snapshot_later(w);
                    ctx.run_later(SNAPSHOT_RETRY, |act, ctx| {
                        act.core.retry_snapshots();
                        act.run(ctx);
                    });
                }
            }
            act.run(ctx);
        }));
    }

    /// A subscriber resumes from `from`, past this ring's last seq: fine
    /// when the owner has reached it (this mirror is just behind), else it
    /// resyncs as it would at the owner.
    pub(super) fn probe_ahead(&mut self, sub: SubId, from: u64, ctx: &mut Context<Self>) {
        let msg = ClientMsg::History {
            id: 0,
            session: self.id.to_string(),
            limit: Some(1),
            before_seq: None,
            rows: None,
        };
        let reply = self.node.forward(&self.owner, msg);
        ctx.spawn(reply.into_actor(self).map(move |reply, act, ctx| {
            let reached = matches!(reply, Ok(ServerMsg::History { seq, .. }) if seq >= from);
            act.core.probe_done(sub, reached);
            act.run(ctx);
        }));
    }
}
