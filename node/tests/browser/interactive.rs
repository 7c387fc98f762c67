//! Interactive first in the console: a flood shown beside a terminal you
//! type into, on the page's one WebSocket. The browser answers the
//! node's pings behind the output by itself (so the node knows how much
//! the page has read and holds the rest of the flood behind the typed
//! session's echo), the echo shows, and the flood arrives whole.

use super::*;
use common::wire::metric;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_answers_marks_behind_a_flood_and_shows_it_whole_beside_typing() {
    let _one = ONE_AT_A_TIME.lock().await;
    let node = TestNode::start();
    let flood = node
        .create_with(CreateRequest {
            command: sh(
                "read go; head -c 4000000 /dev/zero | tr '\\0' 'y' | fold -w 100; echo; \
                         echo flood-end; exec sleep 1000",
            ),
            name: Some("flood".into()),
            ..Default::default()
        })
        .await
        .id;
    let cat = node
        .create_with(CreateRequest {
            command: sh("exec cat"),
            name: Some("typed".into()),
            ..Default::default()
        })
        .await
        .id;
    let b = Browser::start(1280, 860).await;
    log_in(&b, &node.url(), OPERATOR, "operator").await;
    open_terminal(&b, &flood).await;
    b.find("#split").await.click().await.unwrap();
    open_terminal(&b, &cat).await;
    let answered = metric(&node.url(), "termesh_output_marks_answered_total").await;
    type_line(&node, &flood, "go").await;
    type_to_cat(&b, &cat, "typed beside a flood").await;
    b.wait_js(
        "the flood's last line on the page",
        &format!("return window.termesh.terms.get('{flood}').lines().some(l => l === 'flood-end')"),
    )
    .await;
    assert!(
        metric(&node.url(), "termesh_output_marks_answered_total").await > answered,
        "the page answered the pings behind the flood"
    );
    assert_eq!(
        metric(&node.url(), "termesh_pongless_connections_total").await,
        0.0,
        "a browser answers pings"
    );
}
