//! Encoding and decoding of client-protocol frames (MessagePack maps).
//!
//! Decoding sorts failures into the protocol's codes: not one MessagePack
//! map with a string `t` is `bad_frame`, an unknown `t` is `unknown_type`,
//! a known type with missing or ill-typed fields is `bad_request`. The
//! request `id` and `session` are recovered for the error reply when present.

use rmpv::Value;

use crate::client::{ClientMsg, ErrorCode, ServerMsg, CLIENT_TYPES};

/// Largest inbound WebSocket message; bigger ones close with 1009.
pub const MAX_INBOUND_FRAME: usize = 1 << 20;
/// Nesting allowed in an inbound value (no message needs more than 3).
const MAX_DEPTH: usize = 32;

/// Why an inbound frame was refused, with what the error reply needs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct DecodeError {
    pub code: ErrorCode,
    pub message: String,
    pub id: Option<u64>,
    pub session: Option<String>,
}

impl DecodeError {
    fn frame(message: impl Into<String>) -> Self {
        DecodeError {
            code: ErrorCode::BadFrame,
            message: message.into(),
            id: None,
            session: None,
        }
    }
}

/// Decodes one client frame.
pub fn decode_client(bytes: &[u8]) -> Result<ClientMsg, DecodeError> {
    let mut reader = bytes;
    let value = rmpv::decode::read_value_with_max_depth(&mut reader, MAX_DEPTH)
        .map_err(|e| DecodeError::frame(format!("not a MessagePack value: {e}")))?;
    if !reader.is_empty() {
        return Err(DecodeError::frame(
            "trailing bytes after the MessagePack value",
        ));
    }
    let Value::Map(entries) = &value else {
        return Err(DecodeError::frame("the frame is not a MessagePack map"));
    };
    let field = |name: &str| {
        entries
            .iter()
            .find(|(k, _)| k.as_str() == Some(name))
            .map(|(_, v)| v)
    };
    let kind = field("t")
        .and_then(Value::as_str)
        .ok_or_else(|| DecodeError::frame("the map has no string `t`"))?
        .to_string();
    let id = field("id").and_then(Value::as_u64);
    let session = field("session").and_then(Value::as_str).map(str::to_string);
    if !CLIENT_TYPES.contains(&kind.as_str()) {
        return Err(DecodeError {
            code: ErrorCode::UnknownType,
            message: format!("unknown message type `{}`", truncate(&kind, 64)),
            id,
            session,
        });
    }
    rmpv::ext::from_value::<ClientMsg>(value).map_err(|e| DecodeError {
        code: ErrorCode::BadRequest,
        message: format!("bad `{kind}`: {e}"),
        id,
        session,
    })
}

/// Encodes a server message (a map with string keys).
pub fn encode_server(msg: &ServerMsg) -> Vec<u8> {
    rmp_serde::to_vec_named(msg).expect("server messages always encode: maps of plain types")
}

/// Encodes `output{session, seq, data}` without building a `ServerMsg`:
/// the output path runs this once per frame per subscriber. The bytes are
/// identical to `encode_server(&ServerMsg::Output{..})` (tested).
pub fn encode_output(session: &str, seq: u64, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + session.len() + 40);
    // Output frames are at most 64 KiB (a PTY read's buffer).
    write_output_head(&mut out, session, seq, data.len() as u32);
    out.extend_from_slice(data);
    out
}

/// Writes `output{session, seq, data}`'s map up to `data`'s bytes, whose
/// `bin` header comes last: the map rmp-serde writes for the client's
/// `output` and for the mesh's (`peer::data_frames`), which carry the bytes
/// after it.
pub fn write_output_head(out: &mut Vec<u8>, session: &str, seq: u64, len: u32) {
    // Writes into a Vec cannot fail.
    let _ = rmp::encode::write_map_len(out, 4);
    let _ = rmp::encode::write_str(out, "t");
    let _ = rmp::encode::write_str(out, "output");
    let _ = rmp::encode::write_str(out, "session");
    let _ = rmp::encode::write_str(out, session);
    let _ = rmp::encode::write_str(out, "seq");
    let _ = rmp::encode::write_uint(out, seq);
    let _ = rmp::encode::write_str(out, "data");
    let _ = rmp::encode::write_bin_len(out, len);
}

fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::*;
    use proptest::prelude::*;

    fn enc<T: serde::Serialize>(v: &T) -> Vec<u8> {
        rmp_serde::to_vec_named(v).unwrap()
    }

    #[test]
    fn ack_decodes_from_exact_bytes() {
        // {"t":"ack","session":"s1","seq":7}
        let bytes = [
            0x83, 0xa1, b't', 0xa3, b'a', b'c', b'k', 0xa7, b's', b'e', b's', b's', b'i', b'o',
            b'n', 0xa2, b's', b'1', 0xa3, b's', b'e', b'q', 0x07,
        ];
        assert_eq!(
            decode_client(&bytes).unwrap(),
            ClientMsg::Ack {
                session: "s1".into(),
                seq: 7
            }
        );
    }

    #[test]
    fn output_encodes_to_exact_bytes() {
        let bytes = encode_output("s", 1, b"hi");
        let expected = [
            0x84, 0xa1, b't', 0xa6, b'o', b'u', b't', b'p', b'u', b't', 0xa7, b's', b'e', b's',
            b's', b'i', b'o', b'n', 0xa1, b's', 0xa3, b's', b'e', b'q', 0x01, 0xa4, b'd', b'a',
            b't', b'a', 0xc4, 0x02, b'h', b'i',
        ];
        assert_eq!(bytes, expected);
    }

    proptest! {
        #[test]
        fn fast_output_matches_serde(session in "[a-z0-9-]{0,40}", seq in any::<u64>(), data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let slow = encode_server(&ServerMsg::Output { session: session.clone(), seq, data: data.clone() });
            prop_assert_eq!(encode_output(&session, seq, &data), slow.clone());
            let back: ServerMsg = rmp_serde::from_slice(&slow).unwrap();
            prop_assert_eq!(back, ServerMsg::Output { session, seq, data });
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_client(&bytes);
        }
    }

    #[test]
    fn every_client_message_round_trips() {
        let msgs = vec![
            ClientMsg::Auth {
                id: 1,
                token: "x".into(),
            },
            ClientMsg::list(2),
            ClientMsg::Watch { id: 3 },
            ClientMsg::Create {
                id: 4,
                req: CreateRequest {
                    command: Some(vec!["sh".into()]),
                    cols: Some(80),
                    name: Some("n".into()),
                    ..Default::default()
                },
            },
            ClientMsg::Subscribe {
                id: 5,
                session: "s".into(),
                from_seq: Some(0),
                window: None,
                scrollback: Some(10),
            },
            ClientMsg::Unsubscribe {
                session: "s".into(),
            },
            ClientMsg::Input {
                session: "s".into(),
                data: vec![0, 255],
            },
            ClientMsg::Resize {
                session: "s".into(),
                cols: 80,
                rows: 24,
            },
            ClientMsg::Screen {
                id: 6,
                session: "s".into(),
                scrollback: None,
            },
            ClientMsg::History {
                id: 7,
                session: "s".into(),
                limit: Some(10),
                before_seq: None,
                rows: None,
            },
            ClientMsg::History {
                id: 7,
                session: "s".into(),
                limit: None,
                before_seq: Some(900),
                rows: Some(1000),
            },
            ClientMsg::Kill {
                id: 8,
                session: "s".into(),
                signal: Some("KILL".into()),
            },
            ClientMsg::Rename {
                id: 9,
                session: "s".into(),
                name: "m".into(),
            },
            ClientMsg::Detach {
                id: 9,
                session: "s".into(),
                keep: "tag".into(),
            },
            ClientMsg::Tag {
                id: 10,
                session: "s".into(),
                tags: vec!["a".into()],
            },
            ClientMsg::Remove {
                id: 11,
                session: "s".into(),
                purge: Some(true),
            },
            ClientMsg::Events {
                id: 12,
                session: "s".into(),
                after: Some(3),
                limit: None,
            },
            ClientMsg::ReadOutput {
                id: 13,
                session: "s".into(),
                after: None,
                max_bytes: Some(4096),
            },
            ClientMsg::Revive {
                id: 14,
                session: "s".into(),
            },
            ClientMsg::Ping {
                nonce: Some(rmpv::Value::from(42)),
            },
        ];
        for msg in msgs {
            assert_eq!(decode_client(&enc(&msg)).unwrap(), msg);
        }
    }

    #[test]
    fn unknown_keys_and_nil_optionals_are_accepted() {
        let v = Value::Map(vec![
            (Value::from("t"), Value::from("subscribe")),
            (Value::from("id"), Value::from(3)),
            (Value::from("session"), Value::from("s")),
            (Value::from("from_seq"), Value::Nil),
            (Value::from("zzz"), Value::from(true)),
        ]);
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &v).unwrap();
        assert_eq!(
            decode_client(&bytes).unwrap(),
            ClientMsg::Subscribe {
                id: 3,
                session: "s".into(),
                from_seq: None,
                window: None,
                scrollback: None
            }
        );
    }

    #[test]
    fn errors_are_classified() {
        assert_eq!(
            decode_client(b"\xc1").unwrap_err().code,
            ErrorCode::BadFrame
        );
        assert_eq!(
            decode_client(&enc(&vec![1, 2])).unwrap_err().code,
            ErrorCode::BadFrame
        );
        let mut no_t = std::collections::BTreeMap::new();
        no_t.insert("id", 1);
        assert_eq!(
            decode_client(&enc(&no_t)).unwrap_err().code,
            ErrorCode::BadFrame
        );

        let unknown = Value::Map(vec![
            (Value::from("t"), Value::from("fly")),
            (Value::from("id"), Value::from(9)),
        ]);
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &unknown).unwrap();
        let e = decode_client(&bytes).unwrap_err();
        assert_eq!((e.code, e.id), (ErrorCode::UnknownType, Some(9)));

        let missing = Value::Map(vec![
            (Value::from("t"), Value::from("subscribe")),
            (Value::from("id"), Value::from(4)),
        ]);
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &missing).unwrap();
        let e = decode_client(&bytes).unwrap_err();
        assert_eq!((e.code, e.id), (ErrorCode::BadRequest, Some(4)));

        let ill_typed = Value::Map(vec![
            (Value::from("t"), Value::from("ack")),
            (Value::from("session"), Value::from("s")),
            (Value::from("seq"), Value::from("seven")),
        ]);
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &ill_typed).unwrap();
        let e = decode_client(&bytes).unwrap_err();
        assert_eq!(
            (e.code, e.session.as_deref()),
            (ErrorCode::BadRequest, Some("s"))
        );
    }

    #[test]
    fn deep_nesting_is_a_bad_frame_not_a_crash() {
        let mut bytes = vec![0x91; 100_000];
        bytes.push(0xc0);
        assert_eq!(decode_client(&bytes).unwrap_err().code, ErrorCode::BadFrame);
    }

    #[test]
    fn server_messages_round_trip() {
        let msgs = vec![
            ServerMsg::Error {
                id: Some(1),
                session: None,
                code: ErrorCode::NotFound,
                message: "m".into(),
            },
            ServerMsg::Snapshot {
                id: None,
                session: "s".into(),
                seq: 3,
                cols: 80,
                rows: 24,
                data: b"x".to_vec(),
            },
            ServerMsg::History {
                id: 2,
                session: "s".into(),
                seq: 3,
                lines: None,
                data: Some(vec![1, 2]),
                first_seq: None,
                more: None,
            },
            ServerMsg::History {
                id: 2,
                session: "s".into(),
                seq: 899,
                lines: Some(vec!["a".into()]),
                data: None,
                first_seq: Some(850),
                more: Some(true),
            },
            ServerMsg::Event {
                session: "s".into(),
                event: EventKind::Exited {
                    exit_code: 143,
                    signal: Some("TERM".into()),
                },
            },
            ServerMsg::Pong { nonce: None },
            ServerMsg::Events {
                id: 4,
                session: "s".into(),
                events: vec![serde_json::json!({
                    "id": 7, "ts": 1, "kind": "hook", "payload": {"a": [1, "x", null]}
                })],
            },
            ServerMsg::StoredOutput {
                id: 5,
                session: "s".into(),
                frames: vec![crate::StoredFrame {
                    seq: 9,
                    ts: 2,
                    data: vec![0, 255],
                }],
            },
        ];
        for msg in msgs {
            let back: ServerMsg = rmp_serde::from_slice(&encode_server(&msg)).unwrap();
            assert_eq!(back, msg);
        }
        let ev = encode_server(&ServerMsg::Event {
            session: "s".into(),
            event: EventKind::Resized { cols: 1, rows: 2 },
        });
        let v = rmpv::decode::read_value(&mut &ev[..]).unwrap();
        let keys: Vec<_> = v
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap().to_string())
            .collect();
        assert_eq!(keys, ["t", "session", "kind", "cols", "rows"]);
    }
}
