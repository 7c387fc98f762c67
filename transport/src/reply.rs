//! The one bound every reply gets, on every path (WebSocket, REST, a
//! forward through a peer): `MAX_REPLY` bytes of payload, `too_large` past
//! it.

use crate::client::{ErrorCode, ServerMsg};
use crate::drive::GrepHit;

/// The largest reply (snapshot, history, events, stored output) any node
/// gives, in payload bytes (`ServerMsg::payload_len`), whichever node the
/// client is connected to: a raw `history{limit}` is cut to it (the newest
/// bytes), anything else over it is answered `too_large` (PROTOCOL.md
/// section 13). The peer link's frame bound is above it.
pub const MAX_REPLY: usize = 8 << 20;

impl ServerMsg {
    /// The bytes a reply carries beyond its fixed fields: what
    /// [`MAX_REPLY`] bounds (an estimate within a few bytes per item).
    pub fn payload_len(&self) -> usize {
        const PER_ITEM: usize = 16;
        match self {
            ServerMsg::Snapshot { data, .. } | ServerMsg::Output { data, .. } => data.len(),
            ServerMsg::History { lines, data, .. } => {
                lines
                    .iter()
                    .flatten()
                    .map(|l| l.len() + PER_ITEM)
                    .sum::<usize>()
                    + data.as_ref().map_or(0, Vec::len)
            }
            ServerMsg::Events { events, .. } => {
                events.iter().map(|e| e.to_string().len() + PER_ITEM).sum()
            }
            ServerMsg::StoredOutput { frames, .. } => {
                frames.iter().map(|f| f.data.len() + PER_ITEM).sum()
            }
            ServerMsg::Sessions { sessions, .. } => sessions.len() * 256,
            ServerMsg::Text { text, .. } => text.len(),
            ServerMsg::GrepHits { hits, .. } => hits.iter().map(GrepHit::reply_bytes).sum(),
            _ => 0,
        }
    }

    /// This reply, or `too_large` in its place when it is over
    /// [`MAX_REPLY`]: the one bound every path applies.
    pub fn bounded(self) -> ServerMsg {
        let len = self.payload_len();
        if len <= MAX_REPLY {
            return self;
        }
        let (id, session) = match &self {
            ServerMsg::Snapshot { id, session, .. } => (*id, Some(session.clone())),
            ServerMsg::History { id, session, .. }
            | ServerMsg::Events { id, session, .. }
            | ServerMsg::StoredOutput { id, session, .. }
            | ServerMsg::Text { id, session, .. } => (Some(*id), Some(session.clone())),
            ServerMsg::GrepHits { id, .. } => (Some(*id), None),
            ServerMsg::Sessions { id, .. } => (Some(*id), None),
            _ => (None, None),
        };
        ServerMsg::Error {
            id,
            session,
            code: ErrorCode::TooLarge,
            message: format!(
                "the reply would be {len} bytes, over the {MAX_REPLY}-byte bound: \
                 ask for less (a smaller scrollback or limit)"
            ),
        }
    }
}
