//! The publisher's vocabulary: what a subscriber asks of a session's
//! output (`Subscribe`, `Ack`, `Unsubscribe`), what it is delivered
//! (`Deliver`, `Delivery`), and the screens that snapshots carry. A local
//! session and a mirror speak it alike.

use std::sync::Arc;

use actix::prelude::*;
use bytes::Bytes;
use termesh_transport::EventKind;

use super::ring::Frame;

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
    pub kind: Kind,
}

/// The subscriber is about to resize the session to this size (just
/// before its `resize`): the session returns to the most recent such size
/// left when the subscriber holding the size leaves (`session::sizes`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct ClaimSize {
    pub sub: SubId,
    pub cols: u16,
    pub rows: u16,
}

/// The subscriber stands for no sizer any more (a mirror whose viewers
/// all left or stopped holding a size): as its leaving, for the size.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReleaseSize {
    pub sub: SubId,
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

#[derive(Debug, Clone)]
pub enum ScreenOut {
    Snapshot(Bytes),
    Lines(Vec<String>),
    Text(Vec<String>),
    /// The visible rows and the cursor (col, row).
    Look(Vec<String>, (usize, usize)),
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
            ScreenOut::Snapshot(_) | ScreenOut::Look(..) => None,
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

/// Who subscribes, which decides what a gap becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Viewer,
    Mirror,
}
