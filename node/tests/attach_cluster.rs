//! `termesh attach` in a cluster: the renderer draws a session owned by
//! another node (streamed through this node's mirror), and `attach -d` on
//! the owner ends an attach made through another node.

mod common;

use common::cluster::{create, Cluster};
use common::tmux::Tmux;

const BIN: &str = env!("CARGO_BIN_EXE_termesh");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_d_on_the_owner_ends_an_attach_through_a_mirror() {
    let cluster = Cluster::start(&["a", "b"]);
    let session = create(
        &cluster,
        0,
        "a",
        "PS1='S> ' exec bash --norc --noprofile -i",
    )
    .await;
    let pane = |i: usize, cols: u16, rows: u16, args: &str| {
        let target = cluster.target(i);
        Tmux::start(
            cols,
            rows,
            &format!("{BIN} attach {args} {session}"),
            &[
                ("TERMESH_URL", target.url.as_str()),
                ("TERMESH_TOKEN", target.token.as_deref().unwrap()),
            ],
        )
    };
    // Through b's mirror, in a larger pane: drawn at the session's size.
    let remote = pane(1, 130, 40, "--read-only");
    remote.wait_for("S>").await;
    remote
        .wait_until("the session's edge", |t| t.contains('┘'))
        .await;
    let taker = pane(0, 80, 24, "-d");
    assert_eq!(remote.exit_code().await, 0);
    assert!(
        remote
            .text()
            .contains("another terminal took it (attach -d)"),
        "{}",
        remote.text()
    );
    taker.type_text("echo owner-$((20+22))");
    taker.keys(&["Enter"]);
    taker.wait_for("owner-42").await;
    taker.keys(&["C-]", "d"]);
    assert_eq!(taker.exit_code().await, 0);
}
