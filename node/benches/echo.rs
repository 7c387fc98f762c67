//! Keystroke echo with the store on and off (issue 19): the same client,
//! the same `cat`, two release nodes (default store, `[store] enabled =
//! false`), alternating rounds so both share the machine's noise; beside
//! them the machine's own limit, `cat` in a bare PTY, and terminado (the
//! terminal server of Jupyter) when Python has it (`pip install
//! terminado`), driven over its WebSocket by this same process. Prints p50
//! and p99 per configuration (the median of the rounds' figures, with
//! their range) and the ratios the issue targets (store p99 within 1.15x
//! of --no-store, and below terminado's).
//!
//! `cargo bench -p termesh-node --bench echo` (`TERMESH_ECHO_ROUNDS`,
//! `TERMESH_ECHO_SAMPLES` change the 6 rounds of 400 keys).

#[path = "echo/terminado.rs"]
mod terminado;

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::{echo, ms, percentile, Node};
use portable_pty::CommandBuilder;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `cat` in a bare PTY: a key written to the master until it is read back.
fn bare_pty(samples: usize) -> (Duration, Duration) {
    let pair = common::pty::open(80, 24);
    let mut cmd = CommandBuilder::new("sh");
    cmd.args(["-c", "stty raw -echo; echo ready; exec cat"]);
    let mut child = pair.slave.spawn_command(cmd).unwrap();
    drop(pair.slave);
    let mut reader = pair.master.try_clone_reader().unwrap();
    let mut writer = pair.master.take_writer().unwrap();
    let mut buf = [0u8; 4096];
    let mut seen = String::new();
    while !seen.contains("ready") {
        let n = reader.read(&mut buf).unwrap();
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples + 20 {
        let key = format!("<{i}>");
        let sent = Instant::now();
        writer.write_all(key.as_bytes()).unwrap();
        let mut seen = String::new();
        while !seen.contains(&key) {
            let n = reader.read(&mut buf).unwrap();
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        if i >= 20 {
            times.push(sent.elapsed());
        }
    }
    let _ = child.kill();
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

/// The median of `v` and its range, in ms.
fn summary(v: &[Duration]) -> String {
    let mut v = v.to_vec();
    v.sort();
    format!(
        "{:6.3} ms  [{:.3}-{:.3}]",
        ms(v[v.len() / 2]),
        ms(v[0]),
        ms(v[v.len() - 1])
    )
}

fn main() {
    let rounds = env_or("TERMESH_ECHO_ROUNDS", 6);
    let samples = env_or("TERMESH_ECHO_SAMPLES", 400);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = Node::start("");
    let no_store = Node::start("[store]\nenabled = false\n");
    let terminado = terminado::Server::start();
    if terminado.is_none() {
        println!("terminado is not installed for python3 (pip install terminado): left out");
    }
    let configs = if terminado.is_some() { 4 } else { 3 };
    let mut figures: [(Vec<Duration>, Vec<Duration>); 4] = Default::default();
    for round in 0..rounds {
        // Alternate which goes first.
        let mut order: Vec<usize> = (0..configs).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for which in order {
            let (p50, p99) = match which {
                0 => bare_pty(samples),
                1 => rt.block_on(echo(&store.target, None, samples, false)),
                2 => rt.block_on(echo(&no_store.target, None, samples, false)),
                _ => rt.block_on(terminado.as_ref().expect("started").echo(samples)),
            };
            figures[which].0.push(p50);
            figures[which].1.push(p99);
        }
    }
    println!(
        "\nkeystroke echo, client -> node -> `cat` -> node -> client ({rounds} alternating rounds of {samples} keys; median of the rounds [range])"
    );
    let names = [
        "limit: `cat` in a bare PTY",
        "termesh, store on (default)",
        "termesh, --no-store",
        "terminado 0.18 (same client)",
    ];
    for (name, (p50, p99)) in names.iter().zip(&figures).take(configs) {
        println!("  {name:30} p50 {}   p99 {}", summary(p50), summary(p99));
    }
    let med = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        v[v.len() / 2]
    };
    println!(
        "  store on / --no-store: p50 {:.2}x, p99 {:.2}x (target p99 <= 1.15x)",
        med(&figures[1].0).as_secs_f64() / med(&figures[2].0).as_secs_f64(),
        med(&figures[1].1).as_secs_f64() / med(&figures[2].1).as_secs_f64()
    );
    if configs == 4 {
        println!(
            "  store on / terminado: p50 {:.2}x, p99 {:.2}x (target p99 < 1x)",
            med(&figures[1].0).as_secs_f64() / med(&figures[3].0).as_secs_f64(),
            med(&figures[1].1).as_secs_f64() / med(&figures[3].1).as_secs_f64()
        );
    }
    drop(store);
    drop(no_store);
}
