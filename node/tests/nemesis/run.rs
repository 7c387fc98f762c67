//! One nemesis run: the world started, clients on every node and the
//! nemesis for the run's length (the nemesis stops early so every fault is
//! healed before the end), then the checks and a report of the figures.

use std::sync::Arc;
use std::time::Duration;

use termesh_node::client::Client;
use termesh_transport::{ClientMsg, ServerMsg, SessionStatus};

use crate::check::{judge, Verdict};
use crate::client::BOUND;
use crate::world::{World, NAMES};

/// Clients following sessions at once.
const CLIENTS: usize = 6;
/// A subscriber is told its owner is away within this (the breaker trips
/// after about 20 s of silence; slack for a loaded machine).
const TOLD_WITHIN: f64 = 35.0;
/// The run's last stretch, without faults.
const QUIET: f64 = 15.0;

/// The run's length and seed, from the environment or the defaults.
pub fn settings(default_secs: f64) -> (f64, u64) {
    let secs = std::env::var("TERMESH_NEMESIS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_secs);
    let seed = std::env::var("TERMESH_NEMESIS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    (secs.max(60.0), seed)
}

/// Runs for `secs` seconds with `seed` and returns the verdict (printed).
pub async fn run(secs: f64, seed: u64) -> Verdict {
    println!("nemesis: {secs} s, seed {seed} (TERMESH_NEMESIS_SEED replays it)");
    let world = World::start().await;
    let mut tasks = Vec::new();
    for me in 0..CLIENTS {
        let w = world.clone();
        tasks.push(tokio::spawn(crate::client::run(
            w,
            me,
            seed ^ (me as u64 + 1),
            secs,
        )));
    }
    let nemesis = tokio::spawn(crate::faults::run(world.clone(), seed, secs - QUIET - 30.0));
    nemesis.await.unwrap();
    all_running(&world).await;
    for t in tasks {
        t.await.unwrap();
    }
    let r = world.record.lock().unwrap();
    let mut v = judge(&r.faults, &r.subs, &r.requests, BOUND, TOLD_WITHIN);
    v.violations.extend(r.violations.iter().cloned());
    println!("== nemesis figures ({secs} s, seed {seed})");
    println!("faults applied: {:?}", r.applied);
    println!(
        "requests: {} answered within {BOUND} s, {} cut by a fault of their node; errors by kind: {:?}",
        v.requests_answered, v.requests_cut, r.errors
    );
    println!(
        "subscriptions: {}; silences checked: {}, client-seconds of silence: {:.1} (mean {:.1} s)",
        r.subscriptions,
        v.silences_checked,
        v.silence,
        v.silence / v.silences_checked.max(1) as f64
    );
    println!(
        "resyncs: {}; bytes checked: {} ({} distinct frames); lines checked: {}; typed {}, echoed {}; connects refused {}",
        r.resyncs,
        r.frames.bytes,
        r.frames.distinct(),
        r.lines,
        r.typed,
        r.echoed,
        r.connect_failures
    );
    println!("violations: {}", v.violations.len());
    if !v.violations.is_empty() {
        // The nodes' logs outlive the run's temporary directory.
        let cluster = world.cluster.lock().unwrap();
        for (i, name) in NAMES.iter().enumerate() {
            let path = std::env::temp_dir().join(format!("nemesis-{seed}-{name}.log"));
            if std::fs::write(&path, cluster.log(i)).is_ok() {
                println!("node {name}'s log: {}", path.display());
            }
        }
    }
    for bad in v.violations.iter().take(50) {
        println!("  {bad}");
    }
    v
}

/// Every node lists every session `running` (lost ones revived by the
/// nemesis) within the bound, once the faults are over.
async fn all_running(world: &Arc<World>) {
    for owner in 0..NAMES.len() {
        crate::faults::revive_lost(world, owner).await;
    }
    let started = world.now();
    for (i, target) in world.targets.iter().enumerate() {
        loop {
            let listed = async {
                let mut c = Client::connect(target).await?;
                c.request(ClientMsg::list).await
            };
            let running = match tokio::time::timeout(Duration::from_secs(10), listed).await {
                Ok(Ok(ServerMsg::Sessions { sessions, .. })) => world.sessions.iter().all(|s| {
                    sessions
                        .iter()
                        .any(|l| l.id == s.id && l.status == SessionStatus::Running)
                }),
                _ => false,
            };
            if running {
                break;
            }
            if world.now() - started > BOUND {
                world.violation(format!(
                    "node {} does not list every session running {BOUND} s after the faults",
                    NAMES[i]
                ));
                break;
            }
            crate::common::poll_pause().await;
        }
    }
}
