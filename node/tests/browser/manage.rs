//! browser: manage.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_manages_sessions_from_the_table_and_a_flood_is_acked_through() {
    let _one = ONE_AT_A_TIME.lock().await;
    let node = TestNode::start();
    let s = node
        .create_with(CreateRequest {
            command: sh("for i in $(seq 1 300); do echo early-$i; done; exec sleep 600"),
            ..Default::default()
        })
        .await;
    wait_output(&node, &s.id, "early-300").await;
    let b = Browser::start(1280, 860).await;
    log_in(&b, &node.url(), OPERATOR, "operator").await;

    // A fresh attach brings the history above the screen.
    open_terminal(&b, &s.id).await;
    let shown = lines(&b, &s.id).await;
    for line in ["early-1", "early-150", "early-300"] {
        assert!(shown.iter().any(|l| l == line), "{line} in {shown:?}");
    }

    row_button(&b, &s.id, "rename").await;
    answer_dialog(&b, Some("renamed-one")).await;
    row_text(&b, &s.id, "the new name", "renamed-one").await;
    row_button(&b, &s.id, "tag").await;
    answer_dialog(&b, Some("red, blue")).await;
    row_text(&b, &s.id, "the tags", "red blue").await;
    let info = node.info(&s.id).await.unwrap();
    assert_eq!(info.name.as_deref(), Some("renamed-one"));
    assert_eq!(info.tags, ["red", "blue"]);

    // Revive on a running session says why it does nothing.
    row_button(&b, &s.id, "revive").await;
    let said = notice_text(&b).await;
    assert!(said.contains("is running"), "{said}");

    row_button(&b, &s.id, "kill").await;
    row_text(&b, &s.id, "the session killed", "exit 143").await;
    // Revived: the same id runs again, its new output after the old in the
    // open terminal, which is never cleared.
    row_button(&b, &s.id, "revive").await;
    row_text(&b, &s.id, "the session revived", "running").await;
    b.wait_js(
        "the revived output after the old",
        &format!(
            "const l = window.termesh.terms.get('{}').lines(); \
             return l.filter(x => x === 'early-300').length === 2",
            s.id
        ),
    )
    .await;
    let resyncs = b
        .js(&format!(
            "return window.termesh.terms.get('{}').resyncs",
            s.id
        ))
        .await;
    assert_eq!(resyncs, serde_json::json!(0));

    row_button(&b, &s.id, "remove").await;
    answer_dialog(&b, None).await;
    b.wait_js(
        "the row gone",
        &format!(
            "return !document.querySelector(\"#sessions tr[data-session='{}']\")",
            s.id
        ),
    )
    .await;
    assert!(node.info(&s.id).await.is_none(), "removed on the node");

    // More output than the 1 MiB window: it gets through only if the page
    // acks what xterm has rendered.
    let flood = node
        .create_with(CreateRequest {
            command: sh("read go; seq 1 200000; echo flood-done; exec sleep 600"),
            ..Default::default()
        })
        .await;
    row_text(&b, &flood.id, "the flood's row", "").await;
    open_terminal(&b, &flood.id).await;
    type_line(&node, &flood.id, "").await;
    b.wait_js(
        "the end of the flood in the page",
        &format!(
            "const l = window.termesh.terms.get('{}').lines(); \
             const i = l.indexOf('flood-done'); return i > 0 && l[i - 1] === '200000'",
            flood.id
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_works_over_https_and_wss() {
    use base64::Engine;
    use sha2::Digest;
    let _one = ONE_AT_A_TIME.lock().await;
    let pki = tempfile::tempdir().unwrap();
    let ca = termesh_transport::peer::certs::Ca::new("browser-https").unwrap();
    let leaf = ca.issue_http(&["127.0.0.1".to_string()]).unwrap();
    let (cert, key) = (pki.path().join("http.pem"), pki.path().join("http.key"));
    std::fs::write(&cert, &leaf.cert_pem).unwrap();
    std::fs::write(&key, &leaf.key_pem).unwrap();
    let node = common::binary::BinaryNode::start(&format!(
        "[http]\ntls_cert = {:?}\ntls_key = {:?}\n",
        cert.display().to_string(),
        key.display().to_string()
    ));
    assert!(node.url.starts_with("https://"), "{}", node.url);
    // A browser that does not trust the certificate gets no console.
    {
        let untrusting = Browser::start(800, 600).await;
        let _ = untrusting.client.goto(&format!("{}/", node.url)).await;
        let page = untrusting
            .js("return !!document.getElementById('login')")
            .await;
        assert_eq!(page, serde_json::json!(false), "an untrusted certificate");
    }
    // Chromium trusts exactly this key (its SPKI hash), not any certificate.
    let spki = rcgen::KeyPair::from_pem(&leaf.key_pem)
        .unwrap()
        .public_key_der();
    let pin = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(&spki));
    let b = Browser::start_with(
        1280,
        860,
        &[format!("--ignore-certificate-errors-spki-list={pin}")],
    )
    .await;
    log_in(&b, &format!("{}/", node.url), OPERATOR, "operator").await;
    let over = b
        .js("return [location.protocol, window.termesh.ws.url.split(':')[0]]")
        .await;
    assert_eq!(over, serde_json::json!(["https:", "wss"]));

    let id = create_from_form(&b, "echo over-tls; exec cat", "tls").await;
    open_terminal(&b, &id).await;
    type_to_cat(&b, &id, "typed over wss").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_in_the_console_its_nodes_a_remote_terminal_and_a_node_lost() {
    use common::cluster::{create, Cluster};
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start(&["a", "b", "c"]);
    let on_c = create(&cluster, 0, "c", "echo started-on-c; exec cat").await;
    let b = Browser::start(1280, 860).await;
    let page = cluster.target(1).url;
    log_in(&b, &format!("{page}/"), &cluster.token, "admin").await;

    // Every node, as b sees it; the session of c, through b.
    let node_rows = "[...document.querySelectorAll('#nodes tbody tr')]\
        .map(r => [...r.cells].map(c => c.textContent))";
    b.wait_js(
        "three nodes up",
        &format!("const r = {node_rows}; return r.length === 3 && r.every(c => c[1] === 'up')"),
    )
    .await;
    let names = b
        .js(&format!("return {node_rows}.map(c => c[0]).sort()"))
        .await;
    assert_eq!(names, serde_json::json!(["a", "b *", "c"]));
    row_text(&b, &on_c, "c's session in b's table", "running").await;
    open_terminal(&b, &on_c).await;
    type_to_cat(&b, &on_c, "typed through b").await;
    let shown = lines(&b, &on_c).await;
    assert!(shown.iter().any(|l| l == "started-on-c"), "{shown:?}");

    // c dies: b's page shows the node down and its session unreachable.
    cluster.kill_node(2);
    b.wait_js(
        "c down in the nodes table",
        &format!("return {node_rows}.find(c => c[0] === 'c')[1] !== 'up'"),
    )
    .await;
    row_text(&b, &on_c, "c's session unreachable", "unreachable").await;
    b.wait_js(
        "the terminal's tab marked",
        &format!("return window.termesh.terms.get('{on_c}').tab.classList.contains('stale-note')"),
    )
    .await;
    b.screenshot(&docs_path("console-cluster.png")).await;
}
