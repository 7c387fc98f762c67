//! A running session's state for its person (PROTOCOL.md section 15):
//! `working`, `waiting` or `idle`, from its agent's hooks, what its screen
//! shows and how long it has been quiet. A plain core: output, looks,
//! hooks and times in; changes out, which the session actor publishes.
//!
//! The screen is read (`rules::classify` over the bottom rows) once output
//! has settled (`SETTLE` quiet, at least every `MAX_SETTLE` while it
//! flows), never while nothing happens: a quiet session costs nothing, a
//! busy one a look a second at most.

pub mod hooks;
pub mod rules;

use std::time::{Duration, Instant};

use termesh_transport::AgentState;

pub use rules::{Agent, AgentSpec, Agents, Seen};

use super::shared::AgentView;

/// Output this recent means working (when the screen asks nothing).
pub const ACTIVE: Duration = Duration::from_secs(3);
/// Output is quiet this long before the screen is read...
pub const SETTLE: Duration = Duration::from_millis(250);
/// ...or it is read this long after the first output not yet read.
pub const MAX_SETTLE: Duration = Duration::from_secs(1);

/// The state of a program that just started.
pub fn starting(now_ms: u64) -> AgentView {
    AgentView {
        state: AgentState::Working,
        since: now_ms,
        waiting_for: None,
    }
}

/// What an agent's hook said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hook {
    Working,
    /// With the hook's message.
    Waiting(String),
}

/// What the session should do next for its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Read the screen now.
    Look,
    /// Quiet long enough, and the screen (unchanged since the last look)
    /// asks nothing: `quiet` now.
    Quiet,
    /// Ask again then.
    At(Instant),
    /// Nothing until more output or a hook.
    Nothing,
}

#[derive(Debug)]
pub struct Tracker {
    view: AgentView,
    /// What the last look saw.
    seen: Seen,
    /// A hook set the state while the screen showed this: looks that see
    /// the same leave the hook's state.
    pinned: Option<Seen>,
    /// Output not yet read: when the first of it came.
    unread_since: Option<Instant>,
    last_output: Instant,
    /// A look runs.
    looking: bool,
}

impl Tracker {
    pub fn new(now: Instant, now_ms: u64) -> Tracker {
        Tracker {
            view: starting(now_ms),
            seen: Seen::Nothing,
            pinned: None,
            unread_since: None,
            last_output: now,
            looking: false,
        }
    }

    pub fn view(&self) -> &AgentView {
        &self.view
    }

    /// Output came: an idle session works (a look decides the rest).
    pub fn output(&mut self, now: Instant, now_ms: u64) -> Option<AgentView> {
        self.last_output = now;
        self.unread_since.get_or_insert(now);
        if self.view.state == AgentState::Idle && self.pinned.is_none() {
            return self.set(AgentState::Working, None, now_ms);
        }
        None
    }

    /// When to act next.
    pub fn due(&self, now: Instant) -> Due {
        if self.looking {
            return Due::Nothing;
        }
        if let Some(first) = self.unread_since {
            let at = (self.last_output + SETTLE).min(first + MAX_SETTLE);
            return if now >= at { Due::Look } else { Due::At(at) };
        }
        let may_idle = self.view.state == AgentState::Working
            && self.pinned.is_none()
            && self.seen == Seen::Nothing;
        if may_idle {
            let at = self.last_output + ACTIVE;
            return if now >= at { Due::Quiet } else { Due::At(at) };
        }
        Due::Nothing
    }

    /// A look begins: output from now on is unread.
    pub fn looking(&mut self) {
        self.looking = true;
        self.unread_since = None;
    }

    /// A look could not be made (the screen is busy, or failed): tried
    /// again at the next due time.
    pub fn look_failed(&mut self, now: Instant) {
        self.looking = false;
        self.unread_since.get_or_insert(now);
    }

    /// What a look saw.
    pub fn looked(&mut self, now: Instant, now_ms: u64, seen: Seen) -> Option<AgentView> {
        self.looking = false;
        self.seen = seen.clone();
        match &self.pinned {
            Some(at_hook) if *at_hook == seen => return None,
            Some(_) => self.pinned = None,
            None => {}
        }
        match seen {
            Seen::Asking(line) | Seen::Prompt(line) => {
                self.set(AgentState::Waiting, Some(line), now_ms)
            }
            Seen::Busy => self.set(AgentState::Working, None, now_ms),
            Seen::Nothing if now.duration_since(self.last_output) >= ACTIVE => {
                self.set(AgentState::Idle, None, now_ms)
            }
            Seen::Nothing => self.set(AgentState::Working, None, now_ms),
        }
    }

    /// Quiet since the last look, which saw nothing: idle.
    pub fn quiet(&mut self, now_ms: u64) -> Option<AgentView> {
        self.set(AgentState::Idle, None, now_ms)
    }

    /// An agent's hook: its state at once, kept until the screen changes.
    pub fn hook(&mut self, now_ms: u64, hook: Hook) -> Option<AgentView> {
        self.pinned = Some(self.seen.clone());
        match hook {
            Hook::Working => self.set(AgentState::Working, None, now_ms),
            Hook::Waiting(message) => self.set(AgentState::Waiting, Some(message), now_ms),
        }
    }

    /// Sets the state; answers the new view when the state changed. The
    /// question of a session that stays waiting is updated in place (a
    /// prompt whose line grows as someone types is not a new question).
    fn set(
        &mut self,
        state: AgentState,
        waiting_for: Option<String>,
        now_ms: u64,
    ) -> Option<AgentView> {
        let waiting_for = waiting_for.filter(|_| state == AgentState::Waiting);
        if state == self.view.state {
            self.view.waiting_for = waiting_for;
            return None;
        }
        self.view = AgentView {
            state,
            since: now_ms,
            waiting_for,
        };
        Some(self.view.clone())
    }
}

#[cfg(test)]
mod tests;
