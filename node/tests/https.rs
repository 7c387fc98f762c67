//! HTTPS and WSS on the HTTP listener: a node with `http.tls_cert` and
//! `http.tls_key` (issued here by a CA, as `cluster init --http-tls` does)
//! serves the CLI, REST and WebSocket over TLS to clients that trust the
//! CA (`--ca`); a client that does not is refused with a certificate
//! error, and plain HTTP to the port gets nothing.

mod common;

use common::binary::BinaryNode;
use common::*;
use termesh_node::client::{Client, Target};
use termesh_transport::peer::certs::Ca;
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg};

fn termesh(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_termesh"))
        .args(args)
        .env_remove("TERMESH_CA")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_serves_https_and_wss_to_clients_that_trust_its_ca() {
    let pki = tempfile::tempdir().unwrap();
    let ca = Ca::new("https-test").unwrap();
    let leaf = ca
        .issue_http(&["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap();
    let (ca_pem, cert, key) = (
        pki.path().join("ca.pem"),
        pki.path().join("http.pem"),
        pki.path().join("http.key"),
    );
    std::fs::write(&ca_pem, ca.pem().cert_pem).unwrap();
    std::fs::write(&cert, leaf.cert_pem).unwrap();
    std::fs::write(&key, leaf.key_pem).unwrap();
    let node = BinaryNode::start(&format!(
        "[http]\ntls_cert = {:?}\ntls_key = {:?}\nrequest_head_timeout = \"1s\"\n",
        cert.display().to_string(),
        key.display().to_string()
    ));
    assert!(node.url.starts_with("https://"), "{}", node.url);
    head_never_sent_over_tls_is_closed(node.addr, &ca_pem).await;
    let ca_arg = ca_pem.display().to_string();

    // The CLI over https (REST) and wss (WebSocket), trusting the CA.
    let (code, out, err) = termesh(&[
        "new", "--url", &node.url, "--token", OPERATOR, "--ca", &ca_arg, "--", "cat",
    ]);
    assert_eq!(code, 0, "{err}");
    let session = out.trim().to_string();
    let (code, out, err) = termesh(&[
        "ls", "--url", &node.url, "--token", OPERATOR, "--ca", &ca_arg,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&session), "{out}");
    let (code, _, err) = termesh(&[
        "nodes", "--url", &node.url, "--token", ADMIN, "--ca", &ca_arg,
    ]);
    assert_eq!(code, 0, "{err}");

    // Without the CA: a clear certificate error, no connection.
    let (code, _, err) = termesh(&["ls", "--url", &node.url, "--token", OPERATOR]);
    assert_ne!(code, 0);
    assert!(err.to_lowercase().contains("certificate"), "{err}");

    // The Rust client: output streams over wss.
    let target = Target {
        url: node.url.clone(),
        token: Some(OPERATOR.into()),
        token_source: "the test".into(),
        ca: Some(ca_pem.clone()),
        looked: Vec::new(),
    };
    let mut c = Client::connect(&target).await.unwrap();
    let req = CreateRequest {
        command: Some(vec![
            "sh".into(),
            "-c".into(),
            "echo over-tls; exec cat".into(),
        ]),
        ..Default::default()
    };
    let id = match c
        .request(|rid| ClientMsg::Create { id: rid, req })
        .await
        .unwrap()
    {
        ServerMsg::Created { session, .. } => session.id,
        other => panic!("{other:?}"),
    };
    let mut s = Stream::new(1 << 20);
    subscribe(&mut c, &id, Some(0), 1 << 20).await.unwrap();
    within(
        PATIENCE,
        "output over wss",
        pump_until(&mut c, &id, &mut s, true, |s| {
            String::from_utf8_lossy(&s.data).contains("over-tls")
        }),
    )
    .await
    .unwrap();

    // Plain HTTP to the TLS port is not served.
    let plain = format!("http://{}/healthz", node.addr);
    let answered = tokio::task::spawn_blocking(move || ureq::get(&plain).call().is_ok())
        .await
        .unwrap();
    assert!(!answered, "plain HTTP must not be served on the TLS port");
}

/// A client that finishes the TLS handshake and then sends no request
/// head is closed once `http.request_head_timeout` (1 s here) has passed.
async fn head_never_sent_over_tls_is_closed(addr: std::net::SocketAddr, ca: &std::path::Path) {
    let config = termesh_transport::https::client(Some(ca)).unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let closed = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let tcp = std::net::TcpStream::connect(addr).unwrap();
        // Bounded: the node should close long before.
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let conn = rustls::ClientConnection::new(config, name).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock).unwrap();
        }
        let opened = std::time::Instant::now();
        let mut buf = [0u8; 256];
        loop {
            match tls.read(&mut buf) {
                Ok(0) => return Some(opened.elapsed()),
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return None,
                // Closed without a close_notify: closed all the same.
                Err(_) => return Some(opened.elapsed()),
            }
        }
    })
    .await
    .unwrap();
    let closed = closed.expect("a TLS connection without a request head outlived 30 s");
    assert!(
        closed < std::time::Duration::from_secs(10),
        "closed only after {closed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_serves_new_https_certificate_files() {
    // A CA rotation (or a renewal) writes new files over the old ones; a
    // reload serves them to the connections made from then on.
    let pki = tempfile::tempdir().unwrap();
    let names = ["127.0.0.1".to_string(), "localhost".to_string()];
    let (old, new) = (Ca::new("old").unwrap(), Ca::new("new").unwrap());
    let path = |f: &str| pki.path().join(f);
    std::fs::write(path("old.pem"), old.pem().cert_pem).unwrap();
    std::fs::write(path("new.pem"), new.pem().cert_pem).unwrap();
    let write_leaf = |ca: &Ca| {
        let leaf = ca.issue_http(&names).unwrap();
        std::fs::write(path("http.pem"), leaf.cert_pem).unwrap();
        std::fs::write(path("http.key"), leaf.key_pem).unwrap();
    };
    write_leaf(&old);
    let node = BinaryNode::start(&format!(
        "[http]\ntls_cert = {:?}\ntls_key = {:?}\n",
        path("http.pem").display().to_string(),
        path("http.key").display().to_string()
    ));
    let ls = |ca: &str| {
        let ca = path(ca).display().to_string();
        termesh(&["ls", "--url", &node.url, "--token", OPERATOR, "--ca", &ca]).0
    };
    assert_eq!(ls("old.pem"), 0);
    assert_ne!(ls("new.pem"), 0);
    write_leaf(&new);
    let (code, out, err) = termesh(&[
        "config",
        "reload",
        "--url",
        &node.url,
        "--token",
        ADMIN,
        "--ca",
        &path("old.pem").display().to_string(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(ls("new.pem"), 0, "the new certificate is served");
    assert_ne!(ls("old.pem"), 0, "the old one is not");
}
