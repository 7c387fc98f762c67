//! Reassembly of fragmented WebSocket messages (a first frame, then
//! continuation frames), bounded by the inbound message limit. Pure logic,
//! shared by the protocol and raw endpoints.

use actix_http::ws::Item;
use bytes::{Bytes, BytesMut};

/// What one fragment completed.
#[derive(Debug, PartialEq, Eq)]
pub enum Assembled {
    /// More fragments to come.
    Pending,
    /// A whole message.
    Message { binary: bool, data: Bytes },
    /// The message grew past the limit: close with 1009.
    TooBig,
    /// A continuation without a first frame.
    Orphan,
}

#[derive(Debug)]
pub struct Reassembler {
    limit: usize,
    /// The message being assembled: binary or text, and its bytes so far
    /// (never more than `limit`).
    partial: Option<(bool, BytesMut)>,
}

impl Reassembler {
    pub fn new(limit: usize) -> Self {
        Reassembler {
            limit,
            partial: None,
        }
    }

    pub fn push(&mut self, item: Item) -> Assembled {
        let (first, chunk, last) = match item {
            Item::FirstText(b) => (Some(false), b, false),
            Item::FirstBinary(b) => (Some(true), b, false),
            Item::Continue(b) => (None, b, false),
            Item::Last(b) => (None, b, true),
        };
        if let Some(binary) = first {
            self.partial = Some((binary, BytesMut::new()));
        }
        let Some((_, buf)) = self.partial.as_mut() else {
            return Assembled::Orphan;
        };
        if buf.len() + chunk.len() > self.limit {
            self.partial = None;
            return Assembled::TooBig;
        }
        buf.extend_from_slice(&chunk);
        if !last {
            return Assembled::Pending;
        }
        match self.partial.take() {
            Some((binary, buf)) => Assembled::Message {
                binary,
                data: buf.freeze(),
            },
            None => Assembled::Orphan,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    #[test]
    fn fragments_join_into_one_message() {
        let mut r = Reassembler::new(100);
        assert_eq!(r.push(Item::FirstBinary(b("ab"))), Assembled::Pending);
        assert_eq!(r.push(Item::Continue(b("cd"))), Assembled::Pending);
        assert_eq!(
            r.push(Item::Last(b("e"))),
            Assembled::Message {
                binary: true,
                data: b("abcde")
            }
        );
        assert_eq!(r.push(Item::Last(b("x"))), Assembled::Orphan);
        assert_eq!(r.push(Item::FirstText(b("t"))), Assembled::Pending);
        assert_eq!(
            r.push(Item::Last(b("u"))),
            Assembled::Message {
                binary: false,
                data: b("tu")
            }
        );
    }

    #[test]
    fn the_limit_holds_across_fragments() {
        let mut r = Reassembler::new(4);
        assert_eq!(r.push(Item::FirstBinary(b("abc"))), Assembled::Pending);
        assert_eq!(r.push(Item::Continue(b("de"))), Assembled::TooBig);
        assert_eq!(r.push(Item::Continue(b("f"))), Assembled::Orphan);
    }
}
