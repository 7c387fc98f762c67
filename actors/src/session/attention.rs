//! The session's state for its person, carried out: output and hooks go
//! to the `agent::Tracker`, the screen is read through the screen cache
//! when the tracker says so (off the actor thread, as any screen request),
//! and each change is published: `SessionInfo.state`, an
//! `event{kind:"state"}` to subscribers and the store, `session_changed`
//! to watchers.

use std::time::Instant;

use actix::prelude::*;
use termesh_transport::{AgentState, ErrorCode, EventKind};
use tokio::sync::oneshot;

use super::agent::{rules, Agent, Due, Hook, Tracker};
use super::screen_job::{lag, Job, Reach};
use super::shared::AgentView;
use super::{now_ms, ScreenOut, ScreenResult, ScreenTo, ScreenWant, SessionActor, WhenWaiting};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::notify::Change;

/// The session's state and what reads it.
#[derive(Debug)]
pub(super) struct Attention {
    pub tracker: Tracker,
    /// The agent the command runs, if known.
    pub agent: Option<Agent>,
    /// The earliest time a timer is armed for.
    armed_for: Option<Instant>,
    /// `send`s held until the session waits.
    held: Vec<oneshot::Sender<Result<(), ApiError>>>,
}

/// The most output a look feeds the model on the actor thread.
const LOOK_HERE: u64 = 4096;

/// Most `send{when:"waiting"}` a session holds.
pub const MAX_HELD: usize = 64;

impl Attention {
    pub fn new(agent: Option<Agent>) -> Attention {
        Attention {
            tracker: Tracker::new(Instant::now(), now_ms()),
            agent,
            armed_for: None,
            held: Vec::new(),
        }
    }
}

impl SessionActor {
    /// The actor starts: a program taken up after the node's restart has
    /// a screen to read; a new one goes idle if it stays quiet.
    pub(super) fn attend_start(&mut self, ctx: &mut Context<Self>) {
        if self.publisher.last_seq() > 0 {
            self.attend_output(ctx);
        } else {
            self.attend(ctx);
        }
    }

    /// Output came.
    /// Output came: on the output path, so nothing is locked or copied
    /// unless the state changes (idle to working).
    pub(super) fn attend_output(&mut self, ctx: &mut Context<Self>) {
        let change = self.attention.tracker.output(Instant::now(), now_ms());
        if change.is_some() {
            self.publish_state(change);
        }
        self.attend(ctx);
    }

    /// An agent's hook said what it does.
    pub(super) fn attend_hook(&mut self, hook: Hook) {
        if !self.core.takes_input() {
            return;
        }
        let change = self.attention.tracker.hook(now_ms(), hook);
        self.publish_state(change);
    }

    /// The program ended: held `send`s are told so.
    pub(super) fn attention_ended(&mut self) {
        for reply in self.attention.held.drain(..) {
            let _ = reply.send(Err(ApiError::exited(&self.id)));
        }
    }

    /// A new run of the program: it starts working.
    pub(super) fn attend_anew(&mut self) {
        let agent = self.attention.agent.take();
        self.attention = Attention::new(agent);
        let view = self.attention.tracker.view().clone();
        self.shared.update(|m| m.agent = Some(view));
    }

    /// Does what is due: a look now, idle now, or a timer for later.
    pub(super) fn attend(&mut self, ctx: &mut Context<Self>) {
        if !self.core.takes_input() {
            return;
        }
        let now = Instant::now();
        match self.attention.tracker.due(now) {
            Due::Look => self.look(ctx),
            Due::Quiet => {
                let change = self.attention.tracker.quiet(now_ms());
                self.publish_state(change);
            }
            Due::At(at) => {
                if self.attention.armed_for.is_some_and(|armed| armed <= at) {
                    return;
                }
                self.attention.armed_for = Some(at);
                ctx.run_later(at.saturating_duration_since(now), move |act, ctx| {
                    if act.attention.armed_for == Some(at) {
                        act.attention.armed_for = None;
                    }
                    act.attend(ctx);
                });
            }
            Due::Nothing => {}
        }
    }

    /// Reads the bottom of the screen and classifies it: here when the
    /// cached model is a few KiB behind (cheaper than a pass off the
    /// thread, and as short as handling that output was), else as a screen
    /// request off the actor thread.
    fn look(&mut self, ctx: &mut Context<Self>) {
        self.attention.tracker.looking();
        Metrics::add(&self.metrics.looks, 1);
        if let Some((rows, cursor)) = self.look_here() {
            let seen = rules::classify(&rows, cursor, self.attention.agent.as_ref());
            let change = self
                .attention
                .tracker
                .looked(Instant::now(), now_ms(), seen);
            self.publish_state(change);
            self.attend(ctx);
            return;
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.request_screen(ScreenWant::Look, ScreenTo::Reply(reply), ctx);
        ctx.spawn(answer.into_actor(self).map(|answer, act, ctx| {
            let now = Instant::now();
            match answer {
                Ok(Ok(ScreenResult {
                    out: ScreenOut::Look(rows, cursor),
                    ..
                })) => {
                    let seen = rules::classify(&rows, cursor, act.attention.agent.as_ref());
                    let change = act.attention.tracker.looked(now, now_ms(), seen);
                    act.publish_state(change);
                }
                // Busy, failed, or the session closes: tried again later.
                _ => act.attention.tracker.look_failed(now),
            }
            act.attend(ctx);
        }));
    }

    /// The visible rows and the cursor from the cached model brought up to
    /// date here, when it is at most `LOOK_HERE` behind and no pass holds
    /// it (a model kept is held by none); `None` otherwise (or when the
    /// emulator fails: the model is then rebuilt by the next pass).
    fn look_here(&mut self) -> Option<(Vec<String>, (usize, usize))> {
        let behind = lag(self.publisher.ring(), self.screen.model.as_ref()?.seq())?;
        if behind > LOOK_HERE {
            return None;
        }
        let job = Job::prepare(
            self.screen.model.take(),
            self.publisher.ring(),
            &self.marks,
            self.initial_size,
            String::new(),
            vec![ScreenWant::Look],
            Reach::Bounded,
        );
        let done =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run_here())).ok()?;
        self.screen.model = Some(done.model);
        match done.results.into_iter().next().flatten()?.out {
            ScreenOut::Look(rows, cursor) => Some((rows, cursor)),
            _ => None,
        }
    }

    /// Shows the tracker's view; a change of state is announced. Once the
    /// program has ended it has no state (a look that was under way when
    /// it ended changes nothing).
    fn publish_state(&mut self, change: Option<AgentView>) {
        if !self.core.takes_input() {
            return;
        }
        let view = self.attention.tracker.view().clone();
        self.shared.update(|m| {
            if m.agent.as_ref() != Some(&view) {
                m.agent = Some(view);
            }
        });
        if let Some(view) = change {
            if view.state == AgentState::Waiting {
                for reply in self.attention.held.drain(..) {
                    let _ = reply.send(Ok(()));
                }
            }
            Metrics::add(&self.metrics.state_changes, 1);
            self.notify(view.state.as_str(), view.waiting_for.clone());
            tracing::debug!(session = %self.id, state = view.state.as_str(), "session state");
            self.announce(EventKind::State {
                state: view.state,
                waiting_for: view.waiting_for,
            });
        }
    }
}

impl SessionActor {
    /// Tells the node's `[[notify]]` endpoints (those that want `state`).
    pub(super) fn notify(&self, state: &str, waiting_for: Option<String>) {
        self.settings.notify.tell(&Change {
            session: self.id.to_string(),
            name: self.shared.name(),
            node: self.shared.node.clone(),
            state: state.to_string(),
            waiting_for,
            seq: self.publisher.last_seq(),
            url: format!("{}/#/session/{}", self.settings.console_url, self.id),
        });
    }
}

impl Handler<WhenWaiting> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: WhenWaiting, _: &mut Context<Self>) {
        let answer = if !self.core.takes_input() {
            Some(Err(ApiError::exited(&self.id)))
        } else if self.attention.tracker.view().state == AgentState::Waiting {
            Some(Ok(()))
        } else if self.attention.held.len() >= MAX_HELD {
            Some(Err(ApiError::new(
                ErrorCode::Unavailable,
                format!(
                    "session `{}` holds {MAX_HELD} sends for when it waits already",
                    self.id
                ),
            )))
        } else {
            None
        };
        match answer {
            Some(answer) => {
                let _ = msg.0.send(answer);
            }
            None => self.attention.held.push(msg.0),
        }
    }
}
