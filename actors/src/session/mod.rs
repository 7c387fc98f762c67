//! `SessionActor`: one per session. Owns the PTY handles, mode tracking,
//! the cached screen model, and the session's `Publisher` (ring, seqs,
//! subscribers and their credit), which it feeds from the PTY and for
//! which it computes the snapshots it wants. Nothing here is driven by a
//! timer and nothing is dropped.

mod handlers;
mod messages;
mod screen_job;
mod screens;
mod shared;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use portable_pty::MasterPty;
use termesh_transport::{EventKind, SessionStatus};
use tokio::sync::oneshot;

pub use messages::*;
pub use screen_job::FAIL_SCREEN_JOBS;
pub use shared::{now_ms, Meta, SessionShared};

use crate::metrics::Metrics;
use crate::modes::ModeTracker;
use crate::pty::{self, ExitInfo, Pty, PtyEvent};
use crate::publisher::{Kind, Publisher, Subscription};
use crate::ring::Ring;
use crate::screen::{ResizeMark, ScreenModel};

/// How long a session waits for reader EOF after the program exited
/// (a background process may hold the terminal open forever).
const EOF_GRACE: Duration = Duration::from_secs(2);
/// Output quiet for this long lets a cached screen model catch up in the
/// background, so the next snapshot (a reconnect) is warm.
const IDLE_CATCHUP: Duration = Duration::from_millis(100);
/// A cached screen model unused for this long is dropped: with full history
/// it can hold megabytes, and most sessions are not looked at most of the time.
const MODEL_TTL: Duration = Duration::from_secs(600);

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
    master: Arc<Mutex<Box<dyn MasterPty + Send>>>,
    /// The PTY threads' events; held by the pending read while one runs.
    events: Option<tokio::sync::mpsc::Receiver<PtyEvent>>,
    /// Intake is paused: a snapshot pins the ring and it is full. The
    /// reader thread then blocks and the program's writes with it.
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
    /// Screen requests for the next pass (at most `MAX_WAITING`).
    waiting: Vec<screens::Waiting>,
    exit: Option<ExitInfo>,
    eof: bool,
    finished: bool,
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
        SessionActor {
            id: shared.id.clone(),
            publisher: Publisher::new(
                shared.id.clone(),
                Ring::new(settings.ring_bytes, settings.ring_frames),
                false,
                metrics.clone(),
            ),
            shared,
            settings,
            metrics,
            changed,
            pid: pty.pid,
            reap_guard: Some(pty.reap_guard),
            master: pty.master,
            events: Some(pty.events),
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
            waiting: Vec::new(),
            exit: None,
            eof: false,
            finished: false,
        }
    }

    /// Tells subscribers of an event and watchers that the session changed.
    fn announce(&self, event: EventKind) {
        self.publisher.broadcast(Delivery::Event(event));
        self.notify_changed();
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
        let read = async move {
            let mut batch = Vec::with_capacity(16);
            let n = events.recv_many(&mut batch, 16).await;
            (events, batch, n)
        };
        ctx.spawn(read.into_actor(self).map(|(events, batch, n), act, ctx| {
            act.events = Some(events);
            if n == 0 {
                // Every PTY thread is gone; the session stays readable.
                return;
            }
            act.held.extend(batch);
            act.apply_held(ctx);
        }));
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
            if merged.len() + next.len() > crate::pty::READ_CHUNK {
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
        }
    }

    fn on_output(&mut self, data: Bytes, ctx: &mut Context<Self>) {
        self.modes.feed(&data);
        let frame = self.publisher.push(data);
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
    }

    /// Queues the snapshots the publisher wants for the next screen pass.
    fn after_publish(&mut self, ctx: &mut Context<Self>) {
        if !self.publisher.has_wanted() {
            return;
        }
        for w in self.publisher.take_wanted() {
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
            (Some(_), true) => self.finish(),
            (Some(_), false) => {
                ctx.run_later(EOF_GRACE, |act, _| act.finish());
            }
            _ => {}
        }
    }

    fn finish(&mut self) {
        if self.finished {
            return;
        }
        let exit = self.exit.unwrap_or(ExitInfo {
            code: 1,
            signal: None,
        });
        self.finished = true;
        // The program has exited and its output ended: let the waiter reap.
        self.reap_guard = None;
        self.shared.exited.store(true, Ordering::Release);
        self.shared.update(|m| {
            m.status = SessionStatus::Exited;
            m.exit_code = Some(exit.code);
        });
        tracing::info!(session = %self.id, code = exit.code, "session exited");
        self.publisher.finish(EventKind::Exited {
            exit_code: exit.code,
            signal: exit.signal_name(),
        });
        self.notify_changed();
    }

    /// Signals the program's groups, unless it may have been reaped
    /// (then its ids may belong to someone else now).
    fn signal(&self, signal: nix::sys::signal::Signal) {
        if self.reap_guard.is_some() {
            pty::signal_groups(self.pid, &self.master, signal);
        }
    }

    fn set_viewers(&self) {
        self.shared
            .viewers
            .store(self.publisher.len() as u32, Ordering::Relaxed);
    }
}
