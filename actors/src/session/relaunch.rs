//! Revive, the session's side: an exited or lost session takes a new run
//! of its program (a new PTY) and goes on with the same id, ring, screen
//! model and subscribers; its seqs continue above the last one.

use actix::prelude::*;
use nix::sys::signal::Signal;

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
        if !self.core.relaunched(pty.kept) {
            // Not ended (the registry revives only ended sessions): the new
            // program goes at once.
            tracing::warn!(session = %self.id, pid = pty.pid, "revive of a session that runs: its new program is ended");
            crate::session::pty::signal_groups(pty.pid, &pty.terminal, Signal::SIGKILL);
            pty.reap_guard.release();
            return self.publisher.last_seq();
        }
        // Running again: no longer an ended session kept warm.
        self.uncount_warm();
        self.take_pty(pty);
        self.publisher.resume();
        self.shared.update(|m| m.phase = None);
        self.show_status();
        let after = self.publisher.last_seq();
        if let Some(store) = &self.settings.store {
            store.record_event(
                &self.id,
                serde_json::json!({ "kind": "revived", "after_seq": after }),
            );
        }
        tracing::info!(session = %self.id, pid = self.pid, after_seq = after, "session revived");
        self.notify_changed();
        if let Some(upto) = self.core.intake.reserve(after) {
            self.reserve(upto, ctx);
        }
        self.pull(ctx);
        after
    }
}
