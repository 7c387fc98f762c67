//! The peer protocol between the nodes of a cluster (docs/peer-protocol.md):
//! the messages of the control stream and of the data streams, as data
//! only, encoded with rmp-serde as maps keyed by `t`; the framing of a QUIC
//! stream (`frame`); the QUIC endpoint with mutual TLS (`tls`); incoming
//! handshakes, concurrent and bounded (`accept`).

pub mod accept;
pub mod certs;
pub mod data_frames;
pub mod frame;
pub mod link;
pub mod stats;
pub mod tls;

use serde::{Deserialize, Serialize};

use crate::{ClientMsg, EventKind, ServerMsg, SessionInfo};

/// Replies being written at once on one link; more wait their turn (each
/// is bounded by `MAX_REPLY`, so this bounds what the link buffers).
pub(crate) const REPLY_STREAMS: usize = 8;

/// The peer protocol's version, sent in `hello`. A node refuses a peer
/// that speaks another one (the log names both).
pub const PEER_PROTO: u32 = 2;
/// The newest revision of `PEER_PROTO` this node knows, sent as `hello`'s
/// `upto` (a node without it is at revision 2); a link uses what both
/// know. 3: interactive sessions' output on a data stream of its own.
/// 4: `claim_size`.
pub const PEER_PROTO_UPTO: u32 = 4;

/// The budget of forwards a request may take; each forward takes one
/// (`ClusterCtx::forward`). A node answers every forwarded request itself
/// today (it never forwards one again), so the budget is carried on the
/// wire for a relay that would.
pub const HOP_BUDGET: u8 = 4;

/// A frame on the control stream (bidirectional, opened by the dialing
/// node, higher priority than data). Each side sends `Hello` first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum PeerMsg {
    /// First frame each way. `cluster` must equal the receiver's cluster
    /// id, `node` the name in the sender's certificate, `proto`
    /// `PEER_PROTO`. `boot` changes at every start of the sender, so the
    /// receiver can tell a restarted peer from a reconnected one.
    Hello {
        cluster: String,
        node: String,
        proto: u32,
        boot: String,
        /// The newest revision the sender knows (`PEER_PROTO_UPTO`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upto: Option<u32>,
    },
    /// Every session the sender owns, replacing what the receiver held for
    /// it: sent after `hello`, on every link up.
    Directory { sessions: Vec<SessionInfo> },
    /// One of the sender's own sessions was created or changed.
    SessionChanged { session: Box<SessionInfo> },
    /// One of the sender's own sessions was removed.
    SessionRemoved { session: String },
    /// A client's request for a session (or a node) of the receiver, sent
    /// on by the node the client is connected to. `req` names the request
    /// on this link; `hops` is the budget left after this forward; `msg`
    /// is the client's message as it came, its `id` included.
    Request { req: u64, hops: u8, msg: ClientMsg },
    /// The answer to `Request` `req`: the message the owner would have sent
    /// the client (a reply or an `error`, codes intact).
    Reply { req: u64, msg: ServerMsg },
    /// The sender mirrors the receiver's session `session`: deliver its
    /// output on the data stream (starting with `subscribed`), after
    /// `from_seq` when given, else from now; at most `window` bytes of
    /// output unacknowledged. Replaces an earlier subscription of the
    /// same session.
    Subscribe {
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_seq: Option<u64>,
        window: u64,
    },
    /// Cumulative: the mirror absorbed output through `seq`.
    Ack { session: String, seq: u64 },
    /// The mirror of `session` is gone.
    Unsubscribe { session: String },
    /// A client resumed through the sender's mirror: the owner makes the
    /// program repaint (SIGWINCH), as for a resume at the owner.
    Repaint { session: String },
    /// The sender's mirror of `session` stands for its own viewers in the
    /// size policy (revision 4): `size` is the size its most recent sizer
    /// asked for (`apply`: the session takes it now, its holder there
    /// having left), or absent when none of them holds the size any more.
    ClaimSize {
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<(u16, u16)>,
        #[serde(default)]
        apply: bool,
    },
    /// Keepalive and round-trip time: answered at once with `Pong`.
    Ping {
        nonce: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stall_ms: Option<u64>,
    },
    /// The answer to `Ping`, with the answering node's credited host stall
    /// in ms (for `/api/v1/nodes`).
    Pong {
        nonce: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stall_ms: Option<u64>,
    },
}

/// A frame on a data stream (one per direction, opened by its sender):
/// everything of a mirror's subscription, in the order the owner's session
/// produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum DataMsg {
    /// The answer to `Subscribe`, before anything else of it.
    Subscribed {
        session: String,
        last_seq: u64,
        oldest_seq: u64,
        cols: u16,
        rows: u16,
    },
    /// Session output with the owner's seq.
    Output {
        session: String,
        seq: u64,
        data: bytes::Bytes,
    },
    /// The frames the mirror needed left the owner's ring: output
    /// continues after `last_seq`.
    Resync { session: String, last_seq: u64 },
    /// A session event (`exited` comes after the last output).
    Event { session: String, event: EventKind },
    /// The subscription ended: the session was removed (or never existed
    /// here: `removed` too), or the owner is shutting down.
    Closed { session: String, removed: bool },
}

impl DataMsg {
    pub fn session(&self) -> &str {
        match self {
            DataMsg::Subscribed { session, .. }
            | DataMsg::Output { session, .. }
            | DataMsg::Resync { session, .. }
            | DataMsg::Event { session, .. }
            | DataMsg::Closed { session, .. } => session,
        }
    }
}

impl PeerMsg {
    /// The message's `t`, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            PeerMsg::Hello { .. } => "hello",
            PeerMsg::Directory { .. } => "directory",
            PeerMsg::SessionChanged { .. } => "session_changed",
            PeerMsg::SessionRemoved { .. } => "session_removed",
            PeerMsg::Request { .. } => "request",
            PeerMsg::Reply { .. } => "reply",
            PeerMsg::Subscribe { .. } => "subscribe",
            PeerMsg::Ack { .. } => "ack",
            PeerMsg::Unsubscribe { .. } => "unsubscribe",
            PeerMsg::Repaint { .. } => "repaint",
            PeerMsg::ClaimSize { .. } => "claim_size",
            PeerMsg::Ping { .. } => "ping",
            PeerMsg::Pong { .. } => "pong",
        }
    }
}

/// As `hops::pass`, for a request forwarded on the link.
pub fn hop_request(point: &str, msg: &PeerMsg) {
    if let PeerMsg::Request { msg, .. } = msg {
        crate::hops::pass_input(point, msg);
    }
}

/// As `hops::pass`, for output on the link.
pub fn hop_output(point: &str, msg: &DataMsg) {
    if let DataMsg::Output { data, .. } = msg {
        crate::hops::pass(point, data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn hello_and_ping_are_the_exact_bytes() {
        let hello = PeerMsg::Hello {
            cluster: "c".into(),
            node: "a".into(),
            proto: 1,
            boot: "b".into(),
            upto: None,
        };
        // fixmap(5): "t":"hello", "cluster":"c", "node":"a", "proto":1, "boot":"b"
        assert_eq!(
            hex(&rmp_serde::to_vec_named(&hello).unwrap()),
            "85a174a568656c6c6fa7636c7573746572a163a46e6f6465a161a570726f746f01a4626f6f74a162"
        );
        // A node of revision 2 reads a newer hello (its `upto` is a field
        // it skips), and a newer node reads an old one as `upto: None`.
        let newer = PeerMsg::Hello {
            cluster: "c".into(),
            node: "a".into(),
            proto: PEER_PROTO,
            boot: "b".into(),
            upto: Some(PEER_PROTO_UPTO),
        };
        let bytes = rmp_serde::to_vec_named(&newer).unwrap();
        assert_eq!(rmp_serde::from_slice::<PeerMsg>(&bytes).unwrap(), newer);
        #[derive(Deserialize)]
        #[serde(tag = "t", rename_all = "snake_case")]
        enum Revision2 {
            Hello { proto: u32 },
        }
        let Revision2::Hello { proto } = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(proto, PEER_PROTO);
        let old = rmp_serde::to_vec_named(&hello).unwrap();
        assert!(matches!(
            rmp_serde::from_slice::<PeerMsg>(&old).unwrap(),
            PeerMsg::Hello { upto: None, .. }
        ));
        let ping = PeerMsg::Ping {
            nonce: 300,
            stall_ms: None,
        };
        assert_eq!(
            hex(&rmp_serde::to_vec_named(&ping).unwrap()),
            "82a174a470696e67a56e6f6e6365cd012c"
        );
        let out = DataMsg::Output {
            session: "s".into(),
            seq: 2,
            data: bytes::Bytes::from_static(b"hi"),
        };
        // data is MessagePack bin (c4), not an array of numbers.
        assert_eq!(
            hex(&rmp_serde::to_vec_named(&out).unwrap()),
            "84a174a66f7574707574a773657373696f6ea173a373657102a464617461c4026869"
        );
    }

    #[test]
    fn mirror_messages_are_the_exact_bytes() {
        let sub = PeerMsg::Subscribe {
            session: "s".into(),
            from_seq: Some(5),
            window: 1024,
        };
        // fixmap(4): "t":"subscribe", "session":"s", "from_seq":5, "window":1024
        assert_eq!(
            hex(&rmp_serde::to_vec_named(&sub).unwrap()),
            "84a174a9737562736372696265a773657373696f6ea173a866726f6d5f73657105a677696e646f77cd0400"
        );
        let ev = DataMsg::Event {
            session: "s".into(),
            event: EventKind::Exited {
                exit_code: 2,
                signal: None,
            },
        };
        // "event" is a map tagged by "kind", as clients see it.
        assert_eq!(
            hex(&rmp_serde::to_vec_named(&ev).unwrap()),
            "83a174a56576656e74a773657373696f6ea173a56576656e7482a46b696e64a6657869746564a9657869745f636f646502"
        );
        for msg in [
            DataMsg::Resync {
                session: "s".into(),
                last_seq: 9,
            },
            DataMsg::Closed {
                session: "s".into(),
                removed: true,
            },
        ] {
            let bytes = rmp_serde::to_vec_named(&msg).unwrap();
            assert_eq!(rmp_serde::from_slice::<DataMsg>(&bytes).unwrap(), msg);
        }
    }

    #[test]
    fn forwarded_requests_round_trip() {
        let msg = PeerMsg::Request {
            req: 7,
            hops: HOP_BUDGET - 1,
            msg: ClientMsg::Kill {
                id: 3,
                session: "abc".into(),
                signal: Some("TERM".into()),
            },
        };
        let bytes = rmp_serde::to_vec_named(&msg).unwrap();
        assert_eq!(rmp_serde::from_slice::<PeerMsg>(&bytes).unwrap(), msg);
        let reply = PeerMsg::Reply {
            req: 7,
            msg: ServerMsg::Error {
                id: Some(3),
                session: Some("abc".into()),
                code: crate::ErrorCode::NotFound,
                message: "no session".into(),
            },
        };
        let bytes = rmp_serde::to_vec_named(&reply).unwrap();
        assert_eq!(rmp_serde::from_slice::<PeerMsg>(&bytes).unwrap(), reply);
    }
}
