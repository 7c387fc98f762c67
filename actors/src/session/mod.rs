//! `SessionActor`: one per session. Owns the PTY handles, mode tracking,
//! the cached screen model, and the session's `Publisher` (ring, seqs,
//! subscribers and their credit), which it feeds from the PTY and for
//! which it computes the snapshots it wants. Nothing here is driven by a
//! timer and nothing is dropped.

mod cold;
pub use cold::COOL_AFTER;
mod handlers;
mod messages;
mod model_cache;
pub mod modes;
pub mod page;
pub mod portable;
pub mod pty;
mod relaunch;
pub mod screen;
mod screen_job;
mod screens;
mod shared;
pub mod warmth;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use termesh_transport::{EventKind, SessionStatus};
use tokio::sync::oneshot;

pub use messages::*;
pub use relaunch::Relaunch;
#[cfg(feature = "fault-injection")]
pub use screen_job::FAIL_SCREEN_JOBS;
pub use shared::{now_ms, Meta, SessionShared};

use crate::metrics::Metrics;
use crate::output::publisher::{Mode, Publisher, Subscription};
use crate::output::ring::Ring;
use crate::session::modes::ModeTracker;
use crate::session::screen::{ResizeMark, ScreenModel};
use pty::{ExitInfo, Pty, PtyEvent};

/// How long a session waits for reader EOF after the program exited
/// (a background process may hold the terminal open forever).
const EOF_GRACE: Duration = Duration::from_secs(2);
/// Output quiet for this long lets a cached screen model catch up in the
/// background, so the next snapshot (a reconnect) is warm.
const IDLE_CATCHUP: Duration = Duration::from_millis(100);
/// A cached screen model unused for this long, in a session nobody
/// subscribes to, is dropped: with full history it can hold megabytes, and
/// most sessions are not looked at most of the time.
const MODEL_TTL: Duration = Duration::from_secs(600);
/// Seqs reserved at a time in the store's high-water mark: a crash skips
/// at most this many seqs, and the next block is asked for half a block
/// ahead, so output never waits for the disk while it keeps up.
pub const SEQ_BLOCK: u64 = 4096;
/// How soon a failed reservation is tried again (output waits meanwhile:
/// a seq is never sent that a restart could give again).
const RESERVE_RETRY: Duration = Duration::from_secs(1);

/// Told to the registry whenever what `list` shows changes (not per frame).
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct SessionChanged {
    pub id: Arc<str>,
}

/// Settings a session reads from the node config.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    pub ring_bytes: usize,
    pub ring_frames: usize,
    pub kill_grace: Duration,
    /// Quiet this long, the screen model goes (`model_cache`).
    pub model_idle: Duration,
    /// Where output, events and records are persisted (`None`: nowhere).
    pub store: Option<crate::store::StoreHandle>,
}

pub struct SessionActor {
    id: Arc<str>,
    shared: Arc<SessionShared>,
    settings: SessionSettings,
    metrics: Arc<Metrics>,
    changed: Recipient<SessionChanged>,
    pid: i32,
    /// Held while the program's group may be signalled: the program is
    /// alive or an unreaped zombie, so `pid` still names our group. Dropped
    /// when the session finishes; no signal is sent after that.
    reap_guard: Option<pty::ReapGuard>,
    /// `None` for a session restored from the store (its program died
    /// with an earlier run of the node).
    terminal: Option<pty::Terminal>,
    /// The PTY's events; held by the pending read while one runs.
    events: Option<tokio::sync::mpsc::Receiver<PtyEvent>>,
    /// Intake is paused: a snapshot pins the ring and it is full. The
    /// PTY's reader then waits and the program's writes block with it.
    intake_paused: bool,
    /// Events read but not yet applied because intake paused.
    held: std::collections::VecDeque<PtyEvent>,
    publisher: Publisher,
    modes: ModeTracker,
    size: (u16, u16),
    initial_size: (u16, u16),
    /// Resizes inside or just before the ring, for rebuilding the screen.
    marks: Vec<ResizeMark>,
    next_mark: u64,
    /// The cached model; `None` while a job has it.
    model: Option<Box<ScreenModel>>,
    job_running: bool,
    /// When a screen request last used the model.
    model_used: std::time::Instant,
    /// When output last arrived, and whether an idle check is scheduled.
    last_output: std::time::Instant,
    catchup_scheduled: bool,
    /// A background warming pass waits for the node's budget.
    warm_scheduled: bool,
    /// The last snapshot computed (`model_cache`), and whether a look at
    /// dropping an idle model is scheduled.
    last_snapshot: Option<model_cache::LastSnapshot>,
    drop_scheduled: bool,
    /// Screen requests for the next pass (at most `MAX_WAITING`).
    waiting: Vec<screens::Waiting>,
    exit: Option<ExitInfo>,
    eof: bool,
    finished: bool,
    /// Restored without its ring (it had ended): `warm` reads it from the
    /// store before anything reads the ring.
    cold: bool,
    /// Counted in `Metrics::ended_warm` (read back by `warm`).
    warm_counted: bool,
    /// Set once the ended program is released (`let_program_go`).
    released: Option<tokio::sync::watch::Receiver<bool>>,
    /// Which run of the program the PTY events are from: a read still
    /// pending on an earlier run's PTY (revived since) is dropped.
    run: u64,
    /// Seqs up to this one may be sent: the store's high-water mark is on
    /// disk through it (`u64::MAX` without a store).
    seq_limit: u64,
    /// A reservation of the next block is on its way to the disk.
    reserving: bool,
    /// The program is the keeper's, not the node's child.
    kept: bool,
    /// The node stops and the kept program runs on: told once the PTY's
    /// last events are applied (`Leave`).
    leaving: Option<oneshot::Sender<()>>,
}

enum ScreenTo {
    Sub { sub: SubId, generation: u64 },
    Reply(oneshot::Sender<Result<ScreenResult, crate::error::ApiError>>),
}

impl SessionActor {
    pub fn new(
        shared: Arc<SessionShared>,
        pty: Pty,
        size: (u16, u16),
        settings: SessionSettings,
        metrics: Arc<Metrics>,
        changed: Recipient<SessionChanged>,
    ) -> Self {
        let ring = Ring::new(settings.ring_bytes, settings.ring_frames);
        let mut actor = Self::build(shared, ring, size, settings, metrics, changed);
        actor.take_pty(pty);
        actor
    }

    fn take_pty(&mut self, pty: Pty) {
        self.pid = pty.pid;
        self.reap_guard = Some(pty.reap_guard);
        self.terminal = Some(pty.terminal);
        self.events = Some(pty.events);
        self.kept = pty.kept;
    }

    /// A session found in the store at start: its newest output is in the
    /// ring with its seqs, and seqs continue above the last one stored.
    /// With `pty` its program ran on under the keeper and is taken up
    /// again; without, it is gone.
    pub fn restored(
        shared: Arc<SessionShared>,
        stored: crate::store::Restored,
        pty: Option<Pty>,
        settings: SessionSettings,
        metrics: Arc<Metrics>,
        changed: Recipient<SessionChanged>,
    ) -> Self {
        let ring = Ring::starting_at(stored.last_seq, settings.ring_bytes, settings.ring_frames);
        let size = (stored.info.cols, stored.info.rows);
        let mut actor = Self::build(shared, ring, size, settings, metrics, changed);
        actor.cold = stored.cold && pty.is_none();
        if !actor.cold {
            actor.fill_ring(stored.tail, stored.last_seq);
        }
        if let Some(pty) = pty {
            actor.take_pty(pty);
            return actor;
        }
        actor.finished = true;
        actor.eof = true;
        actor.finish_restored();
        actor
    }

    fn build(
        shared: Arc<SessionShared>,
        ring: Ring,
        size: (u16, u16),
        settings: SessionSettings,
        metrics: Arc<Metrics>,
        changed: Recipient<SessionChanged>,
    ) -> Self {
        let settings_has_store = settings.store.is_some();
        SessionActor {
            id: shared.id.clone(),
            publisher: Publisher::new(shared.id.clone(), ring, Mode::Owner, metrics.clone()),
            shared,
            settings,
            metrics,
            changed,
            pid: 0,
            reap_guard: None,
            terminal: None,
            events: None,
            intake_paused: false,
            held: std::collections::VecDeque::new(),
            modes: ModeTracker::default(),
            size,
            initial_size: size,
            marks: Vec::new(),
            next_mark: 1,
            model: None,
            job_running: false,
            model_used: std::time::Instant::now(),
            last_output: std::time::Instant::now(),
            catchup_scheduled: false,
            warm_scheduled: false,
            last_snapshot: None,
            drop_scheduled: false,
            waiting: Vec::new(),
            exit: None,
            eof: false,
            finished: false,
            cold: false,
            warm_counted: false,
            released: None,
            run: 0,
            seq_limit: if settings_has_store { 0 } else { u64::MAX },
            reserving: false,
            kept: false,
            leaving: None,
        }
    }

    /// Tells subscribers of an event and watchers that the session changed.
    fn announce(&self, event: EventKind) {
        self.persist_event(&event);
        self.publisher.broadcast(Delivery::Event(event));
        self.notify_changed();
    }

    /// Stores `event`; a resize with the seq of the output before it
    /// (`after_seq`), which places it in an export exactly: its time, in
    /// milliseconds, cannot order it against output of the same one.
    fn persist_event(&self, event: &EventKind) {
        let Some(store) = &self.settings.store else {
            return;
        };
        if let EventKind::Resized { .. } = event {
            let mut stored = serde_json::to_value(event).unwrap_or_default();
            stored["after_seq"] = self.publisher.last_seq().into();
            store.record_event(&self.id, stored);
        } else {
            store.event(&self.id, event);
        }
    }

    /// Asks the store to make seqs through the next block durable; output
    /// past the current limit waits for it (PROTOCOL.md section 4).
    fn reserve(&mut self, ctx: &mut Context<Self>) {
        let Some(store) = &self.settings.store else {
            return;
        };
        if self.reserving {
            return;
        }
        self.reserving = true;
        let upto = self.publisher.last_seq() + SEQ_BLOCK;
        let done = store.reserve(&self.id, upto);
        ctx.spawn(done.into_actor(self).map(move |done, act, ctx| {
            act.reserving = false;
            match done {
                Ok(()) => {
                    act.seq_limit = act.seq_limit.max(upto);
                    act.apply_held(ctx);
                }
                Err(e) => {
                    tracing::error!(session = %act.id, "store: seqs cannot be reserved, output waits: {e}");
                    ctx.run_later(RESERVE_RETRY, |act, ctx| act.apply_held(ctx));
                }
            }
        }));
    }

    fn notify_changed(&self) {
        self.changed.do_send(SessionChanged {
            id: self.id.clone(),
        });
    }

    /// Takes the next batch of PTY events (instead of `add_stream`, so
    /// intake can pause while a snapshot pins a full ring).
    fn pull(&mut self, ctx: &mut Context<Self>) {
        let Some(mut events) = self.events.take() else {
            return;
        };
        let run = self.run;
        let read = async move {
            let mut batch = Vec::with_capacity(16);
            let n = events.recv_many(&mut batch, 16).await;
            (events, batch, n)
        };
        ctx.spawn(
            read.into_actor(self)
                .map(move |(events, batch, n), act, ctx| {
                    if act.run != run {
                        return;
                    }
                    act.events = Some(events);
                    if n == 0 {
                        // Every PTY task is gone; the session stays readable,
                        // or, when the node stops, closes now.
                        if let Some(done) = act.leaving.take() {
                            act.close(false, ctx);
                            let _ = done.send(());
                        }
                        return;
                    }
                    act.held.extend(batch);
                    act.apply_held(ctx);
                }),
        );
    }

    /// Applies read events until one would evict frames a pending snapshot
    /// needs; then intake pauses until the snapshot is delivered.
    fn apply_held(&mut self, ctx: &mut Context<Self>) {
        while let Some(mut event) = self.held.pop_front() {
            // Reads that queued up while the session was busy become one
            // frame (up to a read's maximum): under a flood that means fewer,
            // larger frames for every subscriber; an idle session is unaffected.
            if let PtyEvent::Output(data) = &event {
                if matches!(self.held.front(), Some(PtyEvent::Output(_))) {
                    event = PtyEvent::Output(self.merge_outputs(data.clone()));
                }
            }
            if let PtyEvent::Output(data) = &event {
                if self.publisher.last_seq() >= self.seq_limit {
                    self.held.push_front(event);
                    self.reserve(ctx);
                    return;
                }
                if self.publisher.would_pause(data.len()) {
                    self.held.push_front(event);
                    self.intake_paused = true;
                    return;
                }
            }
            self.on_event(event, ctx);
        }
        self.pull(ctx);
    }

    fn merge_outputs(&mut self, first: Bytes) -> Bytes {
        let mut merged = bytes::BytesMut::from(&first[..]);
        while let Some(PtyEvent::Output(next)) = self.held.front() {
            if merged.len() + next.len() > crate::session::pty::READ_CHUNK {
                break;
            }
            merged.extend_from_slice(next);
            self.held.pop_front();
        }
        merged.freeze()
    }

    fn on_event(&mut self, event: PtyEvent, ctx: &mut Context<Self>) {
        match event {
            PtyEvent::Output(data) => self.on_output(data, ctx),
            PtyEvent::Eof => {
                self.eof = true;
                self.on_exit_or_eof(ctx);
            }
            PtyEvent::Exited(info) => {
                self.exit = Some(info);
                self.on_exit_or_eof(ctx);
            }
            PtyEvent::Lost => self.lose(),
        }
    }

    fn on_output(&mut self, data: Bytes, ctx: &mut Context<Self>) {
        self.modes.feed(&data);
        // In the output log before anyone is sent its seq: a node killed
        // now continues right after it.
        if let Some(store) = &self.settings.store {
            store.output(&self.id, self.publisher.last_seq() + 1, &data);
        }
        let frame = self.publisher.push(data);
        if frame.seq + SEQ_BLOCK / 2 >= self.seq_limit {
            self.reserve(ctx);
        }
        self.after_publish(ctx);
        self.shared.last_seq.store(frame.seq, Ordering::Relaxed);
        self.shared
            .last_output_ms
            .store(now_ms(), Ordering::Relaxed);
        self.shared
            .at_prompt
            .store(self.modes.at_prompt(), Ordering::Relaxed);
        self.last_output = std::time::Instant::now();
        if !self.catchup_scheduled && (self.model.is_some() || self.job_running) {
            self.catchup_scheduled = true;
            ctx.run_later(IDLE_CATCHUP, Self::idle_check);
        }
        self.keep_warm(ctx);
    }

    /// Queues the snapshots the publisher wants for the next screen pass.
    fn after_publish(&mut self, ctx: &mut Context<Self>) {
        if !self.publisher.has_wanted() {
            return;
        }
        for w in self.publisher.take_wanted() {
            // A subscriber waits for one snapshot: its newest generation's.
            self.waiting.retain(|x| !x.is_for(w.sub));
            self.waiting.push(screens::Waiting::sub(w));
        }
        self.model_used = std::time::Instant::now();
        self.start_job(ctx, false);
    }

    fn on_exit_or_eof(&mut self, ctx: &mut Context<Self>) {
        if self.finished {
            return;
        }
        match (self.exit, self.eof) {
            (Some(_), true) => self.finish(ctx),
            (Some(_), false) => {
                // Not for a later run (the session may be revived by then).
                let run = self.run;
                ctx.run_later(EOF_GRACE, move |act, ctx| {
                    if act.run == run {
                        act.finish(ctx);
                    }
                });
            }
            _ => {}
        }
    }

    fn finish(&mut self, ctx: &mut Context<Self>) {
        if self.finished {
            return;
        }
        self.cool_later(ctx);
        let exit = self.exit.unwrap_or(ExitInfo {
            code: 1,
            signal: None,
        });
        self.shared.update(|m| {
            m.status = SessionStatus::Exited;
            m.exit_code = Some(exit.code);
        });
        // The program has exited and its output ended: let the waiter reap
        // and the reader and writer go (a background job still holding the
        // terminal does not keep the master open), and close the master.
        self.let_program_go();
        self.terminal = None;
        tracing::info!(session = %self.id, code = exit.code, "session exited");
        if let Some(store) = &self.settings.store {
            store.sealed(&self.id);
        }
        self.persist_event(&EventKind::Exited {
            exit_code: exit.code,
            signal: exit.signal_name(),
        });
        self.publisher.finish(EventKind::Exited {
            exit_code: exit.code,
            signal: exit.signal_name(),
        });
        self.notify_changed();
    }

    /// Tells subscribers the session closes (`removed`: for good) and
    /// stops the actor.
    fn close(&mut self, removed: bool, ctx: &mut Context<Self>) {
        if let Some(store) = self.settings.store.as_ref().filter(|_| !removed) {
            // Nothing above the last seq was sent: a restart continues
            // right after it, without a gap.
            store.seq_mark(&self.id, self.publisher.last_seq());
        }
        self.publisher.broadcast(Delivery::Closed { removed });
        ctx.stop();
    }

    /// The session is done with its program (it exited, or was killed):
    /// it may be reaped (the node's own child by its waiter, a kept one by
    /// the keeper), and the session counts as exited.
    pub(crate) fn let_program_go(&mut self) {
        self.finished = true;
        self.shared.exited.store(true, Ordering::Release);
        let Some(guard) = self.reap_guard.take() else {
            return;
        };
        let Some(store) = self.settings.store.clone() else {
            guard.release();
            return;
        };
        // Released, a kept program is forgotten by the keeper: its end is
        // on disk first, or a crash in between brings it back `lost`.
        store.record(&self.shared.info());
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
        if self.finished {
            return;
        }
        self.finished = true;
        self.reap_guard = None;
        self.terminal = None;
        self.shared.exited.store(true, Ordering::Release);
        self.shared.update(|m| m.status = SessionStatus::Lost);
        tracing::error!(session = %self.id, pid = self.pid, "session lost: the PTY keeper that held its program is gone");
        self.persist_event(&EventKind::Lost);
        self.publisher.finish(EventKind::Lost);
        self.notify_changed();
    }

    /// Signals the program's groups, unless it may have been reaped
    /// (then its ids may belong to someone else now).
    fn signal(&self, signal: nix::sys::signal::Signal) {
        if self.reap_guard.is_some() {
            if let Some(terminal) = &self.terminal {
                pty::signal_groups(self.pid, terminal, signal);
            }
        }
    }

    fn set_viewers(&self) {
        self.shared
            .viewers
            .store(self.publisher.len() as u32, Ordering::Relaxed);
    }
}
