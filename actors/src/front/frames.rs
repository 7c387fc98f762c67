//! A client's incoming WebSocket frames, decoded before more is read: the
//! node holds at most one frame in progress (bounded by the frame limit)
//! and one chunk of the socket, whatever the client sends. actix's own
//! frame stream reads everything the socket has before it decodes one
//! frame, and its parser checks a frame's length against the limit only
//! once the whole frame has arrived, so a client sending faster than its
//! frames are handled, or announcing a frame of gigabytes, made the node
//! buffer all of it. Here a frame over the limit is refused from its
//! header.

use std::pin::Pin;
use std::task::{Context, Poll};

use actix_http::ws::{Codec, Frame, Message, ProtocolError};
use bytes::{Bytes, BytesMut};
use bytestring::ByteString;
use futures_util::Stream;
use tokio_util::codec::Decoder;

/// A connection's decoded incoming messages.
pub type Incoming = Pin<Box<dyn Stream<Item = Result<Message, ProtocolError>>>>;

/// `payload` (the upgraded request's body) decoded into messages, frames
/// over `max_size` bytes refused (`ProtocolError::Overflow`).
pub fn incoming<S, E>(payload: S, max_size: usize) -> Incoming
where
    S: Stream<Item = Result<Bytes, E>> + Unpin + 'static,
    E: std::fmt::Display,
{
    Box::pin(Frames {
        payload,
        buf: BytesMut::new(),
        codec: Codec::new().max_size(max_size),
        max_size,
        ended: false,
    })
}

struct Frames<S> {
    payload: S,
    buf: BytesMut,
    codec: Codec,
    max_size: usize,
    ended: bool,
}

/// The payload length the frame at the start of `buf` announces, once its
/// header's length bytes have arrived (RFC 6455 section 5.2).
fn announced(buf: &[u8]) -> Option<u64> {
    let short = u64::from(*buf.get(1)? & 0x7f);
    match short {
        126 => Some(u64::from(u16::from_be_bytes(
            buf.get(2..4)?.try_into().ok()?,
        ))),
        127 => Some(u64::from_be_bytes(buf.get(2..10)?.try_into().ok()?)),
        n => Some(n),
    }
}

impl<S, E> Stream for Frames<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    type Item = Result<Message, ProtocolError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if announced(&this.buf).is_some_and(|len| len > this.max_size as u64) {
                return Poll::Ready(Some(Err(ProtocolError::Overflow)));
            }
            // Decode first: read more only when no whole frame is buffered.
            match this.codec.decode(&mut this.buf) {
                Err(e) => return Poll::Ready(Some(Err(e))),
                Ok(Some(frame)) => return Poll::Ready(Some(message(frame))),
                Ok(None) if this.ended => return Poll::Ready(None),
                Ok(None) => {}
            }
            match Pin::new(&mut this.payload).poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => this.buf.extend_from_slice(&chunk),
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Some(Err(ProtocolError::Io(std::io::Error::other(
                        e.to_string(),
                    )))))
                }
                Poll::Ready(None) => this.ended = true,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

fn message(frame: Frame) -> Result<Message, ProtocolError> {
    Ok(match frame {
        Frame::Text(data) => Message::Text(
            ByteString::try_from(data)
                .map_err(|e| ProtocolError::Io(std::io::Error::other(e.to_string())))?,
        ),
        Frame::Binary(data) => Message::Binary(data),
        Frame::Ping(data) => Message::Ping(data),
        Frame::Pong(data) => Message::Pong(data),
        Frame::Close(reason) => Message::Close(reason),
        Frame::Continuation(item) => Message::Continuation(item),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use tokio_util::codec::Encoder;

    /// A client's frames, masked as a client sends them.
    fn client_frames(messages: Vec<Message>) -> Vec<u8> {
        let mut codec = Codec::new().client_mode();
        let mut out = BytesMut::new();
        for m in messages {
            codec.encode(m, &mut out).unwrap();
        }
        out.to_vec()
    }

    fn next(s: &mut Incoming) -> Poll<Option<Result<Message, ProtocolError>>> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        s.as_mut().poll_next(&mut cx)
    }

    #[test]
    fn frames_split_across_chunks_are_decoded_and_the_end_is_seen() {
        let bytes = client_frames(vec![
            Message::Binary(Bytes::from_static(b"hello")),
            Message::Ping(Bytes::from_static(b"p")),
        ]);
        let chunks: Vec<Result<Bytes, String>> = bytes
            .chunks(3)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let mut s = incoming(futures_util::stream::iter(chunks), 1 << 20);
        assert!(matches!(next(&mut s), Poll::Ready(Some(Ok(Message::Binary(b)))) if b == "hello"));
        assert!(matches!(
            next(&mut s),
            Poll::Ready(Some(Ok(Message::Ping(_))))
        ));
        assert!(matches!(next(&mut s), Poll::Ready(None)));
    }

    #[test]
    fn a_frame_over_the_bound_is_refused_from_its_header() {
        let bytes = client_frames(vec![Message::Binary(Bytes::from(vec![0u8; 4096]))]);
        // Only the header and a little: the payload never has to come.
        let head = Bytes::copy_from_slice(&bytes[..16]);
        let mut s = incoming(
            futures_util::stream::iter(vec![Ok::<_, String>(head)])
                .chain(futures_util::stream::pending()),
            1024,
        );
        assert!(matches!(
            next(&mut s),
            Poll::Ready(Some(Err(ProtocolError::Overflow)))
        ));
    }

    #[test]
    fn no_more_is_read_while_a_whole_frame_is_buffered() {
        let bytes = client_frames(vec![
            Message::Binary(Bytes::from_static(b"one")),
            Message::Binary(Bytes::from_static(b"two")),
        ]);
        // One chunk holding both, then a stream that must not be polled.
        let first = Bytes::copy_from_slice(&bytes);
        let polled_after = std::rc::Rc::new(std::cell::Cell::new(0));
        let counter = polled_after.clone();
        let rest = futures_util::stream::poll_fn(move |_| {
            counter.set(counter.get() + 1);
            Poll::<Option<Result<Bytes, String>>>::Pending
        });
        let mut s = incoming(
            futures_util::stream::iter(vec![Ok::<_, String>(first)]).chain(rest),
            1 << 20,
        );
        assert!(matches!(next(&mut s), Poll::Ready(Some(Ok(Message::Binary(b)))) if b == "one"));
        assert!(matches!(next(&mut s), Poll::Ready(Some(Ok(Message::Binary(b)))) if b == "two"));
        assert_eq!(
            polled_after.get(),
            0,
            "read before the buffered frames were used"
        );
        assert!(next(&mut s).is_pending());
    }
}
