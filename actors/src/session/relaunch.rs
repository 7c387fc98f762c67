//! Revive, the session's side: an exited or lost session takes a new run
//! of its program (a new PTY) and goes on with the same id, ring, screen
//! model and subscribers; its seqs continue above the last one.

use std::sync::atomic::Ordering;

use actix::prelude::*;
use termesh_transport::SessionStatus;

use super::SessionActor;
use crate::session::pty::Pty;

/// The program runs again in `pty`; answers the seq its output follows.
#[derive(Message)]
#[rtype(result = "u64")]
pub struct Relaunch(pub Pty);

impl Handler<Relaunch> for SessionActor {
    type Result = u64;

    fn handle(&mut self, msg: Relaunch, ctx: &mut Context<Self>) -> u64 {
        let pty = msg.0;
        // The new run continues the old one's ring and seqs.
        self.warm(ctx);
        // Running again: no longer an ended session kept warm.
        self.uncount_warm();
        self.run += 1;
        self.take_pty(pty);
        self.held.clear();
        self.intake_paused = false;
        self.exit = None;
        self.eof = false;
        self.finished = false;
        self.publisher.resume();
        self.shared.exited.store(false, Ordering::Release);
        self.shared.update(|m| {
            m.status = SessionStatus::Running;
            m.exit_code = None;
            m.phase = None;
        });
        let after = self.publisher.last_seq();
        if let Some(store) = &self.settings.store {
            store.record_event(
                &self.id,
                serde_json::json!({ "kind": "revived", "after_seq": after }),
            );
        }
        tracing::info!(session = %self.id, pid = self.pid, after_seq = after, "session revived");
        self.notify_changed();
        self.reserve(ctx);
        self.pull(ctx);
        after
    }
}
