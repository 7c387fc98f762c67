//! The peer mesh's QUIC endpoint with real certificates over loopback UDP:
//! nodes of one CA connect and learn each other's names; a node of another
//! CA, a certificate for the wrong name, or no certificate at all is
//! refused (a foreign node may see its connect succeed: it fails on its
//! first stream). An HTTPS certificate of the same CA cannot stand in for
//! a node, neither answering a dial nor dialing; node certificates from
//! before mesh names still link.

use std::sync::Arc;
use std::time::Duration;

use termesh_transport::peer::certs::Ca;
use termesh_transport::peer::certs::CertError;
use termesh_transport::peer::tls::{peer_chain, provider, Identity, NameForm, ALPN};
use termesh_transport::peer::{frame, PeerMsg, PEER_PROTO};

const PATIENCE: Duration = Duration::from_secs(30);

fn identity(ca: &Ca, name: &str) -> Identity {
    let issued = ca.issue(name).unwrap();
    Identity::from_pem(&ca.pem().cert_pem, &issued.cert_pem, &issued.key_pem).unwrap()
}

fn hello(node: &str) -> PeerMsg {
    PeerMsg::Hello {
        cluster: "c1".into(),
        node: node.into(),
        proto: PEER_PROTO,
        boot: "boot".into(),
        upto: None,
    }
}

/// Accepts one connection and one stream; answers a hello with a hello.
/// Returns the name the peer's certificate carries (of `names`).
async fn serve_one(
    endpoint: quinn::Endpoint,
    me: Identity,
    names: Vec<&'static str>,
) -> Result<String, String> {
    let incoming = endpoint.accept().await.ok_or("endpoint closed")?;
    let conn = incoming.await.map_err(|e| format!("handshake: {e}"))?;
    let chain = peer_chain(&conn).ok_or("no peer certificate")?;
    let name = me
        .name_of(&chain, &names)
        .ok_or("the certificate names no configured node")?;
    let (mut send, mut recv) = conn.accept_bi().await.map_err(|e| format!("stream: {e}"))?;
    let got: PeerMsg = frame::read(&mut recv)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no hello")?;
    assert_eq!(got, hello(name));
    frame::write(&mut send, &hello("b"))
        .await
        .map_err(|e| e.to_string())?;
    send.finish().map_err(|e| e.to_string())?;
    // Wait until the peer has read the reply.
    let _ = tokio::time::timeout(PATIENCE, conn.closed()).await;
    Ok(name.to_string())
}

/// Dials `addr` as node `b`'s peer and exchanges hellos on a first stream.
async fn dial(
    endpoint: &quinn::Endpoint,
    addr: std::net::SocketAddr,
    me: &str,
) -> Result<PeerMsg, String> {
    let conn = endpoint
        .connect(addr, "b")
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| format!("open: {e}"))?;
    frame::write(&mut send, &hello(me))
        .await
        .map_err(|e| format!("write: {e}"))?;
    let reply = frame::read(&mut recv)
        .await
        .map_err(|e| format!("read: {e}"))?
        .ok_or("the stream ended")?;
    conn.close(0u32.into(), b"done");
    Ok(reply)
}

fn local() -> std::net::SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_of_one_ca_connect_and_learn_each_others_names() {
    let ca = Ca::new("c1").unwrap();
    let (a, b) = (identity(&ca, "a"), identity(&ca, "b"));
    a.check_names("a").unwrap();
    assert!(a.check_names("b").unwrap_err().contains("`b`"));
    let server = b.endpoint(local()).unwrap();
    let addr = server.local_addr().unwrap();
    let served = tokio::spawn(serve_one(server, b, vec!["a", "c"]));
    let client = a.endpoint(local()).unwrap();
    let reply = tokio::time::timeout(PATIENCE, dial(&client, addr, "a"))
        .await
        .unwrap();
    assert_eq!(reply.unwrap(), hello("b"));
    assert_eq!(served.await.unwrap().unwrap(), "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_another_ca_fails_on_its_first_stream() {
    let ca = Ca::new("c1").unwrap();
    let other = Ca::new("c1").unwrap();
    let b = identity(&ca, "b");
    // Its own certificate comes from another CA, but it trusts ours: its
    // connect may complete before the server has judged its certificate.
    let issued = other.issue("a").unwrap();
    let foreign =
        Identity::from_pem(&ca.pem().cert_pem, &issued.cert_pem, &issued.key_pem).unwrap();
    assert!(foreign.check_names("a").is_err(), "config check catches it");
    let server = b.endpoint(local()).unwrap();
    let addr = server.local_addr().unwrap();
    let served = tokio::spawn(serve_one(server, b, vec!["a"]));
    let client = foreign.endpoint(local()).unwrap();
    let result = tokio::time::timeout(PATIENCE, dial(&client, addr, "a"))
        .await
        .unwrap();
    let err = result.expect_err("a foreign certificate gets nowhere");
    assert!(
        !err.starts_with("connect"),
        "connect may succeed; the stream fails: {err}"
    );
    let served = served.await.unwrap().unwrap_err();
    assert!(served.starts_with("handshake"), "{served}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_refused() {
    let ca = Ca::new("c1").unwrap();
    let b = identity(&ca, "b");
    // A valid certificate of the cluster, but for `x`, not a configured node.
    let x = identity(&ca, "x");
    let server = b.endpoint(local()).unwrap();
    let addr = server.local_addr().unwrap();
    let served = tokio::spawn(serve_one(server, b, vec!["a"]));
    let client = x.endpoint(local()).unwrap();
    let _ = tokio::time::timeout(PATIENCE, dial(&client, addr, "a"))
        .await
        .unwrap();
    let err = served.await.unwrap().unwrap_err();
    assert!(err.contains("names no configured node"), "{err}");

    // Dialing `b` at an address where `c` answers fails in the handshake.
    let c = identity(&ca, "c");
    let server = c.endpoint(local()).unwrap();
    let addr = server.local_addr().unwrap();
    let _served = tokio::spawn(serve_one(server, c, vec!["a"]));
    let client = identity(&ca, "a").endpoint(local()).unwrap();
    let err = tokio::time::timeout(PATIENCE, dial(&client, addr, "a"))
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.starts_with("connect"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_port_refuses_a_client_without_a_certificate() {
    let ca = Ca::new("c1").unwrap();
    let b = identity(&ca, "b");
    let server = b.endpoint(local()).unwrap();
    let addr = server.local_addr().unwrap();
    let served = tokio::spawn(serve_one(server, b, vec!["a"]));
    // A client that trusts the CA but has no certificate of its own.
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(
            Identity::from_pem(
                &ca.pem().cert_pem,
                &ca.issue("z").unwrap().cert_pem,
                &ca.issue("z").unwrap().key_pem,
            )
            .unwrap()
            .cas[0]
                .clone(),
        )
        .unwrap();
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut client = quinn::Endpoint::client(local()).unwrap();
    client.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let result = tokio::time::timeout(PATIENCE, dial(&client, addr, "anon"))
        .await
        .unwrap();
    assert!(
        result.is_err(),
        "a client without a certificate got an answer"
    );
    let err = served.await.unwrap().unwrap_err();
    assert!(err.starts_with("handshake"), "{err}");
}

/// `http.pem`/`http.key` as `cluster init --http-tls` writes them for `b`.
fn https_identity(ca: &Ca, name: &str) -> Identity {
    let names = [
        "127.0.0.1".to_string(),
        name.to_string(),
        "localhost".into(),
    ];
    let issued = ca.issue_http(&names).unwrap();
    Identity::from_pem(&ca.pem().cert_pem, &issued.cert_pem, &issued.key_pem).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_https_certificate_cannot_answer_for_its_node() {
    let ca = Ca::new("c1").unwrap();
    let http_b = https_identity(&ca, "b");
    assert!(http_b.check_names("b").is_err(), "config check catches it");
    // Whoever holds http.key answers on b's QUIC address.
    let server = http_b.endpoint(local()).unwrap();
    let addr = server.local_addr().unwrap();
    let _served = tokio::spawn(serve_one(server, http_b, vec!["a"]));
    let client = identity(&ca, "a").endpoint(local()).unwrap();
    let err = tokio::time::timeout(PATIENCE, dial(&client, addr, "a"))
        .await
        .unwrap()
        .expect_err("the dialer took an HTTPS certificate for node b");
    assert!(err.starts_with("connect"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_https_certificate_cannot_dial_as_its_node() {
    let ca = Ca::new("c1").unwrap();
    let a = identity(&ca, "a");
    let server = a.endpoint(local()).unwrap();
    let addr = server.local_addr().unwrap();
    let served = tokio::spawn(serve_one(server, a, vec!["b"]));
    let client = https_identity(&ca, "b").endpoint(local()).unwrap();
    let result = tokio::time::timeout(PATIENCE, client.connect(addr, "a").unwrap())
        .await
        .unwrap();
    if let Ok(conn) = result {
        // TLS 1.3: the client may think itself connected until the server
        // has judged its certificate.
        let _ = tokio::time::timeout(PATIENCE, conn.closed()).await.unwrap();
    }
    let err = served.await.unwrap().unwrap_err();
    assert!(err.starts_with("handshake"), "{err}");
}

#[test]
fn an_https_certificate_never_carries_a_mesh_name() {
    let ca = Ca::new("c1").unwrap();
    let names = ["B.Mesh.Termesh.Invalid".to_string()];
    assert!(matches!(
        ca.issue_http(&names),
        Err(CertError::MeshName(n)) if n == names[0]
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_certificates_from_before_mesh_names_still_link() {
    let ca = Ca::new("c1").unwrap();
    let legacy = |name: &str| {
        let issued = ca.issue_legacy(name).unwrap();
        Identity::from_pem(&ca.pem().cert_pem, &issued.cert_pem, &issued.key_pem).unwrap()
    };
    let (a, b) = (legacy("a"), legacy("b"));
    assert_eq!(a.check_names("a").unwrap(), NameForm::Legacy);
    assert_eq!(identity(&ca, "a").check_names("a").unwrap(), NameForm::Mesh);
    let server = b.endpoint(local()).unwrap();
    let addr = server.local_addr().unwrap();
    let served = tokio::spawn(serve_one(server, b, vec!["a", "c"]));
    let client = a.endpoint(local()).unwrap();
    let reply = tokio::time::timeout(PATIENCE, dial(&client, addr, "a"))
        .await
        .unwrap();
    assert_eq!(reply.unwrap(), hello("b"));
    assert_eq!(served.await.unwrap().unwrap(), "a");
}
