//! The PTY's events into the session: read in batches (instead of
//! `add_stream`, so intake can stop), passed through the core's intake,
//! and applied: output is logged, then published with its seq; an exit or
//! EOF goes to the core.

use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;

use super::core::{Next, Timer};
use super::pty::PtyEvent;
use super::{now_ms, SessionActor, IDLE_CATCHUP};

/// Fault injection for the test of what a kill finds logged: while set,
/// sessions apply nothing they read (it waits in the channel and the
/// intake, as behind a busy session thread). Built only with the
/// `fault-injection` feature (the node's tests turn it on).
#[cfg(feature = "fault-injection")]
pub static HOLD_INTAKE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// How soon a failed reservation is tried again (output waits meanwhile:
/// a seq is never sent that a restart could give again).
const RESERVE_RETRY: Duration = Duration::from_secs(1);
/// How often a session whose flooding job is demoted (`bulk::Flow`) looks
/// whether someone typed into it.
const TYPING_CHECK: Duration = Duration::from_millis(100);

impl SessionActor {
    /// Takes the next batch of PTY events.
    pub(super) fn pull(&mut self, ctx: &mut Context<Self>) {
        let Some(mut events) = self.events.take() else {
            return;
        };
        let run = self.core.run();
        let read = async move {
            let mut batch = Vec::with_capacity(16);
            let n = events.recv_many(&mut batch, 16).await;
            (events, batch, n)
        };
        ctx.spawn(
            read.into_actor(self)
                .map(move |(events, batch, n), act, ctx| {
                    // A read still pending on an earlier run's PTY.
                    if act.core.run() != run {
                        return;
                    }
                    act.events = Some(events);
                    if n == 0 {
                        // Every PTY task is gone; the session stays
                        // readable, or, when the node stops, closes now.
                        let steps = act.core.events_ended();
                        act.carry_out(steps, ctx);
                        return;
                    }
                    act.core.intake.read(batch);
                    act.take_in(ctx);
                }),
        );
    }

    /// Applies read events until the intake stops (seqs to reserve, or a
    /// snapshot pins a full ring) or its turn ends (`TURN_BYTES`: the
    /// thread's other sessions run, then this one goes on); reads more
    /// once all are applied.
    pub(super) fn take_in(&mut self, ctx: &mut Context<Self>) {
        #[cfg(feature = "fault-injection")]
        if HOLD_INTAKE.load(Ordering::SeqCst) {
            ctx.run_later(Duration::from_millis(20), |act, ctx| act.take_in(ctx));
            return;
        }
        loop {
            let last_seq = self.publisher.last_seq();
            let publisher = &self.publisher;
            match self
                .core
                .intake
                .next(last_seq, |len| publisher.would_pause(len))
            {
                Next::Apply(event) => self.on_event(event, ctx),
                Next::Reserve(upto) => return self.reserve(upto, ctx),
                Next::Wait => return,
                Next::Read => return self.pull(ctx),
                Next::Yield => {
                    // An empty task of the thread's own finishes only once
                    // this session's task has let the thread go, behind
                    // the sessions woken before it (a `yield_now` would
                    // not: actix polls a context again at once whenever
                    // it spawned something meanwhile).
                    let turn = actix_rt::spawn(async {}).into_actor(self);
                    ctx.spawn(turn.map(|_, act, ctx| act.take_in(ctx)));
                    return;
                }
            }
        }
    }

    /// Asks the store to make seqs through `upto` durable; output past the
    /// current limit waits for it (PROTOCOL.md section 4).
    pub(super) fn reserve(&mut self, upto: u64, ctx: &mut Context<Self>) {
        let Some(store) = &self.settings.store else {
            return;
        };
        let done = store.reserve(&self.id, upto);
        ctx.spawn(done.into_actor(self).map(move |done, act, ctx| {
            act.core.intake.reserved(upto, done.is_ok());
            if let Err(e) = done {
                tracing::error!(session = %act.id, "store: seqs cannot be reserved, output waits: {e}");
                ctx.run_later(RESERVE_RETRY, |act, ctx| {
                    // The reader waits for seqs too: ask again.
                    if let Some(upto) = act.core.intake.reserve(act.publisher.last_seq()) {
                        act.reserve(upto, ctx);
                    }
                    act.take_in(ctx);
                });
            } else {
                if let Some(seqs) = &act.seqs {
                    seqs.raise(upto);
                }
                act.take_in(ctx);
            }
        }));
    }

    fn on_event(&mut self, event: PtyEvent, ctx: &mut Context<Self>) {
        let steps = match event {
            PtyEvent::Output { seq, data } => {
                termesh_transport::hops::pass("out_session", &data);
                return self.on_output(seq, data, ctx);
            }
            PtyEvent::Eof => self.core.eof(),
            PtyEvent::Exited(info) => self.core.exited(info),
            PtyEvent::Lost => self.core.keeper_lost(),
        };
        self.carry_out(steps, ctx);
    }

    /// While the program's job is demoted, looks for input every
    /// `TYPING_CHECK`: a job starved by busy cores may print nothing, and
    /// output is where `Flow` otherwise sees that someone typed; and ends
    /// a key-started flood's nice value after a second with no output.
    fn watch_typing(&mut self, ctx: &mut Context<Self>) {
        if !self.flow.watch_typing() {
            return;
        }
        ctx.run_later(TYPING_CHECK, |act, ctx| {
            act.flow.looked();
            act.flow.input(&act.shared.typed, act.pid);
            if let Some(terminal) = &act.terminal {
                act.flow
                    .tick(&act.shared.typed, act.pid, || terminal.foreground_group());
                terminal.lane().set_bulk(act.flow.is_bulk());
                act.watch_typing(ctx);
            }
        });
    }

    /// Output `seq`, in the output log already (its reader put it there
    /// before queuing it: a node killed now continues right after it).
    fn on_output(&mut self, seq: u64, data: Bytes, ctx: &mut Context<Self>) {
        let expected = self.publisher.last_seq() + 1;
        if seq < expected {
            tracing::error!(session = %self.id, seq, expected, "output with a seq already sent is dropped");
            return;
        }
        if seq > expected {
            // An earlier run logged frames it never queued here: clients
            // resync across them.
            self.publisher.skip_to(seq - 1);
        }
        self.modes.feed(&data);
        if let Some(terminal) = &self.terminal {
            self.flow
                .output(data.len(), &self.shared.typed, self.pid, || {
                    terminal.foreground_group()
                });
            terminal.lane().set_bulk(self.flow.is_bulk());
            self.watch_typing(ctx);
        }
        let frame = self.publisher.push(data);
        if let Some(upto) = self.core.intake.sent(frame.seq) {
            self.reserve(upto, ctx);
        }
        self.after_publish(ctx);
        self.shared.last_seq.store(frame.seq, Ordering::Relaxed);
        self.shared
            .last_output_ms
            .store(now_ms(), Ordering::Relaxed);
        self.shared
            .at_prompt
            .store(self.modes.at_prompt(), Ordering::Relaxed);
        self.shared
            .bracketed_paste
            .store(self.modes.mode(2004), Ordering::Relaxed);
        self.last_output = std::time::Instant::now();
        self.attend_output(ctx);
        if self.screen.model.is_some() || self.screen.job_running() {
            self.arm(Timer::Catchup, IDLE_CATCHUP, ctx);
        }
        self.keep_warm(ctx);
    }
}
