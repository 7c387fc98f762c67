//! The console's search: `grep` over every session's stored output, each
//! hit listed with its session and line (a line far behind the ring, from
//! the output log), and a hit opens its session's terminal.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_lists_hits_from_stored_output_and_a_hit_opens_its_session() {
    let _one = ONE_AT_A_TIME.lock().await;
    let node = TestNode::start_with(|c| c.session.ring_bytes = 64 << 10);
    let far = node
        .create_with(CreateRequest {
            command: sh("echo 'build 42 failed: missing libfoo'; \
                         head -c 2000000 /dev/zero | tr '\\0' 'z' | fold -w 100; exec sleep 1000"),
            name: Some("builder".into()),
            ..Default::default()
        })
        .await
        .id;
    let other = node
        .create(&["sh", "-c", "echo all good; exec sleep 1000"])
        .await
        .id;
    wait_output(&node, &other, "all good").await;
    let b = Browser::start(1200, 800).await;
    log_in(&b, &node.url(), VIEWER, "viewer").await;
    b.wait_js(
        "the flood stored",
        &format!("const s = window.termesh.sessions.get('{far}'); return s && s.last_seq > 20"),
    )
    .await;
    let field = b.find("#search input").await;
    field.send_keys("failed: missing").await.unwrap();
    b.find("#search button").await.click().await.unwrap();
    b.wait_js(
        "one hit, its session and line, and the count",
        &format!(
            "const h = [...document.querySelectorAll('#hits li')]; \
             return h.length === 1 && h[0].dataset.session === '{far}' \
               && h[0].querySelector('code').textContent === 'build 42 failed: missing libfoo' \
               && h[0].querySelector('a').textContent === 'builder@t1' \
               && document.getElementById('search-status').textContent.startsWith('1 hit in')"
        ),
    )
    .await;
    b.find("#hits li a").await.click().await.unwrap();
    b.wait_js(
        "the hit's session open",
        &format!("const t = window.termesh.terms.get('{far}'); return t && t.lastSeq !== null"),
    )
    .await;
    // A bad pattern says why.
    let field = b.find("#search input").await;
    field.clear().await.unwrap();
    field.send_keys("(").await.unwrap();
    b.find("#search button").await.click().await.unwrap();
    b.wait_js(
        "the refusal",
        "return document.getElementById('search-status').textContent.includes('regex')",
    )
    .await;
}
