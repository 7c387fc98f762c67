//! Fuzz entry points shared by the cargo-fuzz targets (`fuzz/`, nightly)
//! and the long property tests that run them on stable: the client
//! decoder (what a WebSocket frame becomes) and the peer decoders (a QUIC
//! stream's frames). Each takes arbitrary bytes and must answer with a
//! message or an error, never a panic; the seeds are valid encodings of
//! every message kind, for a fuzzer (or the tests) to damage.

use crate::peer::frame::{decode, read};
use crate::peer::{DataMsg, PeerMsg};
use crate::{decode_client, ClientMsg, CreateRequest};

/// The client decoder on arbitrary bytes.
pub fn client_decoder(data: &[u8]) {
    let _ = decode_client(data);
}

/// The peer decoders on arbitrary bytes: one frame body of each stream
/// kind, and the bytes as a stream of frames (control and data).
pub fn peer_decoder(data: &[u8]) {
    let _ = decode::<PeerMsg>(data);
    let _ = decode::<DataMsg>(data);
    let mut frames = crate::peer::data_frames::Frames::default();
    frames.push(bytes::Bytes::copy_from_slice(data));
    while let Ok(Some(body)) = frames.take() {
        let _ = crate::peer::data_frames::decode(body);
    }
    let mut stream = data;
    let reads = async { while let Ok(Some(_)) = read::<_, PeerMsg>(&mut stream).await {} };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    rt.block_on(reads);
}

/// Valid client messages, encoded: seeds for the client decoder.
pub fn client_seeds() -> Vec<Vec<u8>> {
    let session = || "0b5c0ffee123".to_string();
    let msgs = [
        ClientMsg::Auth {
            id: 1,
            token: "t".repeat(32),
        },
        ClientMsg::Create {
            id: 2,
            req: CreateRequest {
                command: Some(vec!["sh".into(), "-c".into(), "echo hi".into()]),
                cols: Some(80),
                rows: Some(24),
                name: Some("n".into()),
                tags: Some(vec!["a".into()]),
                ..Default::default()
            },
        },
        ClientMsg::Subscribe {
            id: 3,
            session: session(),
            from_seq: Some(7),
            window: Some(1 << 20),
            scrollback: Some(100),
        },
        ClientMsg::Input {
            session: session(),
            data: b"ls -la\r".to_vec(),
        },
        ClientMsg::Resize {
            session: session(),
            cols: 120,
            rows: 40,
        },
        ClientMsg::Ack {
            session: session(),
            seq: 9,
        },
        ClientMsg::Events {
            id: 4,
            session: session(),
            after: Some(3),
            limit: Some(10),
        },
        ClientMsg::Remove {
            id: 5,
            session: session(),
            purge: Some(true),
        },
    ];
    msgs.iter()
        .map(|m| rmp_serde::to_vec_named(m).unwrap_or_default())
        .collect()
}

/// Valid peer frames (length-prefixed), encoded: seeds for the peer
/// decoders.
pub fn peer_seeds() -> Vec<Vec<u8>> {
    let framed = |body: Vec<u8>| {
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend(body);
        out
    };
    let peer = [
        PeerMsg::Hello {
            cluster: "c".into(),
            node: "a".into(),
            proto: crate::peer::PEER_PROTO,
            boot: "b".into(),
            upto: Some(3),
        },
        PeerMsg::Ping {
            nonce: 1,
            stall_ms: Some(3),
        },
        PeerMsg::Subscribe {
            session: "s".into(),
            from_seq: Some(2),
            window: 4096,
        },
    ];
    let data = [DataMsg::Output {
        session: "s".into(),
        seq: 5,
        data: bytes::Bytes::from_static(b"hello"),
    }];
    let mut seeds: Vec<Vec<u8>> = peer
        .iter()
        .map(|m| framed(rmp_serde::to_vec_named(m).unwrap_or_default()))
        .collect();
    seeds.extend(
        data.iter()
            .map(|m| framed(rmp_serde::to_vec_named(m).unwrap_or_default())),
    );
    seeds
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use termesh_config::fuzz::{cases, mutate};

    type Edits = Vec<(u8, usize, u8)>;

    fn edits() -> impl Strategy<Value = Edits> {
        prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 0..12)
    }

    #[test]
    fn the_seeds_are_valid() {
        for seed in client_seeds() {
            assert!(decode_client(&seed).is_ok());
        }
        for seed in peer_seeds() {
            let mut s = &seed[..];
            let ok = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(async {
                    read::<_, PeerMsg>(&mut s).await.is_ok()
                        || read::<_, DataMsg>(&mut &seed[..]).await.is_ok()
                });
            assert!(ok);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]
        #[test]
        fn the_client_decoder_takes_damaged_frames(seed in prop::sample::select(client_seeds()), e in edits()) {
            client_decoder(&mutate(&seed, &e));
        }

        #[test]
        fn the_peer_decoders_take_damaged_streams(seed in prop::sample::select(peer_seeds()), e in edits()) {
            peer_decoder(&mutate(&seed, &e));
        }
    }
}
