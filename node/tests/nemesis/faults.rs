//! The nemesis itself: one fault at a time, chosen at random from a
//! seeded generator: kill -9 of a node and a restart, SIGTERM and a
//! restart, SIGSTOP for up to 10 s, a partition (one node from the rest,
//! or one pair), revive of lost sessions, and big replies (raw history and
//! REST logs of the flood over the bound, through any node). Each fault is
//! recorded with the nodes that lost the faulted one and when.

use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, ServerMsg, SessionStatus};

use crate::check::{Fault, Request};
use crate::client::BOUND;
use crate::world::{World, NAMES};

/// The most a reply carries (the node's `MAX_REPLY`, 8 MiB) plus slack
/// for headers.
const MAX_REPLY: usize = 8 << 20;

pub async fn run(world: Arc<World>, seed: u64, until: f64) {
    let mut rng = StdRng::seed_from_u64(seed);
    while world.now() < until {
        sleep(rng.gen_range(1.0..4.0)).await;
        let x = rng.gen_range(0..NAMES.len());
        let others: Vec<usize> = (0..NAMES.len()).filter(|n| *n != x).collect();
        // Some absences outlast the breaker, so silence is checked too.
        let away = match rng.gen_bool(0.3) {
            true => rng.gen_range(30.0..40.0),
            false => rng.gen_range(1.0..6.0),
        };
        let kind = match rng.gen_range(0..12) {
            0 | 1 => "kill",
            2 | 3 => "sigterm",
            4 | 5 => "sigstop",
            6 | 7 => "partition",
            8 => "pair-partition",
            9 => "revive",
            _ => "big-reply",
        };
        *world
            .record
            .lock()
            .unwrap()
            .applied
            .entry(kind)
            .or_default() += 1;
        let start = world.now();
        println!("nemesis at {start:.1} s: {kind} of {}", NAMES[x]);
        match kind {
            "kill" | "sigterm" => {
                if kind == "kill" {
                    tokio::task::block_in_place(|| world.cluster.lock().unwrap().kill_node(x));
                } else {
                    stop(&world, x).await;
                }
                sleep(away).await;
                tokio::task::block_in_place(|| world.cluster.lock().unwrap().start_node(x));
                fault(&world, kind, x, others, start, true);
                revive_lost(&world, x).await;
            }
            "sigstop" => {
                let pid = Pid::from_raw(world.cluster.lock().unwrap().pid(x) as i32);
                kill(pid, Signal::SIGSTOP).unwrap();
                sleep(rng.gen_range(1.0..10.0)).await;
                kill(pid, Signal::SIGCONT).unwrap();
                fault(&world, kind, x, others, start, false);
            }
            "partition" => {
                for y in &others {
                    world.partition(x, *y, true);
                }
                sleep(away).await;
                for y in &others {
                    world.partition(x, *y, false);
                }
                fault(&world, kind, x, others, start, false);
            }
            "pair-partition" => {
                let y = others[rng.gen_range(0..others.len())];
                world.partition(x, y, true);
                sleep(away).await;
                world.partition(x, y, false);
                fault(&world, kind, x, vec![y], start, false);
                fault(&world, kind, y, vec![x], start, false);
            }
            "revive" => {
                for owner in 0..NAMES.len() {
                    revive_lost(&world, owner).await;
                }
            }
            _ => big_replies(&world, x).await,
        }
    }
}

/// A fault's length or the gap between faults, chosen at random: here the
/// wait is the event (the fault lasts that long). Polls use `poll_pause`.
async fn sleep(secs: f64) {
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
}

fn fault(world: &World, kind: &'static str, node: usize, from: Vec<usize>, start: f64, dies: bool) {
    let end = world.now();
    println!("nemesis at {end:.1} s: {kind} of {} over", NAMES[node]);
    world.record.lock().unwrap().faults.push(Fault {
        kind,
        node,
        from,
        start,
        end,
        dies,
    });
}

/// SIGTERM for node `x`, waiting (bounded) until it has exited.
async fn stop(world: &World, x: usize) {
    let pid = Pid::from_raw(world.cluster.lock().unwrap().pid(x) as i32);
    kill(pid, Signal::SIGTERM).unwrap();
    let asked = world.now();
    while !world.cluster.lock().unwrap().reap(x) {
        if world.now() - asked > BOUND {
            world.violation(format!(
                "node {} did not stop within {BOUND} s of SIGTERM",
                NAMES[x]
            ));
            tokio::task::block_in_place(|| world.cluster.lock().unwrap().kill_node(x));
            return;
        }
        crate::common::poll_pause().await;
    }
}

/// Revives, through their owner, node `x`'s sessions that are `lost`
/// (after a restart the owner may take a moment to say so).
pub async fn revive_lost(world: &World, x: usize) {
    let mine: Vec<String> = world
        .sessions
        .iter()
        .filter(|s| s.owner == x)
        .map(|s| s.id.clone())
        .collect();
    let started = world.now();
    let mut left = mine;
    while !left.is_empty() && world.now() - started < BOUND {
        let Ok(Ok(mut c)) =
            tokio::time::timeout(Duration::from_secs(5), Client::connect(&world.targets[x])).await
        else {
            crate::common::poll_pause().await;
            continue;
        };
        let list = tokio::time::timeout(Duration::from_secs(10), c.request(ClientMsg::list)).await;
        let Ok(Ok(ServerMsg::Sessions { sessions, .. })) = list else {
            crate::common::poll_pause().await;
            continue;
        };
        let mine: Vec<_> = sessions.iter().filter(|s| left.contains(&s.id)).collect();
        for s in mine {
            match s.status {
                SessionStatus::Running => left.retain(|id| *id != s.id),
                SessionStatus::Lost | SessionStatus::Exited => {
                    let id = s.id.clone();
                    let revived = tokio::time::timeout(
                        Duration::from_secs(10),
                        c.request(|rid| ClientMsg::Revive {
                            id: rid,
                            session: id,
                        }),
                    )
                    .await;
                    println!("nemesis: revive {} on {}: {revived:?}", s.id, NAMES[x]);
                }
                SessionStatus::Unreachable => {}
            }
        }
        crate::common::poll_pause().await;
    }
    if !left.is_empty() {
        world.violation(format!(
            "sessions {left:?} of node {} not running again within {BOUND} s",
            NAMES[x]
        ));
    }
}

/// Replies over the bound through node `via`: the flood's raw history
/// and its logs, asked for more than a reply may carry.
async fn big_replies(world: &Arc<World>, via: usize) {
    let flood = world.sessions[1].id.clone();
    logs(world.clone(), via, flood.clone(), 24 << 20).await;
    let sent = world.now();
    let asked = async {
        let mut c = Client::connect(&world.targets[via]).await?;
        c.request(|id| ClientMsg::History {
            id,
            session: flood.clone(),
            limit: Some(32 << 20),
            before_seq: None,
            rows: None,
        })
        .await
    };
    let reply = tokio::time::timeout(Duration::from_secs_f64(BOUND + 5.0), asked).await;
    let now = world.now();
    let (answered, outcome) = match reply {
        Ok(Ok(ServerMsg::History { data, .. })) => {
            let len = data.map_or(0, |d| d.len());
            if len > MAX_REPLY {
                world.violation(format!("raw history of {len} bytes, over the bound"));
            }
            (Some(now), format!("{len} bytes"))
        }
        Ok(Ok(other)) => (Some(now), format!("{other:?}")),
        Ok(Err(e))
            if e.downcast_ref::<termesh_node::client::RequestError>()
                .is_some() =>
        {
            (Some(now), format!("{e:#}"))
        }
        Ok(Err(e)) => (None, format!("{e:#}")),
        Err(_) => (None, "timed out".into()),
    };
    println!("nemesis: big history through {}: {outcome}", NAMES[via]);
    world.record.lock().unwrap().requests.push(Request {
        kind: "big-history",
        session: Some(1),
        on: via,
        sent,
        answered,
        ended: now,
        outcome,
    });
}

/// `GET /api/v1/sessions/{session}/logs?tail=N` through node `on`; the
/// answer (a body within the bound, or an error status) is recorded.
pub async fn logs(world: Arc<World>, on: usize, session: String, tail: u64) {
    let url = format!(
        "http://{}/api/v1/sessions/{session}/logs?tail={tail}",
        world.http[on]
    );
    let auth = format!("Bearer {}", world.token);
    let sent = world.now();
    let got = tokio::task::spawn_blocking(move || {
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs_f64(BOUND + 5.0))
            .build();
        match agent.get(&url).set("authorization", &auth).call() {
            Ok(r) => {
                let mut body = Vec::new();
                use std::io::Read;
                match r.into_reader().take(64 << 20).read_to_end(&mut body) {
                    Ok(_) => Ok(Ok(body.len())),
                    Err(e) => Err(format!("reading the body: {e}")),
                }
            }
            Err(ureq::Error::Status(code, _)) => Ok(Err(code)),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
    .unwrap();
    let now = world.now();
    let (answered, outcome) = match got {
        Ok(Ok(len)) => {
            if len > MAX_REPLY {
                world.violation(format!(
                    "logs of {len} bytes through node {on}, over the bound"
                ));
            }
            (Some(now), format!("{len} bytes"))
        }
        Ok(Err(status)) => {
            let mut r = world.record.lock().unwrap();
            *r.errors.entry(format!("logs: HTTP {status}")).or_default() += 1;
            drop(r);
            if ![404, 413, 503].contains(&status) {
                world.violation(format!("logs through node {on}: HTTP {status}"));
            }
            (Some(now), format!("HTTP {status}"))
        }
        Err(e) => (None, e),
    };
    world.record.lock().unwrap().requests.push(Request {
        kind: "logs",
        session: world.sessions.iter().position(|s| s.id == session),
        on,
        sent,
        answered,
        ended: now,
        outcome,
    });
}
