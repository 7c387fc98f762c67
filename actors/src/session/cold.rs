//! A session that ended, cold: its ring and screen model are not in
//! memory (a restart brings ended sessions back so; an ended session that
//! nobody watches goes so after `COOL_AFTER`), and are read back from the
//! output log the first time something needs them (`warm`): a subscribe, a
//! screen, a raw tail, a revive.

use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;
use termesh_transport::{EventKind, SessionStatus};

use super::core::Timer;
use super::SessionActor;
use crate::metrics::Metrics;
use crate::output::publisher::{Mode, Publisher};
use crate::output::ring::Ring;

/// An ended session unused this long goes cold...
pub const COOL_AFTER: Duration = Duration::from_secs(30);
/// ...or this long while more than `WARM_MAX` ended sessions were read
/// back (someone looking through many: each holds a ring, up to
/// `session.ring_bytes`; its screen model goes after each pass, as an
/// ended session's screen does not change), so that a burst of reads
/// holds about `WARM_MAX` rings plus what is read in this long.
const COOL_SOON: Duration = Duration::from_millis(100);
const WARM_MAX: i64 = 16;

impl SessionActor {
    /// Fills the ring with stored frames (a new one: no subscriber holds
    /// the old), then skips to `last_seq`: seqs may have been sent above
    /// what was stored (a crash); they are never given again.
    pub(super) fn fill_ring(&mut self, tail: Vec<crate::store::Entry>, last_seq: u64) {
        let first = tail.first().map_or(last_seq, |e| e.n - 1);
        let ring = Ring::starting_at(first, self.settings.ring_bytes, self.settings.ring_frames);
        self.publisher = Publisher::new(self.id.clone(), ring, Mode::Owner, self.metrics.clone());
        for entry in tail {
            self.modes.feed(&entry.data);
            if self.publisher.push_at(entry.n, entry.data.clone()).is_err() {
                // A hole (a write that failed): continue after it.
                self.publisher.jump(entry.n - 1);
                let _ = self.publisher.push_at(entry.n, entry.data);
            }
        }
        self.publisher.skip_to(last_seq);
        self.core.intake.limit_to(self.publisher.last_seq());
    }

    /// A cold session's ring, read from the store the first time someone
    /// asks for it (a subscribe, a screen, a raw tail, a revive): once, on
    /// this thread, a ring's worth of reads from the page cache or disk.
    pub(crate) fn warm(&mut self, ctx: &mut Context<Self>) {
        if !std::mem::replace(&mut self.cold, false) {
            return;
        }
        let Some(store) = &self.settings.store else {
            return;
        };
        let tail = store.tail_now(&self.id, self.settings.ring_bytes);
        let last_seq = self.publisher.last_seq();
        self.fill_ring(tail, last_seq);
        self.finish_restored();
        self.warm_counted = true;
        Metrics::gauge(&self.metrics.ended_warm, 1);
        self.cool_later(ctx);
    }

    /// How long an unused ended session stays warm now.
    fn cool_after(&self) -> Duration {
        if self.metrics.ended_warm.load(Ordering::Relaxed) > WARM_MAX {
            COOL_SOON
        } else {
            COOL_AFTER
        }
    }

    /// The session stops: it no longer counts among the warm ones.
    pub(super) fn uncount_warm(&mut self) {
        if std::mem::replace(&mut self.warm_counted, false) {
            Metrics::gauge(&self.metrics.ended_warm, -1);
        }
    }

    /// Looks in `COOL_AFTER` whether this ended session can go cold.
    pub(super) fn cool_later(&mut self, ctx: &mut Context<Self>) {
        if self.settings.store.is_some() {
            self.arm(Timer::Cool, self.cool_after(), ctx);
        }
    }

    /// An ended session nobody watches or asked about for `COOL_AFTER`
    /// lets its ring and screen model go (its last snapshot stays): what
    /// it holds is in the output log, and `warm` reads it back when asked.
    /// So a node's memory does not grow with the ended sessions it keeps,
    /// however many are looked at over its life.
    pub(super) fn cool(&mut self, ctx: &mut Context<Self>) {
        if !self.core.finished() || self.cold || self.settings.store.is_none() {
            return;
        }
        let after = self.cool_after();
        let busy = !self.publisher.is_empty()
            || self.screen.job_running()
            || self.screen.model_used.elapsed() < after
            || self.last_output.elapsed() < after;
        if busy {
            self.arm(Timer::Cool, after, ctx);
            return;
        }
        let last_seq = self.publisher.last_seq();
        self.screen.model = None;
        self.fill_ring(Vec::new(), last_seq);
        self.finish_restored();
        self.cold = true;
        self.uncount_warm();
        super::model_cache::trim_soon();
    }

    /// Ends the output of a session restored without its program: every
    /// subscriber is told `exited`, or `lost` (its program died with an
    /// earlier run of the node; a mirror of another node too), after the
    /// output it is sent.
    pub(super) fn finish_restored(&mut self) {
        match (self.core.status(), self.core.exit_code()) {
            (SessionStatus::Exited, Some(code)) => self.publisher.finish(EventKind::Exited {
                exit_code: code,
                signal: None,
            }),
            (SessionStatus::Exited, None) => {}
            _ => self.publisher.finish(EventKind::Lost),
        }
    }
}
