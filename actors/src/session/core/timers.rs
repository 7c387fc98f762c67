//! The session's timers, in one table: which are armed, so that each is
//! armed at most once at a time, and those of a program's run are dropped
//! when a later run fires them.

/// A timer of the session's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timer {
    /// The program of `run` exited: its terminal's EOF is waited for no
    /// longer.
    EofGrace { run: u64 },
    /// A kill's grace for the program of `run` is over: SIGKILL.
    KillGrace { run: u64 },
    /// Output went quiet: a cached screen model catches up, or goes.
    Catchup,
    /// A background warming pass waits for the node's budget.
    Warm,
    /// A request someone waits for may overtake a background pass.
    Overtake,
    /// A look at dropping an idle screen model.
    DropModel,
    /// A look at letting an ended session go cold.
    Cool,
}

/// The armed timers.
#[derive(Debug, Default)]
pub struct Timers {
    armed: Vec<Timer>,
}

impl Timers {
    /// Arms `timer` unless it is armed: answers whether the caller must
    /// start it.
    pub fn arm(&mut self, timer: Timer) -> bool {
        if self.armed.contains(&timer) {
            return false;
        }
        self.armed.push(timer);
        true
    }

    pub fn is_armed(&self, timer: Timer) -> bool {
        self.armed.contains(&timer)
    }

    /// `timer` went off: it may be armed again.
    pub fn fired(&mut self, timer: Timer) {
        self.armed.retain(|t| *t != timer);
    }
}
