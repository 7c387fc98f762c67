//! What passes between a mirror and its owner's `PeerActor`: each side
//! knows these messages, so neither imports the other's module for them.

use std::sync::Arc;

use actix::prelude::*;
use termesh_transport::peer::DataMsg;

/// From the owner's `PeerActor` to a mirror.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub enum FromOwner {
    /// Something of the mirror's subscription, in the owner's order.
    Data(DataMsg),
    /// The link to the owner came up (`true`) or went down.
    Link(bool),
}

/// From a mirror to its owner's `PeerActor`.
#[derive(Message)]
#[rtype(result = "()")]
pub enum ToOwner {
    /// Subscribe (again) at the owner; answered on `sink`, or with
    /// `Link(false)` while the link is down.
    Subscribe {
        session: Arc<str>,
        from_seq: Option<u64>,
        window: u64,
        sink: Recipient<FromOwner>,
    },
    /// The ring absorbed the owner's output through `seq`.
    Ack { session: Arc<str>, seq: u64 },
    /// The mirror is gone.
    End { session: Arc<str> },
    /// A client resumed here: the owner's program repaints.
    Repaint { session: Arc<str> },
    /// The size this mirror's viewers stand for (`PeerMsg::ClaimSize`).
    ClaimSize {
        session: Arc<str>,
        size: Option<(u16, u16)>,
        apply: bool,
    },
}
