//! The session's screen requests: snapshots for subscribers and replies to
//! `screen`/`history`. Requests wait in a bounded list; one pass off the
//! actor thread answers all of them, computing each distinct request once
//! (a background pass nobody waits for may run beside it).
//! A pass that fails (a panic in the emulator) is retried once with a model
//! rebuilt from the ring; a second failure is reported to whoever waited:
//! an error reply, or the subscription ends with an error. Never a silent
//! stall.

use std::time::Instant;

use actix::prelude::*;
use futures_util::FutureExt;
use termesh_transport::ErrorCode;

use super::core::Timer;
use super::screen_cache::{ScreenCache, Start};
use super::screen_job::{lag, Job, Reach};
use super::warmth::{self, WARM_LAG, WARM_STEP};
use super::{ScreenResult, ScreenTo, ScreenWant, SessionActor, IDLE_CATCHUP, MODEL_TTL};
use crate::error::ApiError;
use crate::metrics::Metrics;

impl SessionActor {
    /// A screen request for the next pass (a reply past
    /// `screen_cache::MAX_WAITING` is answered busy at once).
    pub(super) fn request_screen(
        &mut self,
        want: ScreenWant,
        to: ScreenTo,
        ctx: &mut Context<Self>,
    ) {
        self.screen.ask(&self.id, want, to);
        self.start_job(ctx, false);
    }

    /// After output goes quiet: bring a cached model up to date off-thread,
    /// or drop it when nobody has used it for `MODEL_TTL`.
    pub(super) fn idle_check(&mut self, ctx: &mut Context<Self>) {
        let quiet = self.last_output.elapsed();
        if quiet < IDLE_CATCHUP {
            self.arm(Timer::Catchup, IDLE_CATCHUP - quiet, ctx);
            return;
        }
        if self.screen.model_used.elapsed() > MODEL_TTL && self.publisher.is_empty() {
            self.screen.model = None;
            return;
        }
        let behind = self
            .screen
            .model
            .as_ref()
            .is_some_and(|m| m.seq() < self.publisher.last_seq());
        if behind {
            self.start_job(ctx, true);
        }
    }

    /// Runs the waiting screen requests in one pass off the actor thread,
    /// each distinct request computed once; `catch_up` runs a pass even
    /// with none waiting.
    ///
    /// Requests someone waits for wait behind a background pass of the
    /// session (which holds the model) at most
    /// `screen_cache::OVERTAKE_AFTER` from its start, then run in a pass
    /// of their own from the last snapshot or the ring
    /// (`ScreenCache::may_start`).
    pub(super) fn start_job(&mut self, ctx: &mut Context<Self>, catch_up: bool) {
        let bulk = self.flow.is_bulk();
        match self.screen.may_start(Instant::now(), bulk, catch_up) {
            Start::Nothing => return,
            Start::After(wait) => return self.arm(Timer::Overtake, wait, ctx),
            Start::Now => {}
        }
        self.answer_from_last();
        if self.core.intake.unpause() {
            // A pinned snapshot answered from the last one: intake goes on.
            self.take_in(ctx);
        }
        if self.screen.may_start(Instant::now(), bulk, catch_up) == Start::Now {
            self.run_pass(ctx, None);
        }
    }

    /// Keeps a watched session's model (one used lately, or one with
    /// subscribers, whose next resync wants a snapshot) within `WARM_LAG`
    /// of the output, in background passes of at most `WARM_STEP` under
    /// the node's warming budget.
    pub(super) fn keep_warm(&mut self, ctx: &mut Context<Self>) {
        if self.core.timers.is_armed(Timer::Warm)
            || self.screen.job_running()
            || self.screen.has_waiting()
        {
            return;
        }
        // Watched: someone subscribes, or used the model lately.
        let watched = !self.publisher.is_empty() || self.screen.model_used.elapsed() < MODEL_TTL;
        let ring = self.publisher.ring();
        let lag = match &self.screen.model {
            Some(model) if watched => lag(ring, model.seq()).unwrap_or(u64::MAX),
            Some(_) => return,
            None if !self.publisher.is_empty() => ring.bytes() as u64,
            None => return,
        };
        if lag < WARM_LAG {
            return;
        }
        match self.settings.warmth.begin() {
            Ok(ticket) => self.run_pass(ctx, Some(ticket)),
            Err(wait) => self.arm(Timer::Warm, wait, ctx),
        }
    }

    /// One pass off the actor thread: every waiting request, or (with a
    /// ticket and none waiting) a background step of warming.
    fn run_pass(&mut self, ctx: &mut Context<Self>, ticket: Option<warmth::Ticket>) {
        self.seed_model();
        let pass = self.screen.take_pass();
        let job = Job::prepare(
            self.screen.model.take(),
            self.publisher.ring(),
            &self.marks,
            self.initial_size,
            self.modes.restore_sequence(),
            pass.wants.clone(),
            match ticket {
                Some(_) => Reach::Step(WARM_STEP),
                None if pass.whole => Reach::Whole,
                None => Reach::Bounded,
            },
        );
        if pass.waiting.is_empty() {
            Metrics::add(&self.metrics.screen_warm_bytes, job.fed);
        } else {
            Metrics::add(&self.metrics.snapshots, 1);
            Metrics::add(&self.metrics.screen_request_bytes, job.fed);
        }
        // Nobody waits for a warming step or a catch-up: the background
        // thread, below the keystrokes' priority. A look at the agent's
        // state is waited for (`wait` answers from it), except for a
        // flood nobody types into (`bulk`): it is working, and its look
        // ran a core for milliseconds beside the echo of the session typed
        // into.
        let background = ScreenCache::in_background(&pass, ticket.is_some(), self.flow.is_bulk());
        self.screen.pass_started(background, Instant::now());
        // The ticket comes back to be charged here, not on the idle thread.
        let run = move || match ticket {
            Some(mut ticket) => {
                ticket.start();
                let done = job.run();
                ticket.stop();
                (done, Some(ticket))
            }
            None => (job.run(), None),
        };
        let work: futures_util::future::BoxFuture<'static, Result<_, String>> = if background {
            Box::pin(super::background::run(run).map(|r| r.map_err(|e| e.to_string())))
        } else {
            Box::pin(actix_rt::task::spawn_blocking(run).map(|r| r.map_err(|e| e.to_string())))
        };
        // Not `ctx.wait`: the actor keeps serving output and acks while the
        // screen is computed.
        let fut = work.into_actor(self).map(move |done, act, ctx| {
            act.screen.pass_ended(background);
            match done {
                Ok((done, ticket)) => {
                    drop(ticket);
                    let resize_id = done.model.resize_id();
                    act.screen.keep_model(done.model);
                    for (to, result) in act.screen.pass_done(pass, &done.results, resize_id) {
                        act.finish_screen(to, result);
                    }
                }
                Err(e) => {
                    // The model went down with the pass; the retry rebuilds
                    // it from the ring, not from a snapshot of the same
                    // emulator's making.
                    tracing::error!(session = %act.id, "screen computation failed: {e}");
                    for to in act.screen.pass_failed(pass) {
                        act.fail_screen(to);
                    }
                }
            }
            // Snapshots wanted again (their seq left the ring meanwhile).
            act.after_publish(ctx);
            act.start_job(ctx, false);
            if act.core.intake.unpause() {
                // Re-checked: pauses again while a pin still holds.
                act.take_in(ctx);
            }
            act.keep_warm(ctx);
            act.schedule_model_drop(ctx);
        });
        ctx.spawn(fut);
    }

    /// A request whose retry failed too: tell whoever waited.
    fn fail_screen(&mut self, to: ScreenTo) {
        let message = format!(
            "the screen of session `{}` could not be computed (see the node log)",
            self.id
        );
        match to {
            ScreenTo::Reply(reply) => {
                let _ = reply.send(Err(ApiError::new(ErrorCode::Internal, message)));
            }
            ScreenTo::Sub { sub, generation } => {
                let message = format!("{message}; the subscription has ended");
                if self.publisher.snapshot_failed(sub, generation, message) {
                    self.set_viewers();
                    self.notify_changed();
                }
                if let Some(size) = self.claims.left(sub) {
                    self.give_size_back(size);
                }
            }
        }
    }

    pub(super) fn finish_screen(&mut self, target: ScreenTo, result: ScreenResult) {
        match target {
            ScreenTo::Reply(reply) => {
                let _ = reply.send(Ok(result));
            }
            ScreenTo::Sub { sub, generation } => {
                self.publisher.snapshot_done(sub, generation, result);
            }
        }
    }
}
