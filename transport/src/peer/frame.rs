//! Framing of a QUIC stream: each frame is a 4-byte big-endian length and
//! that many bytes of MessagePack. A length over the bound is an error
//! before anything is allocated, and so is a stream that ends mid-frame.

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest frame any stream accepts: a reply of `MAX_REPLY` with room
/// for its fields (a directory of thousands of sessions fits; output
/// frames are at most 64 KiB).
pub const MAX_FRAME: usize = crate::MAX_REPLY + (1 << 20);

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("a frame of {0} bytes is over the {MAX_FRAME}-byte bound")]
    TooLarge(usize),
    #[error("the stream ended inside a frame")]
    Truncated,
    #[error("undecodable frame: {0}")]
    Decode(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// One frame's bytes: the length prefix and the encoded message.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let body = rmp_serde::to_vec_named(msg).map_err(|e| FrameError::Decode(e.to_string()))?;
    if body.len() > MAX_FRAME {
        return Err(FrameError::TooLarge(body.len()));
    }
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

pub async fn write<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    msg: &T,
) -> Result<(), FrameError> {
    w.write_all(&encode(msg)?).await?;
    Ok(())
}

/// The next message, or `None` when the stream ended between frames.
pub async fn read<R: AsyncRead + Unpin, T: DeserializeOwned>(
    r: &mut R,
) -> Result<Option<T>, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            FrameError::Truncated
        } else {
            e.into()
        }
    })?;
    decode(&body).map(Some)
}

pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    rmp_serde::from_slice(body).map_err(|e| FrameError::Decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::{DataMsg, PeerMsg};
    use proptest::prelude::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn frames_round_trip_and_bounds_hold() {
        let msgs = [
            PeerMsg::Ping {
                nonce: 1,
                stall_ms: None,
            },
            PeerMsg::Pong {
                nonce: 2,
                stall_ms: Some(3),
            },
        ];
        let mut wire = Vec::new();
        for m in &msgs {
            wire.extend(encode(m).unwrap());
        }
        assert_eq!(&wire[..4], &[0, 0, 0, 15]);
        let mut r = &wire[..];
        block_on(async {
            for m in &msgs {
                assert_eq!(read::<_, PeerMsg>(&mut r).await.unwrap().as_ref(), Some(m));
            }
            assert!(read::<_, PeerMsg>(&mut r).await.unwrap().is_none());
            // A huge length is refused before any allocation.
            let mut huge = &[0xff, 0xff, 0xff, 0xff, 0][..];
            assert!(matches!(
                read::<_, PeerMsg>(&mut huge).await,
                Err(FrameError::TooLarge(_))
            ));
            let mut cut = &wire[..10];
            assert!(matches!(
                read::<_, PeerMsg>(&mut cut).await,
                Err(FrameError::Truncated)
            ));
        });
    }

    proptest! {
        /// Arbitrary bytes never panic a decoder: a message or an error.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode::<PeerMsg>(&bytes);
            let _ = decode::<DataMsg>(&bytes);
            let mut r = &bytes[..];
            block_on(async {
                while let Ok(Some(_)) = read::<_, PeerMsg>(&mut r).await {}
            });
        }
    }
}
