//! `termesh attach` over a link that fails, driven in tmux through a proxy
//! the test controls: the status row while the link is down (and the row
//! it covered given back after), reconnects paced by backoff, keys typed
//! offline delivered, a silent link dropped and resumed, and a session
//! gone after a node restart ending the attach instead of a retry loop.

mod common;

use std::time::Duration;

use common::binary::BinaryNode;
use common::proxy::Proxy;
use common::tmux::Tmux;
use common::*;
use termesh_transport::CreateRequest;

const BIN: &str = env!("CARGO_BIN_EXE_termesh");

fn shell() -> CreateRequest {
    CreateRequest {
        command: Some(vec![
            "bash".into(),
            "--norc".into(),
            "--noprofile".into(),
            "-i".into(),
        ]),
        env: Some([("PS1".to_string(), "PROMPT> ".to_string())].into()),
        cols: Some(80),
        rows: Some(24),
        ..Default::default()
    }
}

fn attach_via(proxy: &Proxy, token: &str, session: &str) -> Tmux {
    let url = format!("http://{}", proxy.addr);
    Tmux::start(
        80,
        24,
        &format!("{BIN} attach {session}"),
        &[("TERMESH_URL", &url), ("TERMESH_TOKEN", token)],
    )
}

fn node_with_ping(interval: Duration) -> TestNode {
    TestNode::start_with(|c| c.ws.ping_interval = interval)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_link_shows_in_the_status_row_backs_off_and_resumes() {
    let node = node_with_ping(Duration::from_secs(1));
    let session = node.create_with(shell()).await.id;
    let proxy = Proxy::start(node.node.addr()).await;
    let pane = attach_via(&proxy, OPERATOR, &session);
    pane.wait_for("PROMPT>").await;
    // Fill the screen so its bottom row holds the prompt.
    pane.type_text("seq 101 140");
    pane.keys(&["Enter"]);
    pane.wait_until("a full screen", |t| t.lines().last() == Some("PROMPT>"))
        .await;

    proxy.refuse(true);
    assert!(proxy.cut() >= 1, "the attach went through the proxy");
    let cut_at = proxy.accepted();
    let screen = pane.wait_for("· link down").await;
    let rows: Vec<&str> = screen.lines().collect();
    // The detach hint first, then the link's state.
    assert!(
        rows[23].starts_with("[termesh] ^] d detaches · link down"),
        "{screen}"
    );
    // The view moved up a row to keep the prompt (the cursor) in sight;
    // nothing scrolled.
    assert_eq!(rows[22], "PROMPT>", "{screen}");
    assert_eq!(rows[21], "140", "{screen}");
    pane.type_text("echo typed-$((6*7))");
    pane.keys(&["Enter"]);

    // Measured over time on purpose: how often the client comes back while
    // the node cannot be reached. A tight loop would be thousands.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let retries = proxy.accepted() - cut_at;
    println!("reconnect attempts in 10 s against a refusing node: {retries}");
    assert!((2..=12).contains(&retries), "{retries} reconnects in 10 s");
    let status = pane.screen()[23].clone();
    assert!(status.contains("retry"), "{status}");

    proxy.refuse(false);
    let screen = pane
        .wait_until("the stream back and the typed keys run", |t| {
            t.contains("typed-42") && !t.contains("[termesh]")
        })
        .await;
    assert_eq!(
        screen.lines().filter(|l| *l == "140").count(),
        1,
        "rows given back as they were: {screen}"
    );
    assert!(
        screen.lines().any(|l| l == "PROMPT> echo typed-$((6*7))"),
        "{screen}"
    );
    let info = node.info(&session).await.unwrap();
    assert_eq!(info.viewers, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_link_is_dropped_and_the_stream_resumes() {
    // Probes after 1 s of silence, says so after 2 s, gives up after 6 s.
    let node = node_with_ping(Duration::from_secs(3));
    let session = node.create_with(shell()).await.id;
    let proxy = Proxy::start(node.node.addr()).await;
    let pane = attach_via(&proxy, OPERATOR, &session);
    pane.wait_for("PROMPT>").await;
    let before = proxy.accepted();
    // The link goes quiet: bytes held both ways, sockets open, no error.
    proxy.stall(true);
    pane.wait_for("· no word from the node").await;
    pane.type_text("echo after-stall-$((5*5))");
    pane.keys(&["Enter"]);
    pane.wait_until("a new connection resuming the stream", |t| {
        t.contains("after-stall-25") && !t.contains("[termesh]")
    })
    .await;
    assert_eq!(proxy.accepted(), before + 1, "one reconnect");
    proxy.stall(false);
}

/// A node with `config`, a shell on it, and an attach to it through a
/// proxy, at its prompt.
async fn attached_shell(config: &str) -> (BinaryNode, Proxy, Tmux) {
    let node = BinaryNode::start(config);
    let target = node.target(OPERATOR);
    let session = termesh_node::client::commands::new(&target, shell())
        .await
        .unwrap()
        .id;
    let proxy = Proxy::start(node.addr).await;
    let pane = attach_via(&proxy, OPERATOR, &session);
    pane.wait_for("PROMPT>").await;
    (node, proxy, pane)
}

/// Attaches, restarts the node with `config`, and returns what the
/// attach printed once it ended (with exit code 1, without hammering).
async fn restart_under_attach(config: &'static str) -> String {
    let (node, proxy, pane) = attached_shell(config).await;
    let before = proxy.accepted();
    let node = tokio::task::spawn_blocking(move || node.restart(config))
        .await
        .unwrap();
    assert_eq!(pane.exit_code().await, 1);
    let text = pane.text();
    let attempts = proxy.accepted() - before;
    println!("connections to the restarted node before the attach gave up: {attempts}");
    assert!(attempts <= 6, "{attempts} connections to a restarted node");
    drop(node);
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_goes_on_across_its_node_s_restart() {
    // The program runs on under the node's PTY keeper: the attach
    // reconnects and the same shell answers.
    let (node, _proxy, pane) = attached_shell("").await;
    pane.type_text("echo before-$$\n");
    let before = pane
        .wait_until("the shell's pid", |t| t.contains("\nbefore-"))
        .await;
    let pid = before
        .split("\nbefore-")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    let node = tokio::task::spawn_blocking(move || node.restart(""))
        .await
        .unwrap();
    // From the node serving again (restart returns then) to the attach
    // showing the shell's answer to keys typed at once: printed, not
    // asserted (a figure for issue 33's reconnect).
    let serving = std::time::Instant::now();
    pane.type_text("echo after-$$\n");
    let text = pane
        .wait_until("the same shell to answer after the restart", |t| {
            t.contains(&format!("after-{pid}"))
        })
        .await;
    println!(
        "the attach resumed and echoed {:.0} ms after the node served again",
        serving.elapsed().as_secs_f64() * 1000.0
    );
    assert!(!text.contains("was lost"), "{text}");
    drop(node);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lost_in_a_node_restart_ends_the_attach() {
    // Without a keeper the shell dies with the node.
    let text = restart_under_attach(binary::NO_KEEPER).await;
    assert!(text.contains("was lost"), "{text}");
    // The screen stays, above the note.
    assert!(text.contains("PROMPT>"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_gone_after_a_restart_without_a_store_ends_the_attach() {
    let text = restart_under_attach("[store]\nenabled = false\n").await;
    assert!(text.contains("no longer exists"), "{text}");
}
