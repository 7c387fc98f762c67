//! The client protocol's messages (PROTOCOL.md sections 5 and 6), as data.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::drive::GrepHit;
use crate::session::{AgentState, SessionInfo};

/// Protocol version sent in `welcome.proto`.
pub const PROTO_VERSION: u32 = 1;
/// WebSocket subprotocol the server echoes when offered.
pub const SUBPROTOCOL: &str = "termesh.v1";
/// Largest `input.data`.
pub const MAX_INPUT: usize = 64 * 1024;
/// Most history lines a snapshot or `history` returns.
pub const MAX_SCROLLBACK: u64 = 10_000;

/// Error codes (PROTOCOL.md section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    BadFrame,
    UnknownType,
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    Exited,
    TooLarge,
    Unavailable,
    Internal,
    /// A `wait` reached its `timeout_ms` (PROTOCOL.md section 15).
    Timeout,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadFrame => "bad_frame",
            ErrorCode::UnknownType => "unknown_type",
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Exited => "exited",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
            ErrorCode::Timeout => "timeout",
        }
    }
}

/// Body of `create` (also the REST `POST /sessions` body).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What `revive` runs instead of `command` (default: the agent's known
    /// resume command, if any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_command: Option<Vec<String>>,
}

/// A message from a client. `id` is the request id the reply carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum ClientMsg {
    /// Authenticate with a token; reply `ok`.
    Auth { id: u64, token: String },
    /// Reply `sessions` with the whole cluster's sessions; with `limit`, a
    /// page of at most that many, ordered by id, after the id `after`.
    List {
        id: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<u32>,
    },
    /// Reply `ok`, then `session_changed` / `session_removed` notifications.
    Watch { id: u64 },
    /// Start a session; reply `created`.
    Create {
        id: u64,
        #[serde(flatten)]
        req: CreateRequest,
    },
    /// Attach to a session's output (section 7); reply `subscribed`.
    Subscribe {
        id: u64,
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_seq: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scrollback: Option<u64>,
    },
    /// Detach; no reply.
    Unsubscribe { session: String },
    /// Cumulative acknowledgement of output up to `seq`; no reply.
    Ack { session: String, seq: u64 },
    /// Keystrokes for the session's program; no reply.
    Input {
        session: String,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Change the terminal size; no reply.
    Resize {
        session: String,
        cols: u64,
        rows: u64,
    },
    /// Reply `snapshot` with the screen now.
    Screen {
        id: u64,
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scrollback: Option<u64>,
    },
    /// Reply `history`: rendered lines, or the raw tail with `limit`;
    /// with `before_seq` or `rows`, a page of rendered lines of the stored
    /// output before `before_seq` (PROTOCOL.md section 14).
    History {
        id: u64,
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        before_seq: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rows: Option<u32>,
    },
    /// Signal the session's process group; reply `ok`.
    Kill {
        id: u64,
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<String>,
    },
    /// Reply `ok`.
    Rename {
        id: u64,
        session: String,
        name: String,
    },
    /// End every `termesh attach` of the session but the one whose tag
    /// is `keep` (`attach -d`): they get `event{kind: "detached", keep}`;
    /// reply `ok`.
    Detach {
        id: u64,
        session: String,
        keep: String,
    },
    /// Replace the tags; reply `ok`.
    Tag {
        id: u64,
        session: String,
        tags: Vec<String>,
    },
    /// Kill if running and forget the session; reply `ok`.
    Remove {
        id: u64,
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        purge: Option<bool>,
    },
    /// Stored events after the id `after` (default 0: from the oldest
    /// kept), at most `limit` (default and most `MAX_EVENTS`); reply
    /// `events`.
    Events {
        id: u64,
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<u64>,
    },
    /// Stored output frames after seq `after` (default 0: from the oldest
    /// kept), up to `max_bytes` of data (default and most
    /// `MAX_READ_OUTPUT`; at least one frame); reply `stored_output`.
    ReadOutput {
        id: u64,
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_bytes: Option<u64>,
    },
    /// Run an exited or lost session's command again in its cwd, same id,
    /// seqs continuing; reply `ok`.
    Revive { id: u64, session: String },
    /// Type `text` as the program expects typed text, then Enter unless
    /// `submit` is false; with `when: waiting`, once the session waits.
    /// Reply `ok` once written (PROTOCOL.md section 15).
    Send {
        id: u64,
        session: String,
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        submit: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        when: Option<SendWhen>,
    },
    /// Answered `state` once the session is in one of `until` (states,
    /// and/or `exited`; an ended session answers `exited`), or `timeout`
    /// past `timeout_ms` (PROTOCOL.md section 15).
    Wait {
        id: u64,
        session: String,
        until: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// What the session printed after `since_seq`, as plain text; reply
    /// `text`.
    Read {
        id: u64,
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since_seq: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_bytes: Option<u64>,
    },
    /// Search the plain text of stored output (docs/protocol.md section
    /// 16): of every node's sessions, or of `node`'s only. Answered by a
    /// `grep_hits` per node as each finishes, then `grep_done`; a request
    /// naming a node gets its `grep_hits` alone.
    Grep {
        id: u64,
        pattern: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sessions: Option<Vec<String>>,
        /// Only output stored at or after this unix ms.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since_ms: Option<u64>,
        /// Only sessions in this state now.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<String>,
        /// Lines of context before and after a hit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_hits: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
    /// Reply `pong` echoing `nonce`.
    Ping {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nonce: Option<rmpv::Value>,
    },
}

impl ClientMsg {
    /// `list` of every session (no page).
    pub fn list(id: u64) -> ClientMsg {
        ClientMsg::List {
            id,
            after: None,
            limit: None,
        }
    }

    /// The wire name of the message type.
    pub fn kind(&self) -> &'static str {
        self.kind_of().name()
    }
}

/// Declares the client request kinds once: the `RequestKind` enum, its wire
/// names (as serde's `snake_case` names the variants), `kind_of` and
/// `CLIENT_TYPES`.
macro_rules! client_kinds {
    ($($variant:ident => $name:literal,)*) => {
        /// The kind of a client message, without its fields.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum RequestKind {
            $($variant,)*
        }

        impl RequestKind {
            /// Every kind, in the order PROTOCOL.md lists them.
            pub const ALL: &'static [RequestKind] = &[$(RequestKind::$variant,)*];

            /// The wire name (`t`).
            pub fn name(self) -> &'static str {
                match self {
                    $(RequestKind::$variant => $name,)*
                }
            }
        }

        impl ClientMsg {
            pub fn kind_of(&self) -> RequestKind {
                match self {
                    $(ClientMsg::$variant { .. } => RequestKind::$variant,)*
                }
            }
        }

        /// Known client message types, for telling `unknown_type` from
        /// `bad_request`.
        pub const CLIENT_TYPES: &[&str] = &[$($name,)*];
    };
}

client_kinds! {
    Auth => "auth",
    List => "list",
    Watch => "watch",
    Create => "create",
    Subscribe => "subscribe",
    Unsubscribe => "unsubscribe",
    Ack => "ack",
    Input => "input",
    Resize => "resize",
    Screen => "screen",
    History => "history",
    Kill => "kill",
    Rename => "rename",
    Detach => "detach",
    Tag => "tag",
    Remove => "remove",
    Events => "events",
    Revive => "revive",
    ReadOutput => "read_output",
    Send => "send",
    Wait => "wait",
    Read => "read",
    Grep => "grep",
    Ping => "ping",
}

/// When a `send` is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendWhen {
    /// At once.
    #[default]
    Now,
    /// Once the session is `waiting` (at once if it is).
    Waiting,
}

/// Most output bytes one `stored_output` reply carries.
pub const MAX_READ_OUTPUT: u64 = 1 << 20;

/// One stored frame: its seq, when it was stored (unix ms), its bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredFrame {
    pub seq: u64,
    pub ts: u64,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// Most events one `events` reply carries.
pub const MAX_EVENTS: u64 = 1_000;

/// Session events sent to subscribers (`event` notification).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    Resized {
        cols: u16,
        rows: u16,
    },
    Exited {
        exit_code: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<String>,
    },
    Renamed {
        name: String,
    },
    /// `attach -d` took the session: attach clients other than the one
    /// tagged `keep` end; other viewers ignore it.
    Detached {
        keep: String,
    },
    Tagged {
        tags: Vec<String>,
    },
    Phase {
        phase: String,
    },
    /// The session's state changed (PROTOCOL.md section 15).
    State {
        state: AgentState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        waiting_for: Option<String>,
    },
    Unreachable,
    Reachable,
    /// The session's program did not survive its node's restart (or
    /// crash): its status is `lost`; its history and screen remain.
    Lost,
}

/// A message from the server. Replies carry the request's `id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum ServerMsg {
    /// Sent first, unprompted.
    Welcome {
        proto: u32,
        node: String,
        version: String,
        ping_interval_ms: u64,
        auth_required: bool,
    },
    Ok {
        id: u64,
    },
    Error {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
        code: ErrorCode,
        message: String,
    },
    Sessions {
        id: u64,
        sessions: Vec<SessionInfo>,
        /// A page that is not the last: the `after` of the next one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next: Option<String>,
    },
    Created {
        id: u64,
        session: SessionInfo,
    },
    Subscribed {
        id: u64,
        session: String,
        last_seq: u64,
        oldest_seq: u64,
        cols: u16,
        rows: u16,
    },
    /// Stored events, oldest first: objects with `id`, `ts` (unix ms),
    /// `kind` and the kind's fields.
    Events {
        id: u64,
        session: String,
        events: Vec<serde_json::Value>,
    },
    /// Stored output, oldest first; empty when nothing follows `after`.
    StoredOutput {
        id: u64,
        session: String,
        frames: Vec<StoredFrame>,
    },
    /// One frame of output; hot path, see `codec::encode_output`.
    Output {
        session: String,
        seq: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// The screen at `seq`; `id` only when it answers a `screen` request.
    Snapshot {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
        session: String,
        seq: u64,
        cols: u16,
        rows: u16,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    ResyncRequired {
        session: String,
        last_seq: u64,
    },
    History {
        id: u64,
        session: String,
        seq: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lines: Option<Vec<String>>,
        #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_bytes")]
        data: Option<Vec<u8>>,
        /// A page: the seq its lines begin at (ask again with
        /// `before_seq` = this for the page before it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        first_seq: Option<u64>,
        /// A page: older retained output exists.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        more: Option<bool>,
    },
    Event {
        session: String,
        #[serde(flatten)]
        event: EventKind,
    },
    SessionChanged {
        session: SessionInfo,
    },
    SessionRemoved {
        session: String,
    },
    Pong {
        #[serde(default)]
        nonce: Option<rmpv::Value>,
    },
    /// The answer to `wait`: the state reached (or `exited`) and the
    /// session's seq then.
    State {
        id: u64,
        session: String,
        state: String,
        seq: u64,
    },
    /// Hits of one node's sessions (`done` once that node has finished).
    GrepHits {
        id: u64,
        node: String,
        hits: Vec<GrepHit>,
        /// Output bytes searched.
        scanned_bytes: u64,
        /// Stopped at `max_hits` or the time limit.
        truncated: bool,
    },
    /// Every node has answered (or failed: `errors`).
    GrepDone {
        id: u64,
        hits: u64,
        scanned_bytes: u64,
        truncated: bool,
        errors: Vec<String>,
    },
    /// The answer to `read`: plain text, ending at `seq` (the next
    /// `since_seq`).
    Text {
        id: u64,
        session: String,
        seq: u64,
        text: String,
    },
}

mod opt_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(bytes) => s.serialize_bytes(bytes),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Ok(Option::<serde_bytes::ByteBuf>::deserialize(d)?.map(|b| b.into_vec()))
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    /// Every declared name is the variant's wire name: serde knows it (a
    /// map with only `t` fails for missing fields, never for the name).
    #[test]
    fn each_kind_is_named_as_on_the_wire() {
        for kind in RequestKind::ALL {
            let map = rmpv::Value::Map(vec![("t".into(), kind.name().into())]);
            if let Err(e) = rmpv::ext::from_value::<ClientMsg>(map) {
                assert!(!e.to_string().contains("unknown variant"), "{kind:?}: {e}");
            }
        }
        let ping = ClientMsg::Ping { nonce: None };
        assert_eq!(ping.kind(), "ping");
        assert_eq!(CLIENT_TYPES.len(), RequestKind::ALL.len());
    }
}
