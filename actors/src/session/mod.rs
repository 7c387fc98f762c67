//! `SessionActor`: one per session, the I/O around `SessionCore`. Owns
//! the PTY handles, mode tracking, the cached screen model, and the
//! session's `Publisher` (ring, seqs, subscribers and their credit), which
//! it feeds from the PTY (`feed`) and for which it computes the snapshots
//! it wants; carries out what the core decides (`life`). Nothing is
//! dropped.

pub mod agent;
mod attention;
pub mod autogroup;
mod background;
pub mod bulk;
mod cgroup;
mod cold;
mod cpu_group;
pub use cgroup::release as release_cpu;
pub use cold::COOL_AFTER;
pub use cpu_group::prepare as prepare_cpu;
mod core;
mod feed;
mod handlers;
mod life;
mod messages;
mod model_cache;
pub mod modes;
pub mod page;
pub mod portable;
pub mod pty;
mod relaunch;
pub mod screen;
mod screen_cache;
mod screen_job;
mod screens;
mod shared;
pub(crate) mod sizes;
pub mod warmth;

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use termesh_transport::EventKind;
use tokio::sync::oneshot;

use self::core::SessionCore;
pub use self::core::SEQ_BLOCK;
#[cfg(feature = "fault-injection")]
pub use background::{HELD_BACKGROUND_JOBS, HOLD_BACKGROUND};
#[cfg(feature = "fault-injection")]
pub use feed::HOLD_INTAKE;
pub use messages::*;
pub use relaunch::Relaunch;
#[cfg(feature = "fault-injection")]
pub use screen_job::FAIL_SCREEN_JOBS;
pub use shared::{now_ms, Meta, SessionShared};

use crate::metrics::Metrics;
use crate::output::publisher::{Mode, Publisher, Subscription};
use crate::output::ring::Ring;
use crate::session::modes::ModeTracker;
use crate::session::screen::ResizeMark;
use pty::Pty;
use screen_cache::ScreenCache;

/// Output quiet for this long lets a cached screen model catch up in the
/// background, so the next snapshot (a reconnect) is warm.
const IDLE_CATCHUP: Duration = Duration::from_millis(100);
/// A cached screen model unused for this long, in a session nobody
/// subscribes to, is dropped: with full history it can hold megabytes, and
/// most sessions are not looked at most of the time.
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
    /// Quiet this long, the screen model goes (`model_cache`).
    pub model_idle: Duration,
    /// Where output, events and records are persisted (`None`: nowhere).
    pub store: Option<crate::store::StoreHandle>,
    /// The node's budget for warming screen models in the background.
    pub warmth: warmth::Warmth,
    /// What the node's PTYs share: the bulk reader thread, the node's
    /// typing, the input count.
    pub pty_io: pty::PtyIo,
    /// What the node knows of agents (built in, and `[[agents]]`).
    pub agents: agent::Agents,
    /// Where state changes are posted (`[[notify]]`), and the console's
    /// base URL for the link in them.
    pub notify: crate::notify::Notifier,
    pub console_url: String,
}

pub struct SessionActor {
    id: Arc<str>,
    /// The program's life, the intake and the timers, without I/O.
    core: SessionCore,
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
    /// The program's input queue, for a size the session sets itself (a
    /// given-back size goes in order with the keys queued before it).
    input: Option<pty::InputTx>,
    /// The PTY's events; held by the pending read while one runs.
    events: Option<tokio::sync::mpsc::Receiver<pty::PtyEvent>>,
    /// The current run's seqs, given (and logged) by its reader.
    seqs: Option<Arc<pty::Sequencer>>,
    publisher: Publisher,
    modes: ModeTracker,
    size: (u16, u16),
    /// Which subscribers sized the session, to give the size back.
    claims: sizes::SizeClaims,
    initial_size: (u16, u16),
    /// Resizes inside or just before the ring, for rebuilding the screen.
    marks: Vec<ResizeMark>,
    next_mark: u64,
    /// The screen model, the last snapshot and the waiting screen
    /// requests, without I/O.
    screen: ScreenCache,
    /// When output last arrived.
    last_output: std::time::Instant,
    /// The program's output rate: bulk or interactive (`bulk`; input
    /// marks `shared.typed`).
    flow: bulk::Flow,
    /// Restored without its ring (it had ended): `warm` reads it from the
    /// store before anything reads the ring.
    cold: bool,
    /// Counted in `Metrics::ended_warm` (read back by `warm`).
    warm_counted: bool,
    /// Set once the ended program is released (`let_program_go`).
    released: Option<tokio::sync::watch::Receiver<bool>>,
    /// The node stops and the kept program runs on: told once the PTY's
    /// last events are applied (`Leave`).
    leaving: Option<oneshot::Sender<()>>,
    /// Working, waiting or idle, and what reads it.
    attention: attention::Attention,
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
        actor.core =
            SessionCore::running(pty.kept, actor.settings.kill_grace, actor.first_seq_limit());
        actor.take_pty(pty);
        actor
    }

    /// Seqs that may be sent before any is reserved: none with a store.
    fn first_seq_limit(&self) -> u64 {
        if self.settings.store.is_some() {
            0
        } else {
            u64::MAX
        }
    }

    fn take_pty(&mut self, pty: Pty) {
        // A new run's seqs follow the last run's last (it may have logged
        // frames this session never applied: `on_output` skips them).
        let mut last = self.publisher.last_seq();
        if let Some(old) = self.seqs.take() {
            last = last.max(old.close());
        }
        let seqs = pty::Sequencer::new(
            self.id.clone(),
            self.settings.store.clone(),
            last,
            self.core.intake.seq_limit(),
        );
        pty.take_seqs(seqs.clone());
        self.seqs = Some(seqs);
        self.pid = pty.pid;
        self.flow = bulk::Flow::new(self.settings.pty_io.typed());
        self.reap_guard = Some(pty.reap_guard);
        self.terminal = Some(pty.terminal);
        self.input = Some(pty.input);
        self.events = Some(pty.events);
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
        actor.core = match &pty {
            Some(pty) => SessionCore::running(pty.kept, actor.settings.kill_grace, 0),
            None => SessionCore::restored(
                stored.info.status,
                stored.info.exit_code,
                actor.settings.kill_grace,
            ),
        };
        actor.cold = stored.cold && pty.is_none();
        if !actor.cold {
            actor.fill_ring(stored.tail, stored.last_seq);
        }
        actor.show_status();
        if let Some(pty) = pty {
            actor.take_pty(pty);
            return actor;
        }
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
        let settings_agent = settings.agents.of(&shared.command);
        let flow = bulk::Flow::new(settings.pty_io.typed());
        SessionActor {
            id: shared.id.clone(),
            core: SessionCore::running(false, settings.kill_grace, u64::MAX),
            publisher: Publisher::new(shared.id.clone(), ring, Mode::Owner, metrics.clone()),
            shared,
            settings,
            metrics,
            changed,
            pid: 0,
            reap_guard: None,
            terminal: None,
            input: None,
            events: None,
            seqs: None,
            modes: ModeTracker::default(),
            size,
            claims: sizes::SizeClaims::default(),
            initial_size: size,
            marks: Vec::new(),
            next_mark: 1,
            screen: ScreenCache::default(),
            last_output: std::time::Instant::now(),
            flow,
            cold: false,
            warm_counted: false,
            released: None,
            leaving: None,
            attention: attention::Attention::new(settings_agent),
        }
    }

    /// Tells subscribers of an event and watchers that the session changed.
    fn announce(&mut self, event: EventKind) {
        self.persist_event(&event);
        match event {
            // In order with each subscriber's output.
            EventKind::Resized { cols, rows } => self.publisher.resized(cols, rows),
            event => self.publisher.broadcast(Delivery::Event(event)),
        }
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

    fn notify_changed(&self) {
        self.changed.do_send(SessionChanged {
            id: self.id.clone(),
        });
    }

    /// Queues the snapshots the publisher wants for the next screen pass.
    fn after_publish(&mut self, ctx: &mut Context<Self>) {
        if !self.publisher.has_wanted() {
            return;
        }
        for w in self.publisher.take_wanted() {
            self.screen.want_snapshot(w);
        }
        self.start_job(ctx, false);
    }

    fn set_viewers(&self) {
        self.shared.viewers.store(
            self.publisher.len() as u32,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}
