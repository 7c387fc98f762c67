//! The data streams' frames as `Bytes`, on `frame`'s wire: an output
//! frame written as its head and the ring's bytes (shared, not copied),
//! queued frames in one write; frames cut from the chunks QUIC holds, each
//! into an allocation of its size; output read in place, a slice of its
//! frame. So termesh copies a flood's bytes once through the link, at the
//! receiver (docs/benchmarks.md, issue 32, twenty-third stop).

use std::collections::VecDeque;

use bytes::{Buf, Bytes, BytesMut};

use super::frame::{self, FrameError, MAX_FRAME};
use super::DataMsg;

/// Chunks a data stream's reader takes from QUIC at once: enough for a
/// few of a flood's frames (a chunk is at most a datagram, 6,500 bytes),
/// and what a reader holds past one frame stays this many datagrams.
const READ_CHUNKS: usize = 32;

/// Output up to this size is copied into its head, one chunk: for an
/// echo's few bytes a second chunk costs quinn more than the copy.
const INLINE: usize = 1024;

/// Appends `msg`'s frame to `out`: for output over `INLINE` bytes, its
/// head and its bytes as two chunks (the bytes shared, not copied);
/// anything else in one.
pub fn encode(msg: &DataMsg, out: &mut Vec<Bytes>) -> Result<(), FrameError> {
    match msg {
        DataMsg::Output { session, seq, data } => {
            let mut head = output_head(session, *seq, data.len())?;
            if data.len() <= INLINE {
                head.extend_from_slice(data);
                out.push(head.into());
            } else {
                out.push(head.into());
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
fn output_head(session: &str, seq: u64, len: usize) -> Result<Vec<u8>, FrameError> {
    let bin = u32::try_from(len).map_err(|_| FrameError::TooLarge(len))?;
    // The map's fixed part is at most 50 bytes (str32 and bin32 headers, a
    // u64 seq).
    let mut head = Vec::with_capacity(64 + session.len() + len.min(INLINE));
    head.extend_from_slice(&[0; 4]);
    crate::codec::write_output_head(&mut head, session, seq, bin);
    let body = head.len() - 4 + len;
    if body > MAX_FRAME {
        return Err(FrameError::TooLarge(body));
    }
    head[..4].copy_from_slice(&(body as u32).to_be_bytes());
    Ok(head)
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
    /// What QUIC handed over and no frame took yet, in stream order; none
    /// empty.
    chunks: VecDeque<Bytes>,
    /// The sum of `chunks`' lengths.
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
        if chunk.is_empty() {
            return;
        }
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
        let long = "s".repeat(40);
        for (session, seq, len) in [
            ("s-1é", 0, 0),
            ("s-1é", 1, 1),
            ("s", 127, 31),
            ("s", 128, 32),
            (&long, 300, 255),
            (&long, 70_000, INLINE),
            ("s", 1 << 20, INLINE + 1),
            ("s", u64::MAX, 70_000),
        ] {
            let msg = DataMsg::Output {
                session: session.into(),
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
            if len > INLINE {
                assert_eq!(chunks.len(), 2);
                assert_eq!(
                    chunks[1].as_ptr(),
                    data.as_ptr(),
                    "the output is not copied"
                );
            } else {
                assert_eq!(chunks.len(), 1, "{len} bytes ride in the head");
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
                    assert!(output_in_place(&body).is_some(), "read in place");
                    got.push(decode(body).unwrap());
                }
            }
            assert_eq!(got, msgs, "chunks of {size}");
            assert_eq!((frames.held, frames.chunks.len()), (0, 0));
        }
        // A frame of the bound waits for its bytes; one byte more is
        // refused at once.
        let mut frames = Frames::default();
        frames.push(Bytes::copy_from_slice(&(MAX_FRAME as u32).to_be_bytes()));
        assert!(matches!(frames.take(), Ok(None)));
        let mut frames = Frames::default();
        frames.push(Bytes::copy_from_slice(
            &(MAX_FRAME as u32 + 1).to_be_bytes(),
        ));
        assert!(matches!(frames.take(), Err(FrameError::TooLarge(_))));
    }

    proptest! {
        /// Any output, its frame cut at any points (empty chunks too),
        /// comes out whole, read in place, as rmp-serde reads it.
        #[test]
        fn any_output_cut_anywhere_comes_out_whole(
            frames_in in proptest::collection::vec(
                ("[a-z0-9é-]{0,40}", any::<u64>(), proptest::collection::vec(any::<u8>(), 0..3000)),
                1..6,
            ),
            cuts in proptest::collection::vec(0usize..4000, 0..12),
        ) {
            let msgs: Vec<DataMsg> = frames_in
                .iter()
                .map(|(session, seq, data)| output(session, *seq, data))
                .collect();
            let wire: Vec<u8> = msgs.iter().flat_map(whole).collect();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(wire.len())).collect();
            cuts.sort();
            let mut frames = Frames::default();
            let mut got = Vec::new();
            let mut from = 0;
            for to in cuts.into_iter().chain([wire.len()]) {
                frames.push(Bytes::copy_from_slice(&wire[from..to]));
                from = to;
                while let Some(body) = frames.take().unwrap() {
                    prop_assert!(output_in_place(&body).is_some());
                    prop_assert_eq!(&decode(body.clone()).unwrap(), &frame::decode::<DataMsg>(&body).unwrap());
                    got.push(decode(body).unwrap());
                }
            }
            prop_assert_eq!(got, msgs);
            prop_assert_eq!((frames.held, frames.chunks.len()), (0, 0));
        }

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
