//! The data streams' frames as `Bytes`, on the same wire as `frame`: an
//! output frame's bytes are not copied into its encoding at the sender
//! (its head is encoded alone and the output rides beside it as its own
//! chunk) nor out of the frame at the receiver (the output is a slice of
//! the frame's bytes), and the receiver takes whatever chunks QUIC holds
//! at once, so a flood's frames cost one copy each through the link
//! instead of five (docs/benchmarks.md, issue 32, twenty-third stop).

use std::collections::VecDeque;

use bytes::{Buf, Bytes, BytesMut};

use super::frame::{self, FrameError, MAX_FRAME};
use super::DataMsg;

/// Chunks a data stream's reader takes from QUIC at once.
const READ_CHUNKS: usize = 32;

/// Appends `msg`'s frame to `out`: for output, its head and its bytes as
/// two chunks (the bytes shared, not copied); anything else encoded
/// whole.
pub fn encode(msg: &DataMsg, out: &mut Vec<Bytes>) -> Result<(), FrameError> {
    match msg {
        DataMsg::Output { session, seq, data } => {
            out.push(output_head(session, *seq, data.len())?);
            if !data.is_empty() {
                out.push(data.clone());
            }
        }
        other => out.push(frame::encode(other)?.into()),
    }
    Ok(())
}

/// An output frame up to its bytes: the length, then the map of
/// `codec::write_output_head` (what rmp-serde writes for
/// `DataMsg::Output`: `t`, `session`, `seq`, then `data`'s `bin` header).
fn output_head(session: &str, seq: u64, len: usize) -> Result<Bytes, FrameError> {
    let bin = u32::try_from(len).map_err(|_| FrameError::TooLarge(len))?;
    let mut head = Vec::with_capacity(48 + session.len());
    head.extend_from_slice(&[0; 4]);
    crate::codec::write_output_head(&mut head, session, seq, bin);
    let body = head.len() - 4 + len;
    if body > MAX_FRAME {
        return Err(FrameError::TooLarge(body));
    }
    head[..4].copy_from_slice(&(body as u32).to_be_bytes());
    Ok(head.into())
}

/// Decodes one frame's body: output in the shape `output_head` writes is
/// read in place (its bytes a slice of `body`); anything else, or output
/// in another shape, by rmp-serde.
pub fn decode(body: Bytes) -> Result<DataMsg, FrameError> {
    match output_in_place(&body) {
        Some((session, seq, at)) => Ok(DataMsg::Output {
            session,
            seq,
            data: body.slice(at..),
        }),
        None => frame::decode(&body),
    }
}

/// `session`, `seq` and where the bytes start, for an output frame whose
/// fields come in `output_head`'s order and whose bytes end the frame.
fn output_in_place(body: &[u8]) -> Option<(String, u64, usize)> {
    use rmp::decode::{read_bin_len, read_int, read_map_len, read_str_from_slice};
    let mut rest = body;
    if read_map_len(&mut rest).ok()? != 4 {
        return None;
    }
    let key = |rest: &mut &[u8], want: &str| -> Option<()> {
        let (got, after) = read_str_from_slice(*rest).ok()?;
        *rest = after;
        (got == want).then_some(())
    };
    key(&mut rest, "t")?;
    key(&mut rest, "output")?;
    key(&mut rest, "session")?;
    let (session, after) = read_str_from_slice(rest).ok()?;
    rest = after;
    key(&mut rest, "seq")?;
    let seq: u64 = read_int(&mut rest).ok()?;
    key(&mut rest, "data")?;
    let len = read_bin_len(&mut rest).ok()? as usize;
    (rest.len() == len).then(|| (session.to_string(), seq, body.len() - len))
}

/// A data stream's frames, cut from the chunks QUIC hands over: each
/// frame's bytes are copied once, into an allocation of the frame's size
/// (a slice of QUIC's own buffers would keep a whole datagram batch alive
/// for as long as the frame stays in a ring).
#[derive(Default)]
pub struct Frames {
    chunks: VecDeque<Bytes>,
    held: usize,
}

impl Frames {
    /// The next frame's body, `None` when the stream ended between frames.
    pub async fn next(
        &mut self,
        recv: &mut quinn::RecvStream,
    ) -> Result<Option<Bytes>, FrameError> {
        loop {
            if let Some(body) = self.take()? {
                return Ok(Some(body));
            }
            let mut chunks: [Bytes; READ_CHUNKS] = Default::default();
            match recv.read_chunks(&mut chunks).await {
                Ok(Some(n)) => chunks.into_iter().take(n).for_each(|c| self.push(c)),
                Ok(None) if self.held == 0 => return Ok(None),
                Ok(None) => return Err(FrameError::Truncated),
                Err(e) => return Err(FrameError::Io(e.into())),
            }
        }
    }

    pub(crate) fn push(&mut self, chunk: Bytes) {
        self.held += chunk.len();
        self.chunks.push_back(chunk);
    }

    /// A whole frame's body, if the chunks hold one; a length over the
    /// bound is an error before its bytes are waited for.
    pub(crate) fn take(&mut self) -> Result<Option<Bytes>, FrameError> {
        if self.held < 4 {
            return Ok(None);
        }
        let mut len = [0u8; 4];
        let mut at = 0;
        for chunk in &self.chunks {
            let n = (4 - at).min(chunk.len());
            len[at..at + n].copy_from_slice(&chunk[..n]);
            at += n;
            if at == 4 {
                break;
            }
        }
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge(len));
        }
        if self.held < 4 + len {
            return Ok(None);
        }
        self.skip(4);
        let mut body = BytesMut::with_capacity(len);
        while body.len() < len {
            let front = self.chunks.front_mut().expect("held counts the chunks");
            let n = (len - body.len()).min(front.len());
            body.extend_from_slice(&front[..n]);
            self.skip(n);
        }
        Ok(Some(body.freeze()))
    }

    /// Drops `n` bytes from the front of the chunks.
    fn skip(&mut self, mut n: usize) {
        self.held -= n;
        while n > 0 {
            let front = self.chunks.front_mut().expect("held counts the chunks");
            if front.len() > n {
                front.advance(n);
                return;
            }
            n -= front.len();
            self.chunks.pop_front();
        }
        while self.chunks.front().is_some_and(|c| c.is_empty()) {
            self.chunks.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventKind;
    use proptest::prelude::*;

    fn whole(msg: &DataMsg) -> Vec<u8> {
        let mut chunks = Vec::new();
        encode(msg, &mut chunks).unwrap();
        chunks.concat()
    }

    fn output(session: &str, seq: u64, data: &[u8]) -> DataMsg {
        DataMsg::Output {
            session: session.into(),
            seq,
            data: Bytes::copy_from_slice(data),
        }
    }

    #[test]
    fn an_output_frame_is_the_bytes_rmp_serde_writes_and_shares_its_output() {
        let data = Bytes::from(vec![7u8; 70_000]);
        for (seq, len) in [
            (0, 0),
            (1, 1),
            (127, 31),
            (128, 32),
            (1 << 20, 255),
            (u64::MAX, 70_000),
        ] {
            let msg = DataMsg::Output {
                session: "s-1é".into(),
                seq,
                data: data.slice(..len),
            };
            assert_eq!(
                whole(&msg),
                frame::encode(&msg).unwrap(),
                "seq {seq}, {len} bytes"
            );
            let mut chunks = Vec::new();
            encode(&msg, &mut chunks).unwrap();
            if len > 0 {
                assert_eq!(
                    chunks[1].as_ptr(),
                    data.as_ptr(),
                    "the output is not copied"
                );
            }
        }
        let event = DataMsg::Event {
            session: "s".into(),
            event: EventKind::Exited {
                exit_code: 1,
                signal: None,
            },
        };
        assert_eq!(whole(&event), frame::encode(&event).unwrap());
    }

    #[test]
    fn output_is_read_in_place_and_anything_else_by_rmp_serde() {
        let msg = output("s", 9, b"hello");
        let body = Bytes::from(whole(&msg)).slice(4..);
        assert_eq!(
            output_in_place(&body).map(|(_, _, at)| at),
            Some(body.len() - 5)
        );
        let got = decode(body.clone()).unwrap();
        assert_eq!(got, msg);
        let DataMsg::Output { data, .. } = got else {
            unreachable!()
        };
        assert_eq!(data.as_ptr(), body[body.len() - 5..].as_ptr(), "not copied");
        // Fields in another order (another encoder) still decode, by
        // rmp-serde.
        let mut other = Vec::new();
        rmp::encode::write_map_len(&mut other, 4).unwrap();
        for (k, v) in [("session", "s"), ("t", "output")] {
            rmp::encode::write_str(&mut other, k).unwrap();
            rmp::encode::write_str(&mut other, v).unwrap();
        }
        rmp::encode::write_str(&mut other, "data").unwrap();
        rmp::encode::write_bin(&mut other, b"hello").unwrap();
        rmp::encode::write_str(&mut other, "seq").unwrap();
        rmp::encode::write_uint(&mut other, 9).unwrap();
        assert_eq!(output_in_place(&other), None);
        assert_eq!(decode(other.into()).unwrap(), msg);
        let closed = DataMsg::Closed {
            session: "s".into(),
            removed: true,
        };
        assert_eq!(
            decode(Bytes::from(whole(&closed)).slice(4..)).unwrap(),
            closed
        );
    }

    #[test]
    fn frames_are_cut_from_chunks_of_any_size_and_bounds_hold() {
        let msgs: Vec<DataMsg> = (0..20)
            .map(|i| output("s", i, &vec![i as u8; i as usize * 997]))
            .collect();
        let wire: Vec<u8> = msgs.iter().flat_map(whole).collect();
        for size in [1, 3, 4, 5, 1000, 6500, wire.len()] {
            let mut frames = Frames::default();
            let mut got = Vec::new();
            for chunk in wire.chunks(size) {
                frames.push(Bytes::copy_from_slice(chunk));
                while let Some(body) = frames.take().unwrap() {
                    got.push(decode(body).unwrap());
                }
            }
            assert_eq!(got, msgs, "chunks of {size}");
            assert_eq!((frames.held, frames.chunks.len()), (0, 0));
        }
        let mut frames = Frames::default();
        frames.push(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff]));
        assert!(matches!(frames.take(), Err(FrameError::TooLarge(_))));
    }

    proptest! {
        /// Arbitrary bytes never panic the reader or the decoder.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = output_in_place(&bytes);
            let _ = decode(Bytes::from(bytes.clone()));
            let mut frames = Frames::default();
            frames.push(Bytes::from(bytes.clone()));
            while let Ok(Some(body)) = frames.take() {
                let _ = decode(body);
            }
        }
    }
}
