//! One link's connection: the hellos on the control stream, then the
//! control, data and reply streams both ways until it ends.

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;

use super::{
    check_pin, LinkEvent, LinkSink, MeshConfig, PeerSpec, DATA_STREAM, FAST_DATA_STREAM,
    HELLO_TIMEOUT, REPLY_STREAM, REPLY_STREAMS,
};
use crate::peer::stats::LinkStats;
use crate::peer::{data_frames, frame, DataMsg, PeerMsg, PEER_PROTO, PEER_PROTO_UPTO};

/// Runs one connection: the control stream, hellos checked, then frames
/// both ways until the connection ends. Returns why it ended.
pub(super) async fn serve(
    config: &MeshConfig,
    peer: &PeerSpec,
    conn: quinn::Connection,
    dialer: bool,
) -> Result<(), String> {
    if dialer {
        if let Err(why) = check_pin(&conn, &peer.name, peer.key_sha256.as_deref()) {
            // Said at every attempt (a few seconds apart): someone holds a
            // certificate of this cluster that the config does not trust.
            tracing::warn!(peer = %peer.name, "refused: {why}");
            return Err(why);
        }
    }
    let (mut send, mut recv, boot, proto) = handshake(config, peer, &conn, dialer).await?;
    let (out, mut outgoing) = mpsc::unbounded_channel::<PeerMsg>();
    let (data, mut data_outgoing) = mpsc::unbounded_channel::<DataMsg>();
    let (fast, mut fast_outgoing) = mpsc::unbounded_channel::<DataMsg>();
    let has_fast = proto >= 3;
    let (replies, mut replies_outgoing) = mpsc::unbounded_channel::<PeerMsg>();
    let _counted = Counted::new(&peer.stats, &conn);
    peer.sink.send(LinkEvent::Up {
        out,
        data,
        fast: has_fast.then_some(fast),
        replies,
        boot,
        revision: proto,
    });
    let writer = async {
        while let Some(msg) = outgoing.recv().await {
            crate::peer::hop_request("in_link_write", &msg);
            frame::write(&mut send, &msg)
                .await
                .map_err(|e| format!("write: {e}"))?;
        }
        Ok::<(), String>(())
    };
    let reader = async {
        loop {
            match frame::read::<_, PeerMsg>(&mut recv).await {
                Ok(Some(msg)) => {
                    crate::peer::hop_request("in_link_read", &msg);
                    peer.sink.send(LinkEvent::Msg(Box::new(msg)))
                }
                Ok(None) => return "the peer closed the control stream".to_string(),
                Err(e) => return format!("read: {e}"),
            }
        }
    };
    let data_writer = write_data(&conn, &mut data_outgoing, DATA_STREAM);
    let fast_writer = async {
        if has_fast {
            write_data(&conn, &mut fast_outgoing, FAST_DATA_STREAM).await
        } else {
            std::future::pending().await
        }
    };
    let reply_writer = write_replies(&conn, &mut replies_outgoing);
    let uni_reader = read_streams(&conn, &peer.sink);
    let reason = tokio::select! {
        r = writer => r.err().unwrap_or_else(|| "the link was dropped here".into()),
        r = reader => r,
        r = data_writer => r.err().unwrap_or_else(|| "the link was dropped here".into()),
        r = fast_writer => r.err().unwrap_or_else(|| "the link was dropped here".into()),
        r = reply_writer => r.err().unwrap_or_else(|| "the link was dropped here".into()),
        r = uni_reader => r,
        e = conn.closed() => format!("connection lost: {e}"),
    };
    conn.close(0u32.into(), b"link ended");
    Err(reason)
}

/// Frames a data stream's writer puts in one write at most (a bound on
/// the chunks it holds; a flood's frames are up to 64 KiB each).
const WRITE_BATCH: usize = 32;

/// Output rides a stream of its own each way, below the control
/// stream's priority: QUIC's per-stream flow control means a flood never
/// holds up a control frame. Interactive sessions' output rides a second
/// one (`FAST_DATA_STREAM`) at the control stream's priority, so it never
/// waits behind another session's bulk output queued on the first; the
/// sender moves a session between them only once its mirror has acked
/// all it sent (`PeerActor`), so each session's order holds.
async fn write_data(
    conn: &quinn::Connection,
    outgoing: &mut mpsc::UnboundedReceiver<DataMsg>,
    kind: u8,
) -> Result<(), String> {
    let mut send = conn
        .open_uni()
        .await
        .map_err(|e| format!("data stream: {e}"))?;
    let _ = send.set_priority(if kind == FAST_DATA_STREAM { 1 } else { 0 });
    send.write_all(&[kind])
        .await
        .map_err(|e| format!("data stream: {e}"))?;
    let mut chunks = Vec::new();
    while let Some(msg) = outgoing.recv().await {
        // What else is queued goes in the same write: one turn of the
        // connection's lock and driver for a flood's many frames.
        let queued = (1..WRITE_BATCH).map_while(|_| outgoing.try_recv().ok());
        for msg in std::iter::once(msg).chain(queued) {
            crate::peer::hop_output("out_link_write", &msg);
            data_frames::encode(&msg, &mut chunks).map_err(|e| format!("data write: {e}"))?;
        }
        send.write_all_chunks(&mut chunks)
            .await
            .map_err(|e| format!("data write: {e}"))?;
        chunks.clear();
    }
    Ok(())
}

/// Replies over a few KiB leave the control stream: each goes on a stream
/// of its own, so a large one delays no keystroke or ack behind it, and a
/// failed one fails alone. At most `REPLY_STREAMS` are written at once.
async fn write_replies(
    conn: &quinn::Connection,
    outgoing: &mut mpsc::UnboundedReceiver<PeerMsg>,
) -> Result<(), String> {
    let mut writing = FuturesUnordered::new();
    loop {
        tokio::select! {
            msg = outgoing.recv(), if writing.len() < REPLY_STREAMS => match msg {
                Some(msg) => writing.push(write_reply(conn, msg)),
                None => return Ok(()),
            },
            Some(done) = writing.next(), if !writing.is_empty() => done?,
        }
    }
}

/// The peer's one-way streams (its data stream, its replies), each read
/// beside the others; returns why the first that failed did.
async fn read_streams(conn: &quinn::Connection, sink: &LinkSink) -> String {
    let mut reading = FuturesUnordered::new();
    loop {
        tokio::select! {
            recv = conn.accept_uni() => match recv {
                Ok(recv) => reading.push(read_uni(recv, sink)),
                Err(e) => return format!("incoming stream: {e}"),
            },
            Some(done) = reading.next(), if !reading.is_empty() => {
                if let Err(e) = done {
                    return e;
                }
            }
        }
    }
}

/// Writes one reply on a stream of its own.
async fn write_reply(conn: &quinn::Connection, msg: PeerMsg) -> Result<(), String> {
    let mut send = conn
        .open_uni()
        .await
        .map_err(|e| format!("reply stream: {e}"))?;
    let _ = send.set_priority(0);
    let mut bytes = vec![REPLY_STREAM];
    bytes.extend(frame::encode(&msg).map_err(|e| format!("reply: {e}"))?);
    send.write_all(&bytes)
        .await
        .map_err(|e| format!("reply write: {e}"))?;
    let _ = send.finish();
    Ok(())
}

/// Reads one incoming stream: the peer's data stream (until the link
/// ends; its end is the link's), or one reply.
async fn read_uni(mut recv: quinn::RecvStream, sink: &LinkSink) -> Result<(), String> {
    let mut kind = [0u8; 1];
    recv.read_exact(&mut kind)
        .await
        .map_err(|e| format!("incoming stream: {e}"))?;
    match kind[0] {
        DATA_STREAM | FAST_DATA_STREAM => {
            let mut frames = data_frames::Frames::default();
            loop {
                let msg = match frames.next(&mut recv).await {
                    Ok(Some(body)) => data_frames::decode(body),
                    Ok(None) => return Err("the peer closed its data stream".into()),
                    Err(e) => Err(e),
                };
                let msg = msg.map_err(|e| format!("data read: {e}"))?;
                crate::peer::hop_output("out_link_read", &msg);
                sink.send(LinkEvent::Data(msg))
            }
        }
        REPLY_STREAM => match frame::read::<_, PeerMsg>(&mut recv).await {
            Ok(Some(msg @ PeerMsg::Reply { .. })) => {
                sink.send(LinkEvent::Msg(Box::new(msg)));
                Ok(())
            }
            Ok(other) => Err(format!("a reply stream carried {other:?}")),
            Err(e) => Err(format!("reply read: {e}")),
        },
        other => Err(format!("an incoming stream of unknown kind {other}")),
    }
}

/// Counts a connection's bytes in the link's stats while it lives (also
/// when its link future is dropped for a newer connection).
struct Counted<'a> {
    stats: &'a LinkStats,
    conn: quinn::Connection,
}

impl<'a> Counted<'a> {
    fn new(stats: &'a LinkStats, conn: &quinn::Connection) -> Self {
        stats.conn_opened(conn);
        Counted {
            stats,
            conn: conn.clone(),
        }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.stats.conn_ended(&self.conn);
    }
}

/// Opens (dialer) or accepts the control stream and exchanges the hellos;
/// the stream's two halves and the peer's boot id, or why not.
async fn handshake(
    config: &MeshConfig,
    peer: &PeerSpec,
    conn: &quinn::Connection,
    dialer: bool,
) -> Result<(quinn::SendStream, quinn::RecvStream, String, u32), String> {
    let opened = async {
        if dialer {
            conn.open_bi().await
        } else {
            conn.accept_bi().await
        }
    };
    let hello = PeerMsg::Hello {
        cluster: config.cluster.clone(),
        node: config.me.clone(),
        proto: PEER_PROTO,
        boot: config.boot.clone(),
        upto: Some(PEER_PROTO_UPTO),
    };
    let handshake = async {
        let (mut send, mut recv) = opened.await.map_err(|e| format!("control stream: {e}"))?;
        // Control frames go before any data frame the connection carries.
        let _ = send.set_priority(1);
        frame::write(&mut send, &hello)
            .await
            .map_err(|e| format!("hello: {e}"))?;
        let theirs: Option<PeerMsg> = frame::read(&mut recv)
            .await
            .map_err(|e| format!("hello: {e}"))?;
        Ok::<_, String>((send, recv, theirs))
    };
    let (send, recv, theirs) = tokio::time::timeout(HELLO_TIMEOUT, handshake)
        .await
        .map_err(|_| "no hello in time".to_string())??;
    match theirs {
        Some(PeerMsg::Hello {
            cluster,
            node,
            proto,
            boot,
            upto,
        }) => {
            let refuse = if cluster != config.cluster {
                Some(format!(
                    "it is of cluster `{cluster}`, this node of `{}`",
                    config.cluster
                ))
            } else if node != peer.name {
                Some(format!(
                    "its hello says `{node}`, its certificate `{}`",
                    peer.name
                ))
            } else if proto != PEER_PROTO {
                Some(format!(
                    "it speaks peer protocol {proto}, this node {PEER_PROTO}"
                ))
            } else {
                None
            };
            if let Some(reason) = refuse {
                conn.close(2u32.into(), reason.as_bytes());
                return Err(format!("refused: {reason}"));
            }
            Ok((send, recv, boot, upto.unwrap_or(proto).min(PEER_PROTO_UPTO)))
        }
        other => Err(format!("expected hello, got {other:?}")),
    }
}
