//! Messages a `SessionActor` handles, and what it delivers to subscribers.

use std::sync::Arc;

use actix::prelude::*;
use bytes::Bytes;
use nix::sys::signal::Signal;
use termesh_transport::EventKind;
use tokio::sync::oneshot;

use crate::ring::Frame;

/// Node-unique id of one subscription (a connection's attachment to a session).
pub type SubId = u64;

/// Something for one subscriber, in the order the session produced it.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Deliver {
    pub sub: SubId,
    pub session: Arc<str>,
    pub item: Delivery,
}

#[derive(Debug, Clone)]
pub enum Delivery {
    /// The reply to `Subscribe`, always first.
    Subscribed {
        id: u64,
        last_seq: u64,
        oldest_seq: u64,
        cols: u16,
        rows: u16,
    },
    /// Counted against the subscriber's window.
    Output(Frame),
    /// Not counted; the next output is `seq + 1`.
    Snapshot {
        seq: u64,
        cols: u16,
        rows: u16,
        data: Bytes,
    },
    ResyncRequired {
        last_seq: u64,
    },
    Event(EventKind),
    /// The subscription is gone: the session was removed (`removed`), or
    /// the node is shutting down.
    Closed {
        removed: bool,
    },
    /// The subscription could not be served (its snapshot failed twice,
    /// or the owner of a mirrored session is out of reach) and has ended;
    /// the client is told why, with `code`.
    Failed {
        code: termesh_transport::ErrorCode,
        message: String,
    },
}

/// Attach (or re-arm) a subscription. See PROTOCOL.md section 7.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Subscribe {
    pub sub: SubId,
    pub sink: Recipient<Deliver>,
    pub req_id: u64,
    pub from_seq: Option<u64>,
    /// Already clamped to the protocol's bounds.
    pub window: u64,
    pub scrollback: usize,
    /// A client, or another node's mirror.
    pub kind: crate::publisher::Kind,
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct Unsubscribe {
    pub sub: SubId,
}

/// Cumulative acknowledgement.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Ack {
    pub sub: SubId,
    pub seq: u64,
}

/// Already validated (cols 1..=1000, rows 1..=500).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Resize {
    pub cols: u16,
    pub rows: u16,
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

#[derive(Message)]
#[rtype(result = "()")]
pub struct Tag {
    pub tags: Vec<String>,
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct SetPhase {
    pub phase: String,
}

/// Stop the session for good (remove): kill the program if it runs, tell
/// subscribers, stop the actor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Close {
    pub removed: bool,
}

/// What a screen request wants computed from the screen model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScreenWant {
    /// Escape sequences, with this many history lines above.
    Snapshot { scrollback: usize },
    /// Clean rendered lines, at most this many.
    Lines { max: usize },
    /// The visible screen as plain text rows.
    Text,
}

#[derive(Debug, Clone)]
pub enum ScreenOut {
    Snapshot(Bytes),
    Lines(Vec<String>),
    Text(Vec<String>),
}

impl ScreenOut {
    pub fn into_snapshot(self) -> Option<Bytes> {
        match self {
            ScreenOut::Snapshot(data) => Some(data),
            _ => None,
        }
    }

    pub fn into_lines(self) -> Option<Vec<String>> {
        match self {
            ScreenOut::Lines(lines) | ScreenOut::Text(lines) => Some(lines),
            ScreenOut::Snapshot(_) => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ScreenResult {
    pub seq: u64,
    pub cols: u16,
    pub rows: u16,
    pub out: ScreenOut,
}

/// Ask for the screen; the answer comes on `reply` when computed (off the
/// actor thread).
#[derive(Message)]
#[rtype(result = "()")]
pub struct GetScreen {
    pub want: ScreenWant,
    pub reply: oneshot::Sender<Result<ScreenResult, crate::error::ApiError>>,
}

/// The newest `limit` bytes of output the session holds, with the last seq.
#[derive(Message)]
#[rtype(result = "RawTailResult")]
pub struct RawTail {
    pub limit: usize,
}

#[derive(Debug, Clone, MessageResponse)]
pub struct RawTailResult {
    pub last_seq: u64,
    pub data: Bytes,
}

/// A client resumed through another node's mirror: the program repaints
/// (SIGWINCH to its foreground group), as after a resume here.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Repaint;
