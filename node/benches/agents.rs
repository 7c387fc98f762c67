//! Agent state (issue 30), on a release node:
//!
//! - from a prompt appearing to the state change a watcher sees, and to a
//!   `[[notify]]` webhook's arrival (a receiver in this process), beside
//!   the machine's own floor measured in the same run: a keystroke's echo
//!   through the same node, and the rules' settle time;
//! - what reading the screen costs: the classifier on a full screen, and
//!   the node's CPU with N sessions idle and with N sessions each printing
//!   a line a second (a look a second each), beside one core (1,000 ms/s).
//!
//! `cargo bench -p termesh-node --bench agents` (`TERMESH_AGENT_ROUNDS`:
//! prompts, default 20; `TERMESH_AGENT_SESSIONS`: N, default 500;
//! `TERMESH_AGENT_COST_ONLY=1` with `TERMESH_BENCH_BIN` for the CPU part
//! of another build).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::{create, echo, ms, p50_p99, remove, settle, Node};
use termesh_node::client::Client;
use termesh_transport::{AgentState, ClientMsg, ServerMsg};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A webhook receiver: each POST's body and when it arrived.
fn receiver() -> (String, std::sync::mpsc::Receiver<(String, Instant)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut line, mut len) = (String::new(), 0usize);
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line.trim() != "" {
                let lower = line.to_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            let _ = tx.send((String::from_utf8_lossy(&body).into(), Instant::now()));
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (url, rx)
}

/// Prompt to state change (seen by a watcher) and to the webhook.
async fn latency(rounds: usize) {
    let (url, posts) = receiver();
    let node = Node::start(&format!(
        "[[notify]]\nurl = \"{url}\"\non = [\"waiting\"]\nquiet = \"1s\"\n"
    ));
    let mut c = Client::connect(&node.target).await.unwrap();
    let mut watch = Client::connect(&node.target).await.unwrap();
    watch.request(|id| ClientMsg::Watch { id }).await.unwrap();
    let (mut to_state, mut to_hook) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let id = create(
            &mut c,
            &format!("stty -echo; read go; printf 'Q{round}? [y/n] '; read a"),
        )
        .await;
        // Started and quiet (idle) before the prompt is asked for.
        loop {
            if let ServerMsg::SessionChanged { session } = watch.recv().await.unwrap() {
                if session.id == id && session.state == Some(AgentState::Idle) {
                    break;
                }
            }
        }
        let asked = Instant::now();
        c.send(&ClientMsg::Input {
            session: id.clone(),
            data: b"go\n".to_vec(),
        })
        .await
        .unwrap();
        loop {
            if let ServerMsg::SessionChanged { session } = watch.recv().await.unwrap() {
                if session.id == id && session.state == Some(AgentState::Waiting) {
                    to_state.push(asked.elapsed());
                    break;
                }
            }
        }
        loop {
            let (body, at) = posts.recv_timeout(Duration::from_secs(30)).expect("a POST");
            if body.contains(&id) {
                to_hook.push(at - asked);
                break;
            }
        }
        remove(&mut c, id).await;
    }
    let (echo50, echo99) = echo(&node.target, None, 200, false).await;
    to_state.sort();
    to_hook.sort();
    println!(
        "prompt to state change, {rounds} prompts: {}",
        p50_p99(&to_state)
    );
    println!(
        "prompt to webhook arrival:            {}",
        p50_p99(&to_hook)
    );
    println!(
        "  beside: keystroke echo through this node p50 {:.2} ms p99 {:.2} ms; \
         the rules read a screen {} ms after output settles",
        ms(echo50),
        ms(echo99),
        termesh_actors::session::agent::SETTLE.as_millis()
    );
}

/// The classifier on a full, busy screen.
fn classify_cost() {
    use termesh_actors::session::agent::{rules::classify, Agents};
    let agents = Agents::default();
    let claude = agents.of(&["claude".into()]);
    let rows: Vec<String> = (0..50)
        .map(|i| {
            format!(
                "{i:>4} | fn handler_{i}(req: Request) -> Response {{ Response::ok(req) }} // é漢"
            )
        })
        .collect();
    let n = 20_000;
    let start = Instant::now();
    for i in 0..n {
        std::hint::black_box(classify(&rows, (i % 80, 49), claude.as_ref()));
    }
    let per = start.elapsed() / n as u32;
    println!(
        "classifying a 50-row screen: {:.1} µs",
        per.as_secs_f64() * 1e6
    );
}

/// Node CPU per second over `secs`, and the looks made meanwhile.
async fn cpu_rate(node: &Node, secs: u64) -> (f64, f64) {
    let pid = node.child.id();
    let (cpu0, looks0) = (
        common::cpu_ms(pid),
        node.metric("termesh_state_looks_total"),
    );
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let (cpu1, looks1) = (
        common::cpu_ms(pid),
        node.metric("termesh_state_looks_total"),
    );
    ((cpu1 - cpu0) / secs as f64, (looks1 - looks0) / secs as f64)
}

/// N sessions idle, then N printing a line a second.
async fn cost(n: usize) {
    let node = Node::start("[session]\nmax_sessions = 20000\n");
    let mut c = Client::connect(&node.target).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(create(&mut c, "exec sleep 100000").await);
    }
    settle(&[node.child.id()]).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (idle_cpu, idle_looks) = cpu_rate(&node, 10).await;
    for id in ids.drain(..) {
        remove(&mut c, id).await;
    }
    for _ in 0..n {
        ids.push(create(&mut c, "while :; do echo tick; sleep 1; done").await);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (busy_cpu, busy_looks) = cpu_rate(&node, 10).await;
    println!("{n} sessions idle: node CPU {idle_cpu:.1} ms/s, {idle_looks:.1} looks/s (one core: 1000 ms/s)");
    println!(
        "{n} sessions printing a line a second: node CPU {busy_cpu:.1} ms/s, {busy_looks:.0} looks/s; \
         at most {:.0} µs a look with the output's own handling",
        busy_cpu / busy_looks.max(1.0) * 1000.0
    );
    println!(
        "  at 10,000 sessions (linear): idle {:.0} ms/s, printing a line a second {:.0} ms/s",
        idle_cpu * 10_000.0 / n as f64,
        busy_cpu * 10_000.0 / n as f64
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // `TERMESH_AGENT_COST_ONLY=1`: the CPU part alone, which runs against
    // a build from before agent state too (`TERMESH_BENCH_BIN`).
    if std::env::var_os("TERMESH_AGENT_COST_ONLY").is_none() {
        classify_cost();
        rt.block_on(latency(env_or("TERMESH_AGENT_ROUNDS", 20)));
    }
    rt.block_on(cost(env_or("TERMESH_AGENT_SESSIONS", 500)));
}
