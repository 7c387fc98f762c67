//! How soon clients are back after their node restarts (issue 33): a
//! release node is restarted cleanly (SIGTERM: it closes its WebSockets
//! with 1001, its PTY keeper keeps the shell) while `termesh attach` (in
//! tmux) and the console (in headless Chromium) watch the shell. Timed
//! from the new node serving (its banner printed) to each showing a line
//! the shell printed after the restart, beside the machine's own limit
//! measured in the same round: a fresh client that connects as soon as it
//! can, subscribes, types that line and sees its echo (the attach and the
//! console cannot show the line before it exists). Figures are read by
//! polling the pane (every 20 ms) and the page (every few ms).
//!
//! `cargo bench -p termesh-node --bench reconnect`; `TERMESH_BENCH_ROUNDS`
//! (default 5). Needs tmux and Chromium (deploy/test.sh installs them).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::binary::BinaryNode;
use common::browser::Browser;
use common::tmux::Tmux;
use common::{poll_pause, within, OPERATOR, PATIENCE};
use termesh_node::client::{Client, Target};
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg};

const BIN: &str = env!("CARGO_BIN_EXE_termesh");

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}

async fn run() {
    let rounds: usize = std::env::var("TERMESH_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mut node = BinaryNode::start("");
    let target = node.target(OPERATOR);
    let session = termesh_node::client::commands::new(
        &target,
        CreateRequest {
            command: Some(vec![
                "sh".into(),
                "-c".into(),
                "PS1='PROMPT> ' exec sh -i".into(),
            ]),
            ..Default::default()
        },
    )
    .await
    .unwrap()
    .id;
    let pane = Tmux::start(
        100,
        30,
        &format!("{BIN} attach {session}"),
        &[("TERMESH_URL", &node.url), ("TERMESH_TOKEN", OPERATOR)],
    );
    pane.wait_for("PROMPT>").await;
    let browser = Browser::start(1280, 860).await;
    log_in(&browser, &node.url).await;
    browser
        .wait_js(
            "the console's terminal",
            &format!(
                "const b = document.querySelector(\"#sessions tr[data-session='{session}'] button\"); \
                 if (b) b.click(); const t = window.termesh.terms.get('{session}'); \
                 return t && t.lastSeq !== null"
            ),
        )
        .await;

    let (mut floor, mut attach, mut console) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        node = tokio::task::spawn_blocking(move || node.restart(""))
            .await
            .unwrap();
        let serving = Instant::now();
        let marker = format!("back-{round}-{}", rand::random::<u32>());
        let shown = |at: Instant| at.duration_since(serving);
        let (f, a, c) = tokio::join!(
            async { shown(fresh_client_echo(&node.target(OPERATOR), &session, &marker).await) },
            async {
                pane.wait_for(&format!("\n{marker}")).await;
                shown(Instant::now())
            },
            async {
                // Polled every few ms (a WebDriver call takes about as
                // long), not at `wait_js`'s 100 ms.
                let has = format!(
                    "const t = window.termesh.terms.get('{session}'); \
                     return !!t && t.lines().some(l => l === '{marker}')"
                );
                within(PATIENCE, "the console to show the line", async {
                    while browser.js(&has).await != serde_json::json!(true) {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
                .await;
                shown(Instant::now())
            },
        );
        println!(
            "round {round}: fresh client {:6.1} ms, attach {:6.1} ms, console {:6.1} ms",
            ms(f),
            ms(a),
            ms(c)
        );
        floor.push(f);
        attach.push(a);
        console.push(c);
    }
    println!(
        "\nfrom the node serving again to the line the shell printed after it, {rounds} restarts (median, max)"
    );
    for (what, v) in [
        ("a fresh client (the limit)", &mut floor),
        ("termesh attach", &mut attach),
        ("the console", &mut console),
    ] {
        v.sort();
        println!(
            "  {what:<28} {:6.1} ms  {:6.1} ms",
            ms(v[v.len() / 2]),
            ms(*v.last().unwrap())
        );
    }
    println!("  target: attach resumed within 300 ms of the node serving");
    drop(browser);
    drop(pane);
    let data = node.data.clone();
    drop(node);
    common::kill_keeper(&data);
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Connects as soon as the node takes it, subscribes, types `echo MARKER`
/// and returns when the echo's output came back.
async fn fresh_client_echo(target: &Target, session: &str, marker: &str) -> Instant {
    within(PATIENCE, "a fresh client's echo", async {
        let mut c = loop {
            if let Ok(Ok(c)) =
                tokio::time::timeout(Duration::from_millis(500), Client::connect(target)).await
            {
                break c;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let reply = loop {
            let reply = c
                .request(|id| ClientMsg::Subscribe {
                    id,
                    session: session.into(),
                    from_seq: None,
                    window: Some(1 << 20),
                    scrollback: Some(0),
                })
                .await
                .unwrap();
            if matches!(reply, ServerMsg::Subscribed { .. }) {
                break reply;
            }
            // The session is not back from the keeper yet.
            poll_pause().await;
        };
        drop(reply);
        c.send(&ClientMsg::Input {
            session: session.into(),
            data: format!("echo {marker}\n").into_bytes(),
        })
        .await
        .unwrap();
        let mut seen = String::new();
        loop {
            if let ServerMsg::Output { data, .. } = c.recv().await.unwrap() {
                seen.push_str(&String::from_utf8_lossy(&data));
                if seen.contains(&format!("\n{marker}")) {
                    return Instant::now();
                }
            }
        }
    })
    .await
}

async fn log_in(b: &Browser, url: &str) {
    b.goto(url).await;
    b.find("#token").await.send_keys(OPERATOR).await.unwrap();
    b.find("#login button").await.click().await.unwrap();
    b.wait_js(
        "the console to log in",
        "return window.termesh.ready && !document.getElementById('main').hidden",
    )
    .await;
}
