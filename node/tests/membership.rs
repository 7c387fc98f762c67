//! Membership changes on a running cluster (issue 20): three real nodes, a
//! viewer on b following a session on a throughout; `cluster add-node`
//! writes d and edits a, b and c's configs, a reload on each applies it,
//! d starts: every node lists four nodes up and sees d's sessions, the
//! viewer saw no hole, no node restarted. Then `cluster remove-node` the
//! same way.

mod common;

use common::cluster::{connect, create, free_port, Cluster};
use common::*;
use serde_json::Value;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, ServerMsg, SessionInfo};

/// Counts up, a line every 20 ms.
const COUNTER: &str =
    "stty -onlcr -echo; i=0; while true; do i=$((i+1)); echo $i; sleep 0.02; done";

/// How long membership may take to settle (the issue's bound).
const SETTLE: std::time::Duration = std::time::Duration::from_secs(15);

async fn sessions(cluster: &Cluster, i: usize) -> Vec<SessionInfo> {
    let mut c = connect(cluster, i).await;
    match c.request(ClientMsg::list).await.unwrap() {
        ServerMsg::Sessions { sessions, .. } => sessions,
        other => panic!("{other:?}"),
    }
}

/// The names node `i` lists, each with its state.
fn node_states(cluster: &Cluster, i: usize) -> Vec<(String, String)> {
    let list: Vec<Value> = tokio::task::block_in_place(|| cluster.nodes_api(i));
    let mut out: Vec<(String, String)> = list
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap_or_default().to_string(),
                n["state"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Reads the viewer's stream while `until` is not yet true (bounded by
/// `SETTLE`), so it is followed throughout.
async fn follow_until<F, Fut>(c: &mut Client, session: &str, s: &mut Stream, what: &str, until: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = std::time::Instant::now();
    loop {
        let before = s.last_seq;
        within(
            PATIENCE,
            "the viewer's next lines",
            pump_until(c, session, s, true, |s| s.last_seq > before),
        )
        .await
        .unwrap();
        if until().await {
            println!("{what}: {:?}", started.elapsed());
            return;
        }
        assert!(started.elapsed() < SETTLE, "{what}: not within {SETTLE:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joins_and_leaves_a_running_cluster() {
    let mut cluster = Cluster::start(&["a", "b", "c"]);
    let pids: Vec<u32> = (0..3).map(|i| cluster.pid(i)).collect();
    let session = create(&cluster, 0, "a", COUNTER).await;
    let mut viewer = connect(&cluster, 1).await;
    let mut s = Stream::new(1 << 20);
    subscribe(&mut viewer, &session, Some(0), 1 << 20)
        .await
        .unwrap();

    // d joins: signed by the cluster's CA, added to every config.
    let (quic, http) = (free_port("127.0.0.4"), free_port("127.0.0.4"));
    let spec = format!("d,quic=127.0.0.4:{quic},http=127.0.0.4:{http}");
    let folder = cluster.folder();
    let folder_text = folder.display().to_string();
    let said = cluster.termesh(&[
        "cluster",
        "add-node",
        "--dir",
        &folder_text,
        "--node",
        &spec,
    ]);
    assert!(said.contains("config reload"), "{said}");
    for i in 0..3 {
        let text = std::fs::read_to_string(&cluster.nodes[i].config).unwrap();
        assert!(text.contains("name = \"d\""), "{text}");
        assert!(
            text.contains("written by `termesh cluster init`"),
            "comments stay: {text}"
        );
    }
    for i in 0..3 {
        let said = cluster.reload(i);
        assert!(said.contains("linking to: d"), "{said}");
    }
    let d = cluster.add_member(
        "d",
        format!("127.0.0.4:{http}").parse().unwrap(),
        folder.join("d").join("termesh.toml"),
    );
    let on_d = create(&cluster, d, "d", "echo on-d; exec sleep 100000").await;
    let all_up = |i: usize| {
        let states = node_states(&cluster, i);
        states.len() == 4 && states.iter().all(|(_, state)| state == "up")
    };
    for i in 0..4 {
        let cluster = &cluster;
        let on_d = &on_d;
        follow_until(
            &mut viewer,
            &session,
            &mut s,
            "four nodes up, d's session seen",
            || async move { all_up(i) && sessions(cluster, i).await.iter().any(|x| x.id == *on_d) },
        )
        .await;
    }

    // d leaves: out of every config, reloaded, stopped.
    let said = cluster.termesh(&["cluster", "remove-node", "--dir", &folder_text, "d"]);
    assert!(said.contains("REMOVED"), "{said}");
    assert!(folder.join("d").join("REMOVED").exists());
    for i in 0..3 {
        let said = cluster.reload(i);
        assert!(said.contains("no longer linked to: d"), "{said}");
    }
    cluster.stop_node(d);
    for i in 0..3 {
        let cluster = &cluster;
        let on_d = &on_d;
        follow_until(
            &mut viewer,
            &session,
            &mut s,
            "three nodes, d's session gone",
            || async move {
                let states = node_states(cluster, i);
                states.len() == 3
                    && states
                        .iter()
                        .all(|(name, state)| name != "d" && state == "up")
                    && !sessions(cluster, i).await.iter().any(|x| x.id == *on_d)
            },
        )
        .await;
    }
    // Its name is refused until a CA rotation: its old certificate is
    // still of the cluster's CA.
    let http_again = free_port("127.0.0.4");
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_termesh"))
        .args(["cluster", "add-node", "--dir", &folder_text, "--node"])
        .arg(format!(
            "d,quic=127.0.0.4:{},http=127.0.0.4:{http_again}",
            free_port("127.0.0.4")
        ))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success() && said.contains("rotate-ca"),
        "{said}"
    );
    let now: Vec<u32> = (0..3).map(|i| cluster.pid(i)).collect();
    assert_eq!(now, pids, "no node restarted");
    // `Stream::apply` checked every seq: no hole, and no resync either.
    assert_eq!((s.resyncs, s.snapshots.len()), (0, 0));
    assert!(
        !s.links.iter().any(|(kind, _)| *kind == "unreachable"),
        "the viewer never saw its session unreachable: {:?}",
        s.links
    );
}

/// Restarts node c (it reads its certificate files again) and follows the
/// viewer until every node has every link up, b's to c formed anew.
async fn restart_c(
    cluster: &mut Cluster,
    (viewer, session, s): (&mut Client, &str, &mut Stream),
    what: &str,
) {
    let b_to_c = "termesh_peer_links_total{node=\"b\",peer=\"c\"}";
    let links_before = cluster.metric(1, b_to_c);
    cluster.stop_node(2);
    cluster.start_node(2);
    let cluster = &*cluster;
    for i in 0..3 {
        follow_until(viewer, session, s, what, || async move {
            let states = node_states(cluster, i);
            states.len() == 3
                && states.iter().all(|(_, state)| state == "up")
                && cluster.metric(1, b_to_c) > links_before
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ca_is_rotated_node_by_node_and_no_link_is_lost() {
    let mut cluster = Cluster::start(&["a", "b", "c"]);
    let session = create(&cluster, 0, "a", COUNTER).await;
    let mut viewer = connect(&cluster, 1).await;
    let mut s = Stream::new(1 << 20);
    subscribe(&mut viewer, &session, Some(0), 1 << 20)
        .await
        .unwrap();
    let folder = cluster.folder().display().to_string();
    let before = std::fs::read_to_string(cluster.folder().join("ca.pem")).unwrap();
    let expires = |cluster: &Cluster, i: usize| -> i64 {
        let list: Vec<Value> = tokio::task::block_in_place(|| cluster.nodes_api(i));
        list[0]["cert_expires_at"]
            .as_i64()
            .expect("the expiry is shown")
    };
    let first_expiry = expires(&cluster, 0);
    assert!(cluster
        .metric(0, "termesh_cert_expiry_timestamp_seconds{node=\"a\"}")
        .eq(&(first_expiry as f64)));

    // Step 1: a new CA, new certificates, a bundle of both CAs.
    cluster.termesh(&["cluster", "rotate-ca", "--dir", &folder]);
    let bundle = std::fs::read_to_string(cluster.folder().join("ca.pem")).unwrap();
    assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 2);
    assert!(bundle.ends_with(&before), "the old CA stays trusted");
    let said = cluster.reload(0);
    assert!(said.contains("reloaded"), "{said}");
    // The node says the old CA is still trusted, at each reload until the
    // rotation is finished.
    let warned = |cluster: &Cluster| cluster.log(0).matches("this node trusts 2 CAs").count();
    assert_eq!(warned(&cluster), 1, "{}", cluster.log(0));
    // c starts again with the new files while b still runs on the old ones:
    // each side verifies the other (b through the cross-signed CA).
    restart_c(
        &mut cluster,
        (&mut viewer, &session, &mut s),
        "links up across old and new certificates",
    )
    .await;
    cluster.reload(1);
    cluster.reload(2);

    // Step 2: the old CA goes.
    cluster.termesh(&["cluster", "rotate-ca", "--dir", &folder, "--finish"]);
    let only = std::fs::read_to_string(cluster.folder().join("ca.pem")).unwrap();
    assert_eq!(only.matches("BEGIN CERTIFICATE").count(), 1);
    assert!(!before.contains(&only), "a new CA");
    for i in 0..3 {
        cluster.reload(i);
    }
    assert_eq!(warned(&cluster), 1, "no warning once one CA is left");
    restart_c(
        &mut cluster,
        (&mut viewer, &session, &mut s),
        "links up with the new CA alone",
    )
    .await;
    // The new certificate's expiry is read: ten years ahead, as issued.
    let days_left = tokio::task::block_in_place(|| cluster.nodes_api(0))[0]["cert_days_left"]
        .as_i64()
        .unwrap();
    assert!(days_left > 9 * 365, "{days_left} days left");
    assert!(expires(&cluster, 0) >= first_expiry);
    assert_eq!((s.resyncs, s.snapshots.len()), (0, 0));
    assert!(
        !s.links.iter().any(|(kind, _)| *kind == "unreachable"),
        "the viewer never saw its session unreachable: {:?}",
        s.links
    );
}

/// A certificate of the cluster's CA for a configured name but with
/// another key than the configs pin (a removed node's, or one issued with
/// a stolen CA key): its links are refused, and the node says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_with_another_key_than_the_pinned_one_is_refused() {
    let mut cluster = Cluster::start(&["a", "b"]);
    let up = |cluster: &Cluster| node_states(cluster, 0).iter().all(|(_, s)| s == "up");
    within(SETTLE, "a and b linked", async {
        while !up(&cluster) {
            poll_pause().await;
        }
    })
    .await;
    cluster.stop_node(1);
    // b's name, the cluster's CA, a new key; b's own config pins nothing
    // (as an impostor's would).
    let folder = cluster.folder();
    let read = |p: &str| std::fs::read_to_string(folder.join(p)).unwrap();
    let ca = termesh_transport::peer::certs::Ca::load(&read("ca.pem"), &read("ca.key")).unwrap();
    let issued = ca.issue("b").unwrap();
    std::fs::write(folder.join("b/node.pem"), &issued.cert_pem).unwrap();
    std::fs::write(folder.join("b/node.key"), &issued.key_pem).unwrap();
    std::fs::set_permissions(
        folder.join("b/node.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let config = folder.join("b/termesh.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let unpinned: String = text
        .lines()
        .filter(|l| !l.starts_with("key_sha256"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&config, unpinned).unwrap();
    cluster.start_node(1);
    let said = within(SETTLE, "a refusing b's key", async {
        loop {
            let log = cluster.log(0);
            if log.contains("is not the one the config pins for b") {
                return log;
            }
            poll_pause().await;
        }
    })
    .await;
    assert!(said.contains("a removed node"), "{said}");
    assert!(
        node_states(&cluster, 0)
            .iter()
            .any(|(n, s)| n == "b" && s != "up"),
        "b is not up on a"
    );
}

/// A reload whose certificate files cannot be taken still applies the
/// file's tokens (a revocation must not wait on a certificate problem),
/// and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_whose_certificate_cannot_be_taken_still_applies_its_tokens() {
    let cluster = Cluster::start(&["a", "b"]);
    // A node that serves: linked, its start done (a reload sent while a
    // node still starts was seen to meet a node that did not come up).
    within(SETTLE, "a and b linked", async {
        while !node_states(&cluster, 0).iter().all(|(_, s)| s == "up") {
            poll_pause().await;
        }
    })
    .await;
    let folder = cluster.folder();
    let config = folder.join("a/termesh.toml").display().to_string();
    let added = cluster.termesh(&[
        "token", "add", "--name", "dana", "--role", "viewer", "--config", &config,
    ]);
    let token = added.trim().strip_prefix("token: ").unwrap().to_string();
    std::fs::write(folder.join("a/node.pem"), "not a certificate\n").unwrap();
    let url = format!("http://{}", cluster.nodes[0].http);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_termesh"))
        .args(["config", "reload", "--url", &url, "--token", &cluster.token])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the certificate was not taken");
    assert!(said.contains("the tokens were applied"), "{said}");
    let mut target = cluster.target(0);
    target.token = Some(token);
    let mut c = Client::connect(&target).await.unwrap();
    assert!(
        c.request(ClientMsg::list).await.is_ok(),
        "the new token works"
    );
}

/// The same impostor while the real node is up: its connection is refused
/// before it reaches the link, so the link that works never drops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impostor_with_another_key_does_not_cut_the_real_link() {
    use termesh_transport::peer::tls::Identity;
    let cluster = Cluster::start(&["a", "b"]);
    let up = |cluster: &Cluster| node_states(cluster, 1).iter().all(|(_, s)| s == "up");
    within(SETTLE, "a and b linked", async {
        while !up(&cluster) {
            poll_pause().await;
        }
    })
    .await;
    // b accepts a's connections (the lower name dials); the impostor
    // says it is a.
    let b_quic: std::net::SocketAddr = tokio::task::block_in_place(|| cluster.nodes_api(1))
        .iter()
        .find(|n| n["self"] == true)
        .expect("itself")["quic"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let folder = cluster.folder();
    let read = |p: &str| std::fs::read_to_string(folder.join(p)).unwrap();
    let ca = termesh_transport::peer::certs::Ca::load(&read("ca.pem"), &read("ca.key")).unwrap();
    let issued = ca.issue("a").unwrap();
    let impostor = Identity::from_pem(&read("ca.pem"), &issued.cert_pem, &issued.key_pem)
        .unwrap()
        // Not on 127.0.0.1 or .2: an ephemeral UDP port there could be
        // the QUIC port a cluster of a test beside this one chose and has
        // not bound yet.
        .endpoint("127.0.0.9:0".parse().unwrap())
        .unwrap();
    for _ in 0..3 {
        // The handshake itself succeeds (the CA signed it); b refuses it.
        let conn = impostor.connect(b_quic, "b").unwrap().await.unwrap();
        let _ = within(PATIENCE, "b to close the impostor", conn.closed()).await;
    }
    let said = cluster.log(1);
    assert!(
        said.contains("is not the one the config pins for a"),
        "{said}"
    );
    for i in 0..2 {
        assert!(
            !cluster.log(i).contains("peer link down"),
            "node {i}: {}",
            cluster.log(i)
        );
    }
    assert!(up(&cluster));
}
