//! Every node serves the console: the page at `/` and the embedded bundle
//! (xterm.js and the app) under `/assets/`, with a content security policy
//! that keeps the page talking to this node only. (The console is driven
//! in a real browser by the browser tests.)

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_serves_the_console_and_its_assets() {
    let node = TestNode::start();
    let base = node.url();
    let got = tokio::task::spawn_blocking(move || {
        ["/", "/assets/app.js", "/assets/app.css"].map(|path| {
            let resp = ureq::get(&format!("{base}{path}")).call().unwrap();
            let csp = resp
                .header("content-security-policy")
                .unwrap_or("")
                .to_string();
            (
                resp.content_type().to_string(),
                csp,
                resp.into_string().unwrap(),
            )
        })
    })
    .await
    .unwrap();
    let [(html_type, csp, html), (js_type, _, js), (css_type, _, css)] = got;
    assert_eq!(html_type, "text/html");
    assert!(
        html.contains("/assets/app.js") && html.contains("Token"),
        "{html}"
    );
    assert!(csp.contains("default-src 'self'"), "{csp}");
    // WebSockets to this node only, and no framing by other pages.
    assert!(csp.contains("connect-src 'self';"), "{csp}");
    assert!(!csp.contains("ws:") && !csp.contains("wss:"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(js_type, "text/javascript");
    // The bundle holds xterm.js and the protocol client.
    assert!(js.len() > 100_000 && js.contains("from_seq") && js.contains("resync_required"));
    assert_eq!(css_type, "text/css");
    assert!(css.contains(".xterm"), "xterm's stylesheet is bundled");
}
