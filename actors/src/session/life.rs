//! The program's life, carried out: the `Step`s `SessionCore` returns
//! (signals, timers, the end of a run, a lost keeper, closing) done with
//! the PTY's handles, the store and the publisher; and the status shown to
//! others, derived from the core after every step.

use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;
use termesh_transport::{EventKind, SessionStatus};

use super::core::{Step, Timer};
use super::pty::{self, ExitInfo};
use super::{Delivery, SessionActor};

impl SessionActor {
    /// Carries out what the core decided, in order.
    pub(super) fn carry_out(&mut self, steps: Vec<super::core::Step>, ctx: &mut Context<Self>) {
        if steps.is_empty() {
            return;
        }
        self.show_status();
        if !self.core.takes_input() {
            self.attention_ended();
        }
        for step in steps {
            match step {
                Step::Signal(signal) => self.signal(signal),
                Step::Arm(timer, after) => self.arm(timer, after, ctx),
                Step::Finish(exit) => self.finish(exit, ctx),
                Step::Lose => self.lose(),
                Step::LetGo => self.let_program_go(),
                Step::Detach => {
                    if let Some(guard) = self.reap_guard.take() {
                        guard.detach();
                    }
                }
                Step::Close { removed } => self.close(removed, ctx),
            }
        }
    }

    /// What others read of the session follows the core.
    pub(super) fn show_status(&self) {
        let (status, code) = (self.core.status(), self.core.exit_code());
        self.shared.update(|m| {
            m.status = status;
            m.exit_code = code;
            if status != SessionStatus::Running {
                // Only a running program has a state; an exit says how
                // its work ended.
                m.agent = None;
                if status == SessionStatus::Exited {
                    let failed = code.is_some_and(|c| c != 0);
                    m.phase = Some(if failed { "failed" } else { "completed" }.into());
                }
            }
        });
        self.shared
            .exited
            .store(!self.core.takes_input(), Ordering::Release);
    }

    /// Starts `timer` unless it is armed already.
    pub(super) fn arm(&mut self, timer: Timer, after: Duration, ctx: &mut Context<Self>) {
        if self.core.timers.arm(timer) {
            ctx.run_later(after, move |act, ctx| act.fire(timer, ctx));
        }
    }

    fn fire(&mut self, timer: Timer, ctx: &mut Context<Self>) {
        let steps = self.core.fired(timer);
        match timer {
            Timer::Catchup => self.idle_check(ctx),
            Timer::Warm => self.keep_warm(ctx),
            Timer::Overtake => self.start_job(ctx, false),
            Timer::DropModel => self.look_at_model(ctx),
            Timer::Cool => self.cool(ctx),
            Timer::EofGrace { .. } | Timer::KillGrace { .. } => {}
        }
        self.carry_out(steps, ctx);
    }

    /// The program ended and its output with it.
    fn finish(&mut self, exit: ExitInfo, ctx: &mut Context<Self>) {
        self.cool_later(ctx);
        // The program has exited and its output ended: let the waiter reap
        // and the reader and writer go (a background job still holding the
        // terminal does not keep the master open), and close the master.
        self.let_program_go();
        self.terminal = None;
        self.input = None;
        tracing::info!(session = %self.id, code = exit.code, "session exited");
        if let Some(store) = &self.settings.store {
            store.sealed(&self.id);
        }
        if exit.code != 0 {
            self.notify("failed", None);
        }
        let event = EventKind::Exited {
            exit_code: exit.code,
            signal: exit.signal_name(),
        };
        self.persist_event(&event);
        self.publisher.finish(event);
        self.notify_changed();
    }

    /// Tells subscribers the session closes (`removed`: for good) and stops the actor; a node
    /// that stops has a `Leave` answered.
    fn close(&mut self, removed: bool, ctx: &mut Context<Self>) {
        if let Some(store) = self.settings.store.as_ref().filter(|_| !removed) {
            // Nothing above the last seq was sent: a restart continues
            // right after it, without a gap.
            store.seq_mark(&self.id, self.publisher.last_seq());
        }
        self.publisher.broadcast(Delivery::Closed { removed });
        ctx.stop();
        if let Some(done) = self.leaving.take() {
            let _ = done.send(());
        }
    }

    /// The session is done with its program (it exited, or was killed):
    /// it may be reaped (the node's own child by its waiter, a kept one by
    /// the keeper).
    fn let_program_go(&mut self) {
        let Some(guard) = self.reap_guard.take() else {
            return;
        };
        let Some(store) = self.settings.store.clone() else {
            guard.release();
            return;
        };
        // Released, a kept program is forgotten by the keeper: its end is
        // on disk first, or a crash in between brings it back `lost`.
        store.record(&self.shared.info(), self.shared.resume_command.as_deref());
        let (done, released) = tokio::sync::watch::channel(false);
        self.released = Some(released);
        actix::spawn(async move {
            if let Err(e) = store.flush().await {
                tracing::error!("store: the record of an ended program is not durable: {e}");
            }
            guard.release();
            let _ = done.send(true);
        });
    }

    /// The keeper holding the program is gone: so is the program (its
    /// terminal hangs up as the node's copy of the master closes here).
    fn lose(&mut self) {
        self.reap_guard = None;
        self.terminal = None;
        self.input = None;
        tracing::error!(session = %self.id, pid = self.pid, "session lost: the PTY keeper that held its program is gone");
        self.persist_event(&EventKind::Lost);
        self.publisher.finish(EventKind::Lost);
        self.notify_changed();
    }

    /// Signals the program's groups, unless it may have been reaped
    /// (then its ids may belong to someone else now).
    pub(super) fn signal(&self, signal: nix::sys::signal::Signal) {
        if self.reap_guard.is_some() {
            if let Some(terminal) = &self.terminal {
                pty::signal_groups(self.pid, terminal, signal);
            }
        }
    }
}
