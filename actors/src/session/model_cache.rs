//! A watched session's screen model costs about 120 KiB (avt, both
//! screens) for as long as it is kept; most watched sessions sit idle most
//! of the time. After `session.model_idle` (60 s) without output or
//! screen requests the
//! model is dropped and only its last snapshot is kept (a few KiB): a
//! request for that same snapshot at the same seq is answered from it, and
//! the next pass brings the model back from it without reading the ring:
//! its screen exactly, its history only as far as the snapshot held, so a
//! size change (which may pull history onto the screen) is applied to a
//! model rebuilt from the ring instead where the ring holds all the
//! output within one pass's bound (`screen_job`).

use actix::prelude::*;

use super::core::Timer;
use super::screen::ScreenModel;
use super::screen_cache::LastSnapshot;
use super::{ScreenOut, SessionActor};
use crate::metrics::Metrics;

impl SessionActor {
    /// The id of the last resize applied (0 before any).
    fn resize_id(&self) -> u64 {
        self.marks.last().map_or(0, |m| m.id)
    }

    /// The last snapshot, while it still shows the screen as it is: no
    /// output and no resize since.
    fn current_snapshot(&self) -> Option<&LastSnapshot> {
        self.screen
            .current(self.publisher.last_seq(), self.size, self.resize_id())
    }

    /// Answers the waiting requests the last snapshot answers, when no
    /// model is kept (with one, a pass costs as little).
    pub(super) fn answer_from_last(&mut self) {
        let (last_seq, size, resize_id) = (self.publisher.last_seq(), self.size, self.resize_id());
        for (to, result) in self.screen.answered_by_last(last_seq, size, resize_id) {
            self.finish_screen(to, result);
        }
    }

    /// Brings a dropped model back from the last snapshot, when the ring
    /// still holds every frame after it (the pass then feeds those, and
    /// the resizes after it apply in their place).
    pub(super) fn seed_model(&mut self) {
        // An ended session's model is dropped after every pass: seeded
        // from a snapshot it would hold only that snapshot's scrollback,
        // so its history would shrink after a `screen`; it is rebuilt from
        // the ring instead, the same way each time.
        if self.screen.model.is_some() || self.core.finished() {
            return;
        }
        let ring = self.publisher.ring();
        let Some(last) = self
            .screen
            .last()
            .filter(|s| super::screen_job::lag(ring, s.result.seq).is_some())
        else {
            return;
        };
        let ScreenOut::Snapshot(data) = &last.result.out else {
            return;
        };
        let r = &last.result;
        self.screen.model = Some(Box::new(ScreenModel::from_snapshot(
            r.cols,
            r.rows,
            r.seq,
            last.resize_id,
            data,
        )));
    }

    /// An ended session's screen no longer changes: its model (up to
    /// 10,000 rows of scrollback, ~19 MB at 120 columns) goes as soon as a
    /// pass leaves it where the last snapshot stands. Any other model is
    /// looked at again after `model_idle`, and goes if nothing used it.
    pub(super) fn schedule_model_drop(&mut self, ctx: &mut Context<Self>) {
        if self.core.timers.is_armed(Timer::DropModel) || self.screen.model.is_none() {
            return;
        }
        if self.core.finished() && !self.screen.job_running() && self.current_snapshot().is_some() {
            self.screen.model = None;
            Metrics::add(&self.metrics.screen_models_dropped, 1);
            trim_soon();
            return;
        }
        self.arm(Timer::DropModel, self.settings.model_idle, ctx);
    }

    /// `model_idle` after `schedule_model_drop`: the model goes if nothing
    /// used it meanwhile.
    pub(super) fn look_at_model(&mut self, ctx: &mut Context<Self>) {
        let quiet = self
            .last_output
            .elapsed()
            .min(self.screen.model_used.elapsed());
        if self.screen.job_running() || quiet < self.settings.model_idle {
            self.schedule_model_drop(ctx);
            return;
        }
        // Only a model that stands where the last snapshot does goes: it
        // comes back from that snapshot exactly.
        if self.current_snapshot().is_some() {
            self.screen.model = None;
            Metrics::add(&self.metrics.screen_models_dropped, 1);
            trim_soon();
        }
    }
}

/// Hands freed memory back to the kernel a moment after models were
/// dropped (one trim takes a burst of drops; a drop after it schedules the
/// next), off the actor threads: a node whose idle sessions just dropped
/// their models should look smaller from outside too.
pub(super) fn trim_soon() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static PENDING: AtomicBool = AtomicBool::new(false);
    if PENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    actix_rt::spawn(async {
        actix_rt::time::sleep(std::time::Duration::from_secs(2)).await;
        PENDING.store(false, Ordering::Release);
        let _ = actix_rt::task::spawn_blocking(crate::os::release_free_memory).await;
    });
}
