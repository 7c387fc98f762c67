//! A client's view of one subscription checked as PROTOCOL.md promises
//! (`Stream`: contiguous seqs, snapshots re-basing them), and the helpers
//! that subscribe and pump a connection into it.

use anyhow::{bail, Context};
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, ServerMsg};

use super::{within, PATIENCE};

/// One subscription's view, checked as the protocol promises: output
/// contiguous in seq, a snapshot re-basing the sequence.
#[derive(Debug, Default)]
pub struct Stream {
    pub data: Vec<u8>,
    pub last_seq: u64,
    pub snapshots: Vec<(u64, Vec<u8>)>,
    pub resyncs: u32,
    pub exited: Option<u32>,
    /// `event{kind:"lost"}` came.
    pub lost: bool,
    /// `unreachable` / `reachable` events, each with the last seq seen.
    pub links: Vec<(&'static str, u64)>,
    /// Bytes consumed since the last ack.
    pub unacked: u64,
    pub window: u64,
    /// `error` messages about the session (for failure messages).
    pub errors: Vec<String>,
}

impl Stream {
    pub fn new(window: u64) -> Stream {
        Stream {
            window,
            ..Default::default()
        }
    }

    /// Applies one message for `session`; panics on a hole.
    pub fn apply(&mut self, session: &str, msg: &ServerMsg) {
        match msg {
            ServerMsg::Output {
                session: s,
                seq,
                data,
            } if s == session => {
                assert_eq!(
                    *seq,
                    self.last_seq + 1,
                    "hole in output: after {} came {}",
                    self.last_seq,
                    seq
                );
                self.last_seq = *seq;
                self.data.extend_from_slice(data);
                self.unacked += data.len() as u64;
            }
            ServerMsg::Snapshot {
                session: s,
                seq,
                data,
                id: None,
                ..
            } if s == session => {
                self.last_seq = *seq;
                self.snapshots.push((*seq, data.clone()));
            }
            ServerMsg::ResyncRequired { session: s, .. } if s == session => self.resyncs += 1,
            ServerMsg::Event {
                session: s,
                event: termesh_transport::EventKind::Exited { exit_code, .. },
            } if s == session => self.exited = Some(*exit_code),
            ServerMsg::Event {
                session: s,
                event: termesh_transport::EventKind::Unreachable,
            } if s == session => self.links.push(("unreachable", self.last_seq)),
            ServerMsg::Event {
                session: s,
                event: termesh_transport::EventKind::Reachable,
            } if s == session => self.links.push(("reachable", self.last_seq)),
            ServerMsg::Event {
                session: s,
                event: termesh_transport::EventKind::Lost,
            } if s == session => self.lost = true,
            ServerMsg::Error {
                code,
                message,
                session: Some(s),
                ..
            } if s == session => self.errors.push(format!("{}: {message}", code.as_str())),
            _ => {}
        }
    }

    /// Whether the last link event was `kind`.
    pub fn link_is(&self, kind: &str) -> bool {
        self.links.last().is_some_and(|l| l.0 == kind)
    }

    /// Whether a quarter window was consumed since the last ack.
    pub fn should_ack(&self) -> bool {
        self.unacked >= self.window / 4
    }
}

/// Subscribes as a fresh attach (no `from_seq`) and returns once its
/// snapshot came, with the stream it started: output follows the
/// snapshot's seq, so a key typed now echoes in `output`, never inside
/// the snapshot (taken at some seq after `subscribed`).
pub async fn subscribe_fresh(c: &mut Client, session: &str, window: u64) -> Stream {
    subscribe(c, session, None, window).await.unwrap();
    let mut s = Stream::new(window);
    within(
        PATIENCE,
        "the fresh attach's snapshot",
        pump_until(c, session, &mut s, true, |s| !s.snapshots.is_empty()),
    )
    .await
    .unwrap();
    s
}

/// Subscribes from the start (window 1 MiB) and returns once the program's
/// first line, `ready`, came, with the stream it started.
pub async fn subscribe_to_ready(c: &mut Client, session: &str) -> Stream {
    let mut s = Stream::new(1 << 20);
    subscribe(c, session, Some(0), 1 << 20).await.unwrap();
    within(
        PATIENCE,
        "ready",
        pump_until(c, session, &mut s, true, |s| s.data.starts_with(b"ready\n")),
    )
    .await
    .unwrap();
    s
}

/// Subscribes and returns once `subscribed` arrives.
pub async fn subscribe(
    c: &mut Client,
    session: &str,
    from_seq: Option<u64>,
    window: u64,
) -> anyhow::Result<ServerMsg> {
    let reply = c
        .request(|id| ClientMsg::Subscribe {
            id,
            session: session.to_string(),
            from_seq,
            window: Some(window),
            scrollback: None,
        })
        .await?;
    if !matches!(reply, ServerMsg::Subscribed { .. }) {
        bail!("expected subscribed, got {reply:?}");
    }
    Ok(reply)
}

/// `1\n2\n...n\n`, what `seq 1 n` prints.
pub fn numbered_lines(n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 1..=n {
        out.extend_from_slice(format!("{i}\n").as_bytes());
    }
    out
}

/// `n` random byte offsets below `len`, sorted, where a test drops its
/// connection; the seed is printed (`TERMESH_TEST_SEED` replays it).
pub fn drop_points(n: usize, len: usize) -> Vec<usize> {
    use rand::{Rng, SeedableRng};
    let seed: u64 = std::env::var("TERMESH_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("drop points seed: {seed} (set TERMESH_TEST_SEED to replay)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut drops: Vec<usize> = (0..n).map(|_| rng.gen_range(0..len)).collect();
    drops.sort_unstable();
    println!("drop points: {drops:?}");
    drops
}

/// Reads one message, failing on a timeout.
pub async fn next(c: &mut Client) -> ServerMsg {
    within(PATIENCE, "a message from the node", c.recv())
        .await
        .expect("the connection stays open")
}

/// Reads and applies messages (acking per protocol when `ack`) until `done`.
pub async fn pump_until(
    c: &mut Client,
    session: &str,
    stream: &mut Stream,
    ack: bool,
    done: impl Fn(&Stream) -> bool,
) -> anyhow::Result<()> {
    loop {
        // Ack what was consumed before waiting for more (also what an earlier
        // non-acking phase consumed), as a client following the protocol does.
        if ack && stream.should_ack() {
            stream.unacked = 0;
            let seq = stream.last_seq;
            c.send(&ClientMsg::Ack {
                session: session.to_string(),
                seq,
            })
            .await?;
        }
        if done(stream) {
            return Ok(());
        }
        let msg = c.recv().await.context("connection lost")?;
        stream.apply(session, &msg);
    }
}

/// The session's stored events (the first `MAX_EVENTS`), by `events`.
pub async fn events_of(c: &mut Client, session: &str) -> Vec<serde_json::Value> {
    match c
        .request(|id| ClientMsg::Events {
            id,
            session: session.to_string(),
            after: None,
            limit: None,
        })
        .await
        .unwrap()
    {
        ServerMsg::Events { events, .. } => events,
        other => panic!("{other:?}"),
    }
}

/// Reads and acks the session's output until its `exited` event.
pub async fn pump_to_exit(c: &mut Client, session: &str, s: &mut Stream, what: &str) {
    within(
        PATIENCE,
        what,
        pump_until(c, session, s, true, |s| s.exited.is_some()),
    )
    .await
    .expect("the connection stays open");
}
