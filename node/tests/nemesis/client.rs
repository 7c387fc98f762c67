//! A nemesis client: connects to a random node, subscribes to a random
//! session with `from_seq` where it left off, follows it (acking as the
//! protocol says) for a short or a long while, types and asks for screens,
//! history, lists and logs meanwhile, then drops the connection (without a
//! close, as a lost link does) or leaves politely, and goes again. Every
//! frame is checked as it comes: contiguous seqs, one payload per seq
//! across all clients, the program's numbering.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use termesh_node::client::{reply_id, Client};
use termesh_transport::{ClientMsg, EventKind, ServerMsg};

use crate::check::{At, Lines, Request, Sub};
use crate::world::World;

/// Every request is answered (a reply or an error) within this.
pub const BOUND: f64 = 30.0;
const WINDOW: u64 = 1 << 20;

/// Where this client is in one session's output.
#[derive(Default)]
struct Place {
    last_seq: u64,
    lines: Lines,
}

struct Pending {
    kind: &'static str,
    sent: At,
}

pub async fn run(world: Arc<World>, me: usize, seed: u64, until: At) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut places: HashMap<usize, Place> = HashMap::new();
    let mut tokens = 0u64;
    while world.now() < until {
        let on = rng.gen_range(0..world.targets.len());
        let session = rng.gen_range(0..world.sessions.len());
        // Two clients always stay long: their subscriptions span faults,
        // so silence is checked even in a short run.
        let long = me < 2 || rng.gen_bool(0.4);
        let stay = match long {
            true => rng.gen_range(20.0..45.0),
            false => rng.gen_range(0.5..6.0),
        };
        let connect = Client::connect(&world.targets[on]);
        let mut c = match tokio::time::timeout(Duration::from_secs(5), connect).await {
            Ok(Ok(c)) => c,
            _ => {
                world.record.lock().unwrap().connect_failures += 1;
                // The node is down (a fault): a pause before the next try
                // is the client's backoff, as a real client's is.
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        let place = places.entry(session).or_default();
        let mut visit = Visit {
            world: world.clone(),
            me,
            on,
            session,
            place,
            pending: HashMap::new(),
            unacked: 0,
            sub: Sub {
                client: me,
                on,
                owner: world.sessions[session].owner,
                session,
                start: world.now(),
                end: 0.0,
                told: Vec::new(),
            },
            subscribed: false,
        };
        let end = (world.now() + stay).min(until);
        visit.go(&mut c, &mut rng, end, &mut tokens).await;
        let polite = rng.gen_bool(0.5);
        if polite {
            let id = world.sessions[session].id.clone();
            let _ = c.send(&ClientMsg::Unsubscribe { session: id }).await;
            let _ = tokio::time::timeout(Duration::from_secs(2), c.close()).await;
        }
    }
}

/// One connection's stay on one session.
struct Visit<'a> {
    world: Arc<World>,
    me: usize,
    on: usize,
    session: usize,
    place: &'a mut Place,
    pending: HashMap<u64, Pending>,
    unacked: u64,
    sub: Sub,
    subscribed: bool,
}

impl Visit<'_> {
    fn id(&self) -> String {
        self.world.sessions[self.session].id.clone()
    }

    async fn go(&mut self, c: &mut Client, rng: &mut StdRng, end: At, tokens: &mut u64) {
        let from_seq = self.place.last_seq;
        let sub_id = c.next_id();
        let subscribe = ClientMsg::Subscribe {
            id: sub_id,
            session: self.id(),
            from_seq: Some(from_seq),
            window: Some(WINDOW),
            scrollback: None,
        };
        if c.send(&subscribe).await.is_err() {
            return;
        }
        self.pending.insert(
            sub_id,
            Pending {
                kind: "subscribe",
                sent: self.world.now(),
            },
        );
        let mut next_act = self.world.now() + rng.gen_range(0.3..2.0);
        let outcome = loop {
            let now = self.world.now();
            // Past the stay, only what is pending is waited for (bounded).
            let leaving = now >= end;
            if leaving && self.pending.is_empty() {
                break "left".to_string();
            }
            let oldest = self
                .pending
                .values()
                .map(|p| p.sent)
                .fold(f64::MAX, f64::min);
            if leaving && now - oldest > BOUND {
                break "pending past the bound".to_string();
            }
            if !leaving && now >= next_act {
                next_act = now + rng.gen_range(0.3..2.0);
                if self.act(c, rng, tokens).await.is_err() {
                    break "send failed".to_string();
                }
                continue;
            }
            let wait = if leaving {
                0.5
            } else {
                (next_act - now).min(end - now)
            };
            match tokio::time::timeout(Duration::from_secs_f64(wait.max(0.01)), c.recv()).await {
                Err(_) => continue,
                Ok(Err(e)) => break format!("{e:#}"),
                Ok(Ok(msg)) => {
                    if let Err(e) = self.take(c, msg).await {
                        break format!("{e:#}");
                    }
                }
            }
        };
        let now = self.world.now();
        self.sub.end = now;
        let mut r = self.world.record.lock().unwrap();
        r.lines += self.place.lines.lines;
        self.place.lines.lines = 0;
        if self.subscribed {
            r.subscriptions += 1;
            r.subs.push(self.sub.clone());
        }
        for p in self.pending.values() {
            r.requests.push(Request {
                kind: p.kind,
                session: Some(self.session),
                on: self.on,
                sent: p.sent,
                answered: None,
                ended: now,
                outcome: outcome.clone(),
            });
        }
    }

    /// One action of a client at random: type, or ask for something.
    async fn act(
        &mut self,
        c: &mut Client,
        rng: &mut StdRng,
        tokens: &mut u64,
    ) -> anyhow::Result<()> {
        let session = self.id();
        let id = c.next_id();
        // A connection may have `MAX_SCREENS_IN_FLIGHT` (4) screen, history
        // and list requests in flight (docs/protocol.md, section 16): no
        // more (past a long stall of its node, a client still waits for
        // four: it types instead). Past the bytes bound (8 MiB by the sizes
        // asked) the node answers `unavailable`, which the check allows.
        let screens = self
            .pending
            .values()
            .filter(|p| {
                p.kind.starts_with("screen") || p.kind.starts_with("history") || p.kind == "list"
            })
            .count();
        let pick = match rng.gen_range(0..10) {
            4..=8 if screens >= 4 => 0,
            n => n,
        };
        let (kind, msg) = match pick {
            0..=3 => {
                *tokens += 1;
                let token = format!("c{}t{}", self.me, tokens);
                self.world.record.lock().unwrap().typed += 1;
                let data = format!("{token}\n").into_bytes();
                return c.send(&ClientMsg::Input { session, data }).await;
            }
            4 | 5 => (
                "screen",
                ClientMsg::Screen {
                    id,
                    session,
                    scrollback: None,
                },
            ),
            6 => ("list", ClientMsg::list(id)),
            7 => {
                // The screen model's lines, or a page of the stored output.
                let rows = rng.gen_bool(0.5).then(|| rng.gen_range(1u32..=10_000));
                (
                    "history",
                    ClientMsg::History {
                        id,
                        session,
                        limit: None,
                        before_seq: None,
                        rows,
                    },
                )
            }
            8 => {
                let limit = Some(rng.gen_range(1u64..(32 << 20)));
                (
                    "history-raw",
                    ClientMsg::History {
                        id,
                        session,
                        limit,
                        before_seq: None,
                        rows: None,
                    },
                )
            }
            _ => {
                let tail = rng.gen_range(1u64..(24 << 20));
                tokio::spawn(crate::faults::logs(
                    self.world.clone(),
                    self.on,
                    session,
                    tail,
                ));
                return Ok(());
            }
        };
        self.pending.insert(
            id,
            Pending {
                kind,
                sent: self.world.now(),
            },
        );
        c.send(&msg).await
    }

    /// Handles one message from the node.
    async fn take(&mut self, c: &mut Client, msg: ServerMsg) -> anyhow::Result<()> {
        let now = self.world.now();
        if let Some(id) = reply_id(&msg).or(match &msg {
            ServerMsg::Error { id, .. } => *id,
            ServerMsg::Snapshot { id, .. } => *id,
            _ => None,
        }) {
            if let Some(p) = self.pending.remove(&id) {
                let outcome = match &msg {
                    ServerMsg::Error { code, message, .. } => {
                        let code = code.as_str().to_string();
                        self.check_error(p.kind, &code, message);
                        code
                    }
                    _ => "ok".into(),
                };
                if p.kind == "subscribe" {
                    self.subscribed = matches!(msg, ServerMsg::Subscribed { .. });
                    if !self.subscribed {
                        self.sub.told.push(now);
                    }
                }
                self.world.record.lock().unwrap().requests.push(Request {
                    kind: p.kind,
                    session: Some(self.session),
                    on: self.on,
                    sent: p.sent,
                    answered: Some(now),
                    ended: now,
                    outcome,
                });
            }
            return Ok(());
        }
        let me = self.id();
        match msg {
            ServerMsg::Output { session, seq, data } if session == me => {
                let last = self.place.last_seq;
                if seq != last + 1 {
                    self.world.violation(format!(
                        "client {} on node {}: session {} seq {seq} after {last} (a {})",
                        self.me,
                        self.on,
                        self.session,
                        if seq <= last { "repeat" } else { "hole" }
                    ));
                }
                self.place.last_seq = seq;
                let mut bad = Vec::new();
                let echoed = self.place.lines.feed(&data, &mut bad);
                {
                    let mut r = self.world.record.lock().unwrap();
                    r.echoed += echoed.len() as u64;
                    if let Err(e) = r.frames.check(self.session, seq, &data) {
                        bad.push(e);
                    }
                }
                for b in bad {
                    self.world.violation(format!(
                        "client {} on node {}, session {} at seq {seq}: {b}",
                        self.me, self.on, self.session
                    ));
                }
                self.unacked += data.len() as u64;
                if self.unacked >= WINDOW / 4 {
                    self.unacked = 0;
                    c.send(&ClientMsg::Ack { session: me, seq }).await?;
                }
            }
            ServerMsg::Snapshot { session, seq, .. } if session == me => {
                self.place.last_seq = seq;
                self.place.lines.reset();
            }
            ServerMsg::ResyncRequired { session, .. } if session == me => {
                self.world.record.lock().unwrap().resyncs += 1;
                self.place.lines.reset();
                self.sub.told.push(now);
            }
            ServerMsg::Event { session, event } if session == me => match event {
                EventKind::Unreachable | EventKind::Reachable | EventKind::Lost => {
                    self.sub.told.push(now)
                }
                EventKind::Exited { .. } => self.world.violation(format!(
                    "session {} exited (its program never ends)",
                    self.session
                )),
                _ => {}
            },
            ServerMsg::Error {
                session: Some(s),
                code,
                message,
                ..
            } if s == me => {
                self.sub.told.push(now);
                self.check_error("subscription", code.as_str(), &message);
            }
            _ => {}
        }
        Ok(())
    }

    /// Counts an error reply; codes no fault explains are violations.
    fn check_error(&self, kind: &str, code: &str, message: &str) {
        *self
            .world
            .record
            .lock()
            .unwrap()
            .errors
            .entry(format!("{kind}: {code}"))
            .or_default() += 1;
        if !["unavailable", "too_large"].contains(&code) {
            self.world.violation(format!(
                "client {} on node {}: {kind} got {code}: {message}",
                self.me, self.on
            ));
        }
    }
}
