//! Revive, the session's side: an exited or lost session takes a new run
//! of its program (a new PTY) and goes on with the same id, ring, screen
//! model and subscribers; its seqs continue above the last one.

use actix::prelude::*;
use nix::sys::signal::Signal;

use super::SessionActor;
use crate::session::pty::Pty;

/// The program runs again in `pty` (started with `command`: the session's,
/// or its resume command); answers the seq its output follows, or `None`
/// when the session had not ended (its new program is ended).
#[derive(Message)]
#[rtype(result = "Option<u64>")]
pub struct Relaunch {
    pub pty: Pty,
    pub command: Vec<String>,
}

impl Handler<Relaunch> for SessionActor {
    type Result = Option<u64>;

    fn handle(&mut self, msg: Relaunch, ctx: &mut Context<Self>) -> Option<u64> {
        let pty = msg.pty;
        // The new run continues the old one's ring and seqs (read back
        // first when the session went cold).
        self.warm(ctx);
        if !self.core.relaunched(pty.kept) {
            // The registry revives only ended sessions; this one runs or
            // closes meanwhile.
            tracing::warn!(session = %self.id, pid = pty.pid, "revive of a session that has not ended: its new program is ended");
            crate::session::pty::signal_groups(pty.pid, &pty.terminal, Signal::SIGKILL);
            pty.reap_guard.release();
            return None;
        }
        // Running again: no longer an ended session kept warm.
        self.uncount_warm();
        self.take_pty(pty);
        self.publisher.resume();
        self.shared.update(|m| m.phase = None);
        self.attend_anew();
        self.attend(ctx);
        self.show_status();
        let after = self.publisher.last_seq();
        if let Some(store) = &self.settings.store {
            store.record_event(
                &self.id,
                serde_json::json!({ "kind": "revived", "after_seq": after, "command": msg.command }),
            );
        }
        tracing::info!(session = %self.id, pid = self.pid, after_seq = after, "session revived");
        self.notify_changed();
        if let Some(upto) = self.core.intake.reserve(after) {
            self.reserve(upto, ctx);
        }
        self.pull(ctx);
        Some(after)
    }
}
