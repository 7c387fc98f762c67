//! The session's screen cache without I/O (STYLE.md 17): the screen model
//! when one is kept, the last snapshot a pass computed, the screen
//! requests waiting for the next pass (bounded), and whether a pass runs.
//! It decides what a pass computes (each distinct request once), what the
//! last snapshot answers, and what becomes of a request whose pass failed
//! (retried once, then failed) or whose history a bounded rebuild could
//! not fill (asked again of a model that saw the whole ring). At most two
//! passes run at once: one in the background (nobody waits for it) and
//! one that someone waits for, which may overtake a background pass that
//! has the model (`screens.rs`); the newer model is kept. The actor runs
//! the passes (`screens.rs`) and delivers the answers.

use std::time::{Duration, Instant};

use termesh_transport::ErrorCode;

use super::screen::ScreenModel;
use super::{ScreenResult, ScreenTo, ScreenWant};
use crate::error::ApiError;
use crate::output::publisher::SnapshotWanted;
use crate::output::vocab::SubId;

/// How long a request someone waits for waits behind a background pass of
/// its session (counted from that pass's start) before it runs a pass of
/// its own: the background thread is in the idle class, and a machine kept
/// busy may not run it for as long as it stays busy, while a warming step
/// takes a few milliseconds on a core it gets.
pub const OVERTAKE_AFTER: Duration = Duration::from_millis(50);

/// Whether a pass may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// No: nothing to compute, or a pass of the kind it would be runs.
    Nothing,
    /// Not before this long: a background pass holds the model.
    After(Duration),
    /// Yes.
    Now,
}

/// Most screen requests a session holds for its next pass; beyond, a reply
/// request is refused as busy (a connection may have only a few in flight,
/// so this takes many connections at once).
pub const MAX_WAITING: usize = 64;

/// A screen request waiting for a pass.
pub struct Waiting {
    want: ScreenWant,
    to: ScreenTo,
    /// A pass for this request failed once already.
    retried: bool,
    /// It needs a model that saw the whole ring (a snapshot whose history
    /// a bounded rebuild could not fill).
    whole: bool,
}

impl Waiting {
    /// It is the node's own look at the session's state (no client waits).
    pub fn is_look(&self) -> bool {
        self.want == ScreenWant::Look
    }

    /// It is a snapshot for the subscriber `sub` (any generation).
    fn is_for(&self, sub: SubId) -> bool {
        matches!(self.to, ScreenTo::Sub { sub: s, .. } if s == sub)
    }
}

/// The last snapshot a pass computed.
pub struct LastSnapshot {
    pub want: ScreenWant,
    pub result: ScreenResult,
    /// The last resize the model had applied.
    pub resize_id: u64,
}

/// What one pass computes: the distinct requests (`wants`), and for each
/// waiting request the index of its want.
pub struct Pass {
    pub waiting: Vec<Waiting>,
    pub wants: Vec<ScreenWant>,
    pub slots: Vec<usize>,
    /// A request needs the whole ring.
    pub whole: bool,
}

/// The screen state of a session.
pub struct ScreenCache {
    /// The cached model; `None` while a pass has it, or once dropped.
    pub model: Option<Box<ScreenModel>>,
    /// A pass someone waits for runs (on the blocking pool).
    waited_pass: bool,
    /// A background pass runs (on the background thread): since when.
    background_pass: Option<Instant>,
    /// When a screen request last used the model.
    pub model_used: Instant,
    last: Option<LastSnapshot>,
    waiting: Vec<Waiting>,
}

impl Default for ScreenCache {
    fn default() -> Self {
        ScreenCache {
            model: None,
            waited_pass: false,
            background_pass: None,
            model_used: Instant::now(),
            last: None,
            waiting: Vec::new(),
        }
    }
}

impl ScreenCache {
    pub fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// A pass runs, of either kind.
    pub fn job_running(&self) -> bool {
        self.waited_pass || self.background_pass.is_some()
    }

    /// Whether a pass may start `now` for what waits (`catch_up`: even
    /// with nothing waiting) in a session that is `bulk` or not. At most
    /// one pass of each kind runs; one someone waits for may overtake a
    /// background pass `OVERTAKE_AFTER` after that pass started.
    pub fn may_start(&self, now: Instant, bulk: bool, catch_up: bool) -> Start {
        if self.waited_pass || (!self.has_waiting() && !catch_up) {
            return Start::Nothing;
        }
        let Some(since) = self.background_pass else {
            return Start::Now;
        };
        if !self.someone_waits(bulk) {
            return Start::Nothing;
        }
        match OVERTAKE_AFTER.checked_sub(now.saturating_duration_since(since)) {
            Some(left) if !left.is_zero() => Start::After(left),
            _ => Start::Now,
        }
    }

    /// The waiting requests make a pass someone waits for: not only looks
    /// at a bulk session's state (those run in the background).
    fn someone_waits(&self, bulk: bool) -> bool {
        self.has_waiting() && !(bulk && self.only_looks())
    }

    /// Whether a pass of `pass`'s requests runs in the background: a
    /// warming step (`ticket`), a catch-up nobody waits for, or looks at a
    /// bulk session's state.
    pub fn in_background(pass: &Pass, ticket: bool, bulk: bool) -> bool {
        ticket || pass.waiting.is_empty() || (bulk && pass.waiting.iter().all(Waiting::is_look))
    }

    /// A pass of that kind started at `now`.
    pub fn pass_started(&mut self, background: bool, now: Instant) {
        if background {
            debug_assert!(self.background_pass.is_none(), "one background pass");
            self.background_pass = Some(now);
        } else {
            debug_assert!(!self.waited_pass, "one waited pass");
            self.waited_pass = true;
        }
    }

    /// A pass of that kind ended.
    pub fn pass_ended(&mut self, background: bool) {
        if background {
            self.background_pass = None;
        } else {
            self.waited_pass = false;
        }
    }

    /// Every waiting request is the node's own look at the session's
    /// state (none at all: `true`).
    fn only_looks(&self) -> bool {
        self.waiting.iter().all(Waiting::is_look)
    }

    /// A pass's model, kept unless the model kept now is newer (a waited
    /// pass that overtook a background one may end first).
    pub fn keep_model(&mut self, model: Box<ScreenModel>) {
        let newer = |m: &ScreenModel| (m.seq(), m.resize_id()) <= (model.seq(), model.resize_id());
        if self.model.as_deref().is_none_or(newer) {
            self.model = Some(model);
        }
    }

    /// A reply request for the next pass, unless `MAX_WAITING` replies
    /// wait already (then it is answered busy at once).
    pub fn ask(&mut self, session: &str, want: ScreenWant, to: ScreenTo) {
        let replies = self
            .waiting
            .iter()
            .filter(|w| matches!(w.to, ScreenTo::Reply(_)))
            .count();
        match to {
            ScreenTo::Reply(reply) if replies >= MAX_WAITING => {
                let busy = format!(
                    "session `{session}` has {MAX_WAITING} screen requests waiting; try again"
                );
                let _ = reply.send(Err(ApiError::new(ErrorCode::Unavailable, busy)));
            }
            to => self.queue(want, to, false),
        }
    }

    fn queue(&mut self, want: ScreenWant, to: ScreenTo, retried: bool) {
        self.waiting.push(Waiting {
            want,
            to,
            retried,
            whole: false,
        });
        self.model_used = Instant::now();
    }

    /// A snapshot the publisher wants for a subscriber: a subscriber waits
    /// for one, its newest generation's.
    pub fn want_snapshot(&mut self, w: SnapshotWanted) {
        self.waiting.retain(|x| !x.is_for(w.sub));
        self.queue(
            ScreenWant::Snapshot {
                scrollback: w.scrollback,
            },
            ScreenTo::Sub {
                sub: w.sub,
                generation: w.generation,
            },
            false,
        );
    }

    /// Keeps `result` (for `want`, by a model that had applied the resizes
    /// through `resize_id`) when it is a snapshot.
    fn remember(&mut self, want: ScreenWant, result: &ScreenResult, resize_id: u64) {
        let older = self
            .last
            .as_ref()
            .is_some_and(|l| (l.result.seq, l.resize_id) > (result.seq, resize_id));
        if matches!(want, ScreenWant::Snapshot { .. }) && !older {
            self.last = Some(LastSnapshot {
                want,
                result: result.clone(),
                resize_id,
            });
        }
    }

    /// The last snapshot while it still shows the screen as it is: taken
    /// at `last_seq`, at `size`, after the resize `resize_id`.
    pub fn current(
        &self,
        last_seq: u64,
        size: (u16, u16),
        resize_id: u64,
    ) -> Option<&LastSnapshot> {
        self.last.as_ref().filter(|s| {
            s.result.seq == last_seq
                && (s.result.cols, s.result.rows) == size
                && s.resize_id == resize_id
        })
    }

    /// Any last snapshot, current or not.
    pub fn last(&self) -> Option<&LastSnapshot> {
        self.last.as_ref()
    }

    /// The waiting requests the last snapshot answers, taken, when no
    /// model is kept (with one, a pass costs as little) and it is current.
    pub fn answered_by_last(
        &mut self,
        last_seq: u64,
        size: (u16, u16),
        resize_id: u64,
    ) -> Vec<(ScreenTo, ScreenResult)> {
        if self.model.is_some() {
            return Vec::new();
        }
        let Some(last) = self.current(last_seq, size, resize_id) else {
            return Vec::new();
        };
        let (want, result) = (last.want, last.result.clone());
        let (hits, rest): (Vec<Waiting>, Vec<Waiting>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| w.want == want);
        self.waiting = rest;
        hits.into_iter().map(|w| (w.to, result.clone())).collect()
    }

    /// Every waiting request, for a pass: each distinct one computed once.
    pub fn take_pass(&mut self) -> Pass {
        let waiting: Vec<Waiting> = self.waiting.drain(..).collect();
        let mut wants: Vec<ScreenWant> = Vec::new();
        let slots = waiting
            .iter()
            .map(|w| match wants.iter().position(|x| *x == w.want) {
                Some(i) => i,
                None => {
                    wants.push(w.want);
                    wants.len() - 1
                }
            })
            .collect();
        let whole = waiting.iter().any(|w| w.whole);
        Pass {
            waiting,
            wants,
            slots,
            whole,
        }
    }

    /// A pass computed `results` (by its `wants`) with a model that had
    /// applied the resizes through `resize_id`: the answers to deliver; a
    /// request it could not fill waits for a pass over the whole ring.
    pub fn pass_done(
        &mut self,
        pass: Pass,
        results: &[Option<ScreenResult>],
        resize_id: u64,
    ) -> Vec<(ScreenTo, ScreenResult)> {
        let mut answers = Vec::new();
        for (w, slot) in pass.waiting.into_iter().zip(pass.slots) {
            match &results[slot] {
                Some(result) => {
                    self.remember(w.want, result, resize_id);
                    answers.push((w.to, result.clone()));
                }
                None => self.waiting.push(Waiting { whole: true, ..w }),
            }
        }
        answers
    }

    /// A pass failed: each request is tried once more; those that were
    /// retried already are answered with the failure (returned). The last
    /// snapshot goes: the retry rebuilds from the ring, not from the
    /// failing emulator's making.
    pub fn pass_failed(&mut self, pass: Pass) -> Vec<ScreenTo> {
        self.last = None;
        let mut failed = Vec::new();
        for w in pass.waiting {
            if w.retried {
                failed.push(w.to);
            } else {
                self.waiting.push(Waiting { retried: true, ..w });
            }
        }
        failed
    }
}

#[cfg(test)]
mod tests;
