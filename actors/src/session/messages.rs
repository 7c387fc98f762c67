//! Messages a `SessionActor` handles. What it delivers to subscribers,
//! and the subscription messages, are the publisher's vocabulary
//! (`output::vocab`), re-exported here.

use actix::prelude::*;
use bytes::Bytes;
use nix::sys::signal::Signal;
use tokio::sync::oneshot;

pub use crate::output::vocab::*;

/// Already validated (cols 1..=1000, rows 1..=500).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Resize {
    pub cols: u16,
    pub rows: u16,
    /// The terminal was given the size already, in order with the input
    /// (`InputTx::resize`); else the session sets it.
    pub applied: bool,
}

/// Signal the program's process group (and the terminal's foreground
/// group); anything but KILL is followed by KILL after the grace time.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Kill {
    pub signal: Signal,
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct Rename {
    pub name: String,
}

/// Tells the session's viewers that `attach -d` took it (not stored: it
/// is about clients, not the program).
#[derive(Message)]
#[rtype(result = "()")]
pub struct DetachAttaches {
    pub keep: String,
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct Tag {
    pub tags: Vec<String>,
}

/// An agent's hook said where it is: its phase, its state, or both.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Hooked {
    pub phase: Option<String>,
    pub state: Option<super::agent::Hook>,
}

/// Answered once the session is `waiting` (at once if it is); with
/// `exited` when its program ends first, `unavailable` past `MAX_HELD`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WhenWaiting(pub oneshot::Sender<Result<(), crate::error::ApiError>>);

/// Stop the session for good (remove): kill the program if it runs, tell
/// subscribers, stop the actor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Close {
    pub removed: bool,
}

/// The node stops: a program the keeper holds runs on (the session stops
/// reading its terminal, hands what it read to the store, then closes as
/// `Close`); the node's own child is killed, as by `Close`. Answered on
/// the sender once the session has closed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Leave(pub tokio::sync::oneshot::Sender<()>);

/// What a screen request wants computed from the screen model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScreenWant {
    /// Escape sequences, with this many history lines above.
    Snapshot { scrollback: usize },
    /// Clean rendered lines, at most this many.
    Lines { max: usize },
    /// The visible screen as plain text rows.
    Text,
    /// The visible rows and the cursor, for reading the session's state.
    Look,
}

/// Ask for the screen; the answer comes on `reply` when computed (off the
/// actor thread).
#[derive(Message)]
#[rtype(result = "()")]
pub struct GetScreen {
    pub want: ScreenWant,
    pub reply: oneshot::Sender<Result<ScreenResult, crate::error::ApiError>>,
}

/// Answers once the ended program is released (to the keeper, or to the
/// node's waiter): a revive spawns only then, or the keeper, still holding
/// the old run, refuses the id.
#[derive(Message)]
#[rtype(result = "Option<tokio::sync::watch::Receiver<bool>>")]
pub struct Released;

/// The newest `limit` bytes of output the ring holds, with the last seq;
/// with `before`, the whole frames before that seq holding at most
/// `limit` bytes (at least one), and where they begin.
#[derive(Message)]
#[rtype(result = "RawTailResult")]
pub struct RawTail {
    pub limit: usize,
    pub before: Option<u64>,
}

#[derive(Debug, Clone, MessageResponse)]
pub struct RawTailResult {
    /// The session's last seq.
    pub last_seq: u64,
    pub data: Bytes,
    /// The seqs of the first and last frame in `data` (0 when none).
    pub first_seq: u64,
    pub end_seq: u64,
    /// Older output exists than `data` holds.
    pub more: bool,
}

/// A client resumed through another node's mirror: the program repaints
/// (SIGWINCH to its foreground group), as after a resume here.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Repaint;
