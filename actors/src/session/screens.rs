//! The session's screen requests: snapshots for subscribers and replies to
//! `screen`/`history`. Requests wait in a bounded list; one pass off the
//! actor thread answers all of them, computing each distinct request once.
//! A pass that fails (a panic in the emulator) is retried once with a model
//! rebuilt from the ring; a second failure is reported to whoever waited:
//! an error reply, or the subscription ends with an error. Never a silent
//! stall.

use actix::prelude::*;
use termesh_transport::ErrorCode;

use super::screen_job::Job;
use super::{
    Delivery, ScreenResult, ScreenTo, ScreenWant, SessionActor, SubId, IDLE_CATCHUP, MODEL_TTL,
};
use crate::credit::Credit;
use crate::error::ApiError;
use crate::metrics::Metrics;

/// Most screen requests a session holds for its next pass; beyond, a reply
/// request is refused as busy (a connection may have only a few in flight,
/// so this takes many connections at once).
pub const MAX_WAITING: usize = 64;

pub struct Waiting {
    want: ScreenWant,
    to: ScreenTo,
    /// A pass for this request failed once already.
    retried: bool,
}

impl SessionActor {
    pub(super) fn request_screen(
        &mut self,
        want: ScreenWant,
        to: ScreenTo,
        ctx: &mut Context<Self>,
    ) {
        let replies = || {
            self.waiting
                .iter()
                .filter(|w| matches!(w.to, ScreenTo::Reply(_)))
                .count()
        };
        if let ScreenTo::Reply(reply) = to {
            if replies() >= MAX_WAITING {
                let busy = format!(
                    "session `{}` has {MAX_WAITING} screen requests waiting; try again",
                    self.id
                );
                let _ = reply.send(Err(ApiError::new(ErrorCode::Unavailable, busy)));
                return;
            }
            return self.queue_screen(want, ScreenTo::Reply(reply), false, ctx);
        }
        self.queue_screen(want, to, false, ctx);
    }

    fn queue_screen(
        &mut self,
        want: ScreenWant,
        to: ScreenTo,
        retried: bool,
        ctx: &mut Context<Self>,
    ) {
        self.waiting.push(Waiting { want, to, retried });
        self.model_used = std::time::Instant::now();
        self.start_job(ctx, false);
    }

    /// After output goes quiet: bring a cached model up to date off-thread,
    /// or drop it when nobody has used it for `MODEL_TTL`.
    pub(super) fn idle_check(&mut self, ctx: &mut Context<Self>) {
        self.catchup_scheduled = false;
        let quiet = self.last_output.elapsed();
        if quiet < IDLE_CATCHUP {
            self.catchup_scheduled = true;
            ctx.run_later(IDLE_CATCHUP - quiet, Self::idle_check);
            return;
        }
        if self.model_used.elapsed() > MODEL_TTL {
            self.model = None;
            return;
        }
        let behind = self
            .model
            .as_ref()
            .is_some_and(|m| m.seq() < self.ring.last_seq());
        if behind {
            self.start_job(ctx, true);
        }
    }

    /// Runs the waiting screen requests in one pass off the actor thread,
    /// each distinct request computed once; `catch_up` runs a pass even
    /// with none waiting.
    pub(super) fn start_job(&mut self, ctx: &mut Context<Self>, catch_up: bool) {
        if self.job_running || (self.waiting.is_empty() && !catch_up) {
            return;
        }
        let waiting: Vec<Waiting> = self.waiting.drain(..).collect();
        let mut wants: Vec<ScreenWant> = Vec::new();
        let slots: Vec<usize> = waiting
            .iter()
            .map(|w| match wants.iter().position(|x| *x == w.want) {
                Some(i) => i,
                None => {
                    wants.push(w.want);
                    wants.len() - 1
                }
            })
            .collect();
        if waiting.iter().any(|w| matches!(w.to, ScreenTo::Sub { .. })) {
            // The snapshot will be at the ring's last seq; what follows it must
            // still be there when the snapshot is delivered.
            self.ring.set_pin(Some(self.ring.last_seq()));
        }
        let job = Job::prepare(
            self.model.take(),
            &self.ring,
            &self.marks,
            self.initial_size,
            self.modes.restore_sequence(),
            wants,
        );
        self.job_running = true;
        Metrics::add(&self.metrics.snapshots, 1);
        let work = actix_rt::task::spawn_blocking(move || job.run());
        // Not `ctx.wait`: the actor keeps serving output and acks while the
        // screen is computed.
        let fut = work.into_actor(self).map(move |done, act, ctx| {
            act.job_running = false;
            let pinned = act.ring.pin().is_some();
            match done {
                Ok(done) => {
                    act.model = Some(done.model);
                    for (w, slot) in waiting.into_iter().zip(slots) {
                        act.finish_screen(w.to, done.results[slot].clone(), ctx);
                    }
                }
                Err(e) => {
                    // The model went down with the pass; the retry rebuilds
                    // it from the ring.
                    tracing::error!(session = %act.id, "screen computation failed: {e}");
                    for w in waiting {
                        if w.retried {
                            act.fail_screen(w.to);
                        } else {
                            act.waiting.push(Waiting { retried: true, ..w });
                        }
                    }
                }
            }
            if pinned {
                act.ring.set_pin(None);
                // Subscribers that got a snapshot continue from the ring.
                let ids: Vec<SubId> = act.subs.keys().copied().collect();
                for id in ids {
                    act.pump(id, ctx);
                }
            }
            act.start_job(ctx, false);
            if act.intake_paused && act.ring.pin().is_none() {
                act.intake_paused = false;
                act.apply_held(ctx);
            }
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
                let current = self
                    .subs
                    .get(&sub)
                    .is_some_and(|s| s.generation == generation && s.awaiting_snapshot);
                if !current {
                    return;
                }
                if let Some(s) = self.subs.remove(&sub) {
                    Metrics::gauge(&self.metrics.subscribers, -1);
                    self.deliver(
                        sub,
                        &s.sink,
                        Delivery::Failed {
                            message: format!("{message}; the subscription has ended"),
                        },
                    );
                    self.set_viewers();
                    self.notify_changed();
                }
            }
        }
    }

    fn finish_screen(&mut self, target: ScreenTo, result: ScreenResult, ctx: &mut Context<Self>) {
        match target {
            ScreenTo::Reply(reply) => {
                let _ = reply.send(Ok(result));
            }
            ScreenTo::Sub {
                sub: id,
                generation,
            } => {
                let Some(sub) = self.subs.get_mut(&id) else {
                    return;
                };
                if sub.generation != generation || !sub.awaiting_snapshot {
                    return;
                }
                // Output must continue at seq + 1: if that left the ring
                // while the snapshot was computed, compute a newer one.
                let Some(offset) = self.ring.offset_after(result.seq) else {
                    let want = ScreenWant::Snapshot { scrollback: 0 };
                    self.queue_screen(
                        want,
                        ScreenTo::Sub {
                            sub: id,
                            generation,
                        },
                        false,
                        ctx,
                    );
                    return;
                };
                let super::ScreenOut::Snapshot(data) = result.out else {
                    return;
                };
                if sub.credit.sent_seq() > 0 || sub.credit.in_flight() > 0 {
                    let fresh = Credit::new(sub.credit.window(), result.seq, offset);
                    let old = std::mem::replace(&mut sub.credit, fresh);
                    if old.in_flight() > 0 {
                        sub.prior = Some((result.seq, old));
                    }
                } else {
                    sub.credit.reset_to(result.seq, offset);
                }
                sub.awaiting_snapshot = false;
                let sink = sub.sink.clone();
                self.deliver(
                    id,
                    &sink,
                    Delivery::Snapshot {
                        seq: result.seq,
                        cols: result.cols,
                        rows: result.rows,
                        data,
                    },
                );
                self.pump(id, ctx);
            }
        }
    }
}
