//! The session's logic without I/O (STYLE.md 2 and 17), as `MirrorCore` is
//! the mirror's: the program's life as named states, which run of the
//! program the PTY's events are from, the intake of those events
//! (`intake`), and the session's timers (`timers`). `SessionActor` feeds it
//! the PTY's events, requests and fired timers, and carries out the `Step`s
//! it returns; nothing here signals, writes or runs a timer. It is the one
//! owner of the session's status: what `SessionShared` shows is derived
//! from it (`status`, `takes_input`).

mod intake;
#[cfg(test)]
mod tests;
mod timers;

use std::time::Duration;

use nix::sys::signal::Signal;
use termesh_transport::SessionStatus;

pub use intake::{Intake, Next, SEQ_BLOCK};
pub use timers::{Timer, Timers};

use super::pty::ExitInfo;

/// How long a session waits for its terminal's EOF after the program
/// exited (a background process may hold the terminal open forever).
pub const EOF_GRACE: Duration = Duration::from_secs(2);

/// The program's life, as the session sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// It runs (or is an unreaped zombie not seen yet); `eof` once its
    /// terminal's output ended (a program may close it and run on).
    Running { eof: bool },
    /// It exited; its last output drains until the terminal's EOF, or
    /// `EOF_GRACE` (a background job may hold the terminal open).
    Draining { exit: ExitInfo },
    /// It ended and was let go (`exited`); a record restored without a
    /// code has none.
    Exited { exit: Option<ExitInfo> },
    /// It died with its keeper, or with an earlier run of the node
    /// (`lost`).
    Lost,
    /// The node stops and the keeper holds the program, which runs on: the
    /// session closes once the PTY's last events are applied.
    Leaving,
    /// The session closed (the node stops, or it was removed); it keeps
    /// the status and exit it had.
    Closed {
        status: SessionStatus,
        exit: Option<ExitInfo>,
    },
}

/// What the core asks the actor to do, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Signal the program's process groups (it is alive or an unreaped
    /// zombie: its ids are still its own).
    Signal(Signal),
    /// Call `fired` with this timer after the delay.
    Arm(Timer, Duration),
    /// The program ended and its output with it: seal its output, store
    /// and tell `exited`, close the terminal and let the program be
    /// reaped (or released to the keeper).
    Finish(ExitInfo),
    /// The program is gone with its keeper: drop the terminal and the
    /// reap guard, store and tell `lost`.
    Lose,
    /// Let the program be reaped or released without telling an end (the
    /// session closes; it was killed just before).
    LetGo,
    /// The keeper keeps the program: detach from it without killing it.
    Detach,
    /// Close the session now (`removed`: for good).
    Close { removed: bool },
}

/// The session's state without its I/O.
#[derive(Debug)]
pub struct SessionCore {
    program: Program,
    /// Which run of the program this is (a revive starts the next one):
    /// events and timers of an earlier run are dropped.
    run: u64,
    /// The keeper holds the program, not the node.
    kept: bool,
    kill_grace: Duration,
    pub intake: Intake,
    pub timers: Timers,
}

impl SessionCore {
    /// A session whose program runs (`kept`: under the keeper).
    pub fn running(kept: bool, kill_grace: Duration, seq_limit: u64) -> SessionCore {
        SessionCore {
            program: Program::Running { eof: false },
            run: 0,
            kept,
            kill_grace,
            intake: Intake::new(seq_limit),
            timers: Timers::default(),
        }
    }

    /// A session restored from the store without its program: `exited`
    /// (with its code when the record has one), or `lost`.
    pub fn restored(status: SessionStatus, code: Option<u32>, kill_grace: Duration) -> Self {
        let program = match status {
            SessionStatus::Exited => Program::Exited {
                exit: code.map(|code| ExitInfo { code, signal: None }),
            },
            _ => Program::Lost,
        };
        SessionCore {
            program,
            ..SessionCore::running(false, kill_grace, 0)
        }
    }

    #[cfg(test)]
    pub fn program(&self) -> Program {
        self.program
    }

    pub fn run(&self) -> u64 {
        self.run
    }

    pub fn kept(&self) -> bool {
        self.kept
    }

    /// The status every client and node is shown.
    pub fn status(&self) -> SessionStatus {
        match self.program {
            Program::Running { .. } | Program::Draining { .. } | Program::Leaving => {
                SessionStatus::Running
            }
            Program::Exited { .. } => SessionStatus::Exited,
            Program::Lost => SessionStatus::Lost,
            Program::Closed { status, .. } => status,
        }
    }

    /// The exit code shown beside `exited`.
    pub fn exit_code(&self) -> Option<u32> {
        match self.program {
            Program::Exited { exit } | Program::Closed { exit, .. } => exit.map(|e| e.code),
            _ => None,
        }
    }

    /// Input reaches the program (it has not been let go).
    pub fn takes_input(&self) -> bool {
        matches!(
            self.program,
            Program::Running { .. } | Program::Draining { .. } | Program::Leaving
        )
    }

    /// The program may be signalled: the session holds its reap guard.
    pub fn signallable(&self) -> bool {
        matches!(
            self.program,
            Program::Running { .. } | Program::Draining { .. }
        )
    }

    /// The program is done with (`exited` or `lost`): nothing runs.
    pub fn ended(&self) -> bool {
        matches!(self.program, Program::Exited { .. } | Program::Lost)
    }

    /// The session has let its program go (ended, or closed).
    pub fn finished(&self) -> bool {
        self.ended() || matches!(self.program, Program::Closed { .. })
    }

    /// Size changes still reach a terminal.
    pub fn resizable(&self) -> bool {
        self.takes_input()
    }

    /// The terminal's output ended.
    pub fn eof(&mut self) -> Vec<Step> {
        match self.program {
            Program::Running { .. } => {
                self.program = Program::Running { eof: true };
                Vec::new()
            }
            Program::Draining { exit } => self.finish(exit),
            _ => Vec::new(),
        }
    }

    /// The program exited: finished at once when its output already
    /// ended, else after its EOF or `EOF_GRACE`.
    pub fn exited(&mut self, exit: ExitInfo) -> Vec<Step> {
        match self.program {
            Program::Running { eof: true } => self.finish(exit),
            Program::Running { eof: false } => {
                self.program = Program::Draining { exit };
                vec![Step::Arm(Timer::EofGrace { run: self.run }, EOF_GRACE)]
            }
            _ => Vec::new(),
        }
    }

    fn finish(&mut self, exit: ExitInfo) -> Vec<Step> {
        self.program = Program::Exited { exit: Some(exit) };
        vec![Step::Finish(exit)]
    }

    /// The keeper that held the program is gone, and the program with it.
    pub fn keeper_lost(&mut self) -> Vec<Step> {
        if !self.signallable() {
            return Vec::new();
        }
        self.program = Program::Lost;
        vec![Step::Lose]
    }

    /// A client asks for `signal`; anything but SIGKILL is followed by
    /// SIGKILL after the kill grace, for whatever survived it (one grace
    /// for a run: a second signal within it does not extend it).
    pub fn kill(&mut self, signal: Signal) -> Vec<Step> {
        if !self.signallable() {
            return Vec::new();
        }
        let mut steps = vec![Step::Signal(signal)];
        if signal != Signal::SIGKILL {
            steps.push(Step::Arm(
                Timer::KillGrace { run: self.run },
                self.kill_grace,
            ));
        }
        steps
    }

    /// A timer armed earlier is due; one of an earlier run does nothing.
    pub fn fired(&mut self, timer: Timer) -> Vec<Step> {
        self.timers.fired(timer);
        match timer {
            Timer::EofGrace { run } if run == self.run => match self.program {
                Program::Draining { exit } => self.finish(exit),
                _ => Vec::new(),
            },
            Timer::KillGrace { run } if run == self.run && self.signallable() => {
                vec![Step::Signal(Signal::SIGKILL)]
            }
            _ => Vec::new(),
        }
    }

    /// The session closes (`remove`, or the node stops with the node's own
    /// child): a program still running is killed and let go.
    pub fn close(&mut self, removed: bool) -> Vec<Step> {
        if let Program::Closed { .. } = self.program {
            return Vec::new();
        }
        let mut steps = Vec::new();
        if self.signallable() {
            steps.extend([Step::Signal(Signal::SIGKILL), Step::LetGo]);
        }
        self.program = Program::Closed {
            status: self.status(),
            exit: match self.program {
                Program::Exited { exit } => exit,
                _ => None,
            },
        };
        steps.push(Step::Close { removed });
        steps
    }

    /// The node stops: a kept program runs on (the session closes once the
    /// PTY's last events are applied: `events_ended`); anything else
    /// closes now.
    pub fn leave(&mut self) -> Vec<Step> {
        if self.kept && self.signallable() {
            self.program = Program::Leaving;
            return vec![Step::Detach];
        }
        self.close(false)
    }

    /// Every PTY task is gone (their last events applied).
    pub fn events_ended(&mut self) -> Vec<Step> {
        match self.program {
            Program::Leaving => {
                self.program = Program::Closed {
                    status: SessionStatus::Running,
                    exit: None,
                };
                vec![Step::Close { removed: false }]
            }
            _ => Vec::new(),
        }
    }

    /// The program runs again (a revive of an ended session): the next
    /// run, with nothing held from the last.
    pub fn relaunched(&mut self, kept: bool) -> bool {
        if !self.ended() {
            return false;
        }
        self.run += 1;
        self.kept = kept;
        self.program = Program::Running { eof: false };
        self.intake.restart();
        true
    }
}
