//! The origin check on WebSocket upgrades: a program (no `Origin`), the
//! node's own pages and listed origins may open `/ws` and the raw
//! endpoint; a page from another site is refused with 403 before any
//! token is looked at.

mod common;

use common::*;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

/// The HTTP status of an upgrade of `path` sent with `origin`.
async fn upgrade(node: &TestNode, path: &str, origin: Option<&str>) -> u16 {
    let addr = node.node.addr();
    let mut request = format!("ws://{addr}{path}").into_client_request().unwrap();
    let headers = request.headers_mut();
    headers.insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {VIEWER}")).unwrap(),
    );
    if let Some(origin) = origin {
        headers.insert("origin", HeaderValue::from_str(origin).unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((_, response)) => response.status().as_u16(),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_nodes_own_pages_and_listed_origins_open_websockets() {
    let node = TestNode::start_with(|c| {
        c.http.allowed_origins = vec!["https://console.example.com".into()];
    });
    let session = node.create(&["cat"]).await.id;
    let own = format!("http://{}", node.node.addr());
    for path in ["/ws".to_string(), format!("/sessions/{session}/raw")] {
        assert_eq!(upgrade(&node, &path, None).await, 101, "{path}: a program");
        assert_eq!(
            upgrade(&node, &path, Some(&own)).await,
            101,
            "{path}: own page"
        );
        assert_eq!(
            upgrade(&node, &path, Some("https://console.example.com")).await,
            101,
            "{path}: listed"
        );
        assert_eq!(
            upgrade(&node, &path, Some("https://evil.example")).await,
            403,
            "{path}: another site"
        );
        assert_eq!(
            upgrade(&node, &path, Some("null")).await,
            403,
            "{path}: null"
        );
    }
}
