//! A cluster as an operator watches it: `/api/v1/nodes` and `termesh
//! nodes`, per-peer `/metrics`, REST calls for another node's session,
//! and the breaker: a peer that stops answering (SIGSTOP) is dropped and
//! linked again after SIGCONT, while the stopped node blames nobody.

mod common;

use std::time::Duration;

use common::cluster::Cluster;
use common::*;
use serde_json::Value;

fn nodes(cluster: &Cluster, i: usize) -> Vec<Value> {
    cluster.nodes_api(i)
}

/// Waits (bounded) until `check` holds for node `i`'s `/api/v1/nodes`.
async fn wait_nodes(
    cluster: &Cluster,
    i: usize,
    what: &str,
    check: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let result = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let list = tokio::task::block_in_place(|| nodes(cluster, i));
            if check(&list) {
                return list;
            }
            poll_pause().await;
        }
    })
    .await;
    result.unwrap_or_else(|_| {
        panic!(
            "node {i}: timed out waiting for {what}; log:\n{}",
            cluster.log(i)
        )
    })
}

fn node<'a>(list: &'a [Value], name: &str) -> &'a Value {
    list.iter().find(|n| n["name"] == name).expect("listed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_metrics_and_rest_cover_the_cluster() {
    let cluster = Cluster::start(&["a", "b", "c"]);
    let list = wait_nodes(&cluster, 0, "both links up", |l| {
        l.iter().filter(|n| n["state"] == "up").count() == 3
    })
    .await;
    let me = node(&list, "a");
    assert_eq!(me["self"], true);
    assert_eq!(me["http"], cluster.nodes[0].http.to_string());
    for name in ["b", "c"] {
        let n = node(&list, name);
        assert_eq!(n["self"], false);
        assert_eq!(n["breaker"], "closed");
        for field in [
            "quic",
            "http",
            "stall_ms",
            "sessions",
            "bytes_in",
            "bytes_out",
        ] {
            assert!(!n[field].is_null(), "{name}.{field}: {n}");
        }
    }
    // RTT comes with the first answered ping.
    let list = wait_nodes(&cluster, 0, "an RTT", |l| {
        node(l, "b")["rtt_ms"].is_number()
    })
    .await;
    println!(
        "link RTT a->b on loopback: {} ms",
        node(&list, "b")["rtt_ms"]
    );
    // Every link up, seen from b and c too (b forwards to c below).
    for i in 1..3 {
        wait_nodes(&cluster, i, "every link up", |l| {
            l.iter().filter(|n| n["state"] == "up").count() == 3
        })
        .await;
    }
    // Only an admin may look.
    let viewer = ureq::get(&format!("http://{}/api/v1/nodes", cluster.nodes[0].http)).call();
    assert!(matches!(viewer, Err(ureq::Error::Status(401, _))));

    // REST on a for a session made on c through REST on b.
    let created: Value = ureq::post(&format!("http://{}/api/v1/sessions", cluster.nodes[1].http))
        .set("authorization", &format!("Bearer {}", cluster.token))
        .send_json(serde_json::json!({"command": ["cat"], "node": "c"}))
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(created["node"], "c");
    let id = created["id"].as_str().unwrap().to_string();
    let a = format!("http://{}/api/v1/sessions/{id}", cluster.nodes[0].http);
    let auth = format!("Bearer {}", cluster.token);
    within(PATIENCE, "a to know c's session", async {
        while tokio::task::block_in_place(|| {
            ureq::get(&a).set("authorization", &auth).call().is_err()
        }) {
            poll_pause().await;
        }
    })
    .await;
    ureq::post(&format!("{a}/input"))
        .set("authorization", &auth)
        .send_string("via-rest-on-a\n")
        .unwrap();
    let screen = within(PATIENCE, "the input on c's screen", async {
        loop {
            let text = tokio::task::block_in_place(|| {
                ureq::get(&format!("{a}/screen?format=text"))
                    .set("authorization", &auth)
                    .call()
                    .map(|r| r.into_string().unwrap_or_default())
                    .unwrap_or_default()
            });
            if text.contains("via-rest-on-a") {
                return text;
            }
            poll_pause().await;
        }
    })
    .await;
    assert!(screen.contains("via-rest-on-a"));
    let logs = ureq::get(&format!("{a}/logs"))
        .set("authorization", &auth)
        .call()
        .unwrap();
    assert!(logs.header("X-Termesh-Seq").is_some());
    assert!(logs.into_string().unwrap().contains("via-rest-on-a"));
    // An owner's error comes back with its status: a bad resize is 400.
    let bad = ureq::post(&format!("{a}/resize"))
        .set("authorization", &auth)
        .send_json(serde_json::json!({"cols": 0, "rows": 10}));
    assert!(matches!(bad, Err(ureq::Error::Status(400, _))), "{bad:?}");
    let gone = ureq::delete(&a).set("authorization", &auth).call().unwrap();
    assert_eq!(gone.status(), 204);

    // Per-peer series.
    assert_eq!(
        cluster.metric(0, "termesh_peer_up{node=\"a\",peer=\"c\"}"),
        1.0
    );
    assert!(cluster.metric(0, "termesh_peer_bytes_out_total{node=\"a\",peer=\"b\"}") > 0.0);

    // The CLI shows the same.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_termesh"))
        .args([
            "nodes",
            "--url",
            &format!("http://{}", cluster.nodes[0].http),
            "--token",
            &cluster.token,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("a*") && text.contains("closed"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_stops_answering_trips_the_breaker_and_links_again() {
    let cluster = Cluster::start(&["a", "b", "c"]);
    wait_nodes(&cluster, 0, "links up", |l| {
        l.iter().filter(|n| n["state"] == "up").count() == 3
    })
    .await;
    let c = nix::unistd::Pid::from_raw(cluster.pid(2) as i32);
    nix::sys::signal::kill(c, nix::sys::signal::Signal::SIGSTOP).unwrap();
    // Six unanswered pings after the 8 s timeout: about 20 s.
    let list = wait_nodes(&cluster, 0, "the breaker to trip", |l| {
        node(l, "c")["state"] == "down"
    })
    .await;
    assert_eq!(node(&list, "c")["breaker"], "open");
    assert!(cluster.metric(0, "termesh_peer_breaker_trips_total{node=\"a\",peer=\"c\"}") >= 1.0);
    assert!(
        cluster.log(0).contains("breaker tripped"),
        "{}",
        cluster.log(0)
    );
    nix::sys::signal::kill(c, nix::sys::signal::Signal::SIGCONT).unwrap();
    let list = wait_nodes(&cluster, 0, "the link back", |l| {
        node(l, "c")["state"] == "up"
    })
    .await;
    assert_eq!(node(&list, "c")["breaker"], "closed");
    // The stopped node blamed nobody for its own stop.
    wait_nodes(&cluster, 2, "c's links back", |l| {
        l.iter().filter(|n| n["state"] == "up").count() == 3
    })
    .await;
    for peer in ["a", "b"] {
        let series = format!("termesh_peer_breaker_trips_total{{node=\"c\",peer=\"{peer}\"}}");
        assert_eq!(
            cluster.metric(2, &series),
            0.0,
            "c tripped its link to {peer}"
        );
    }
    assert!(cluster.metric(2, "termesh_host_stall_seconds_total") >= 5.0);
}

/// Sends SIGCONT to the pids on drop, so a failed test leaves none stopped.
struct Resume(Vec<nix::unistd::Pid>);

impl Drop for Resume {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = nix::sys::signal::kill(*pid, nix::sys::signal::Signal::SIGCONT);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stalled_itself_holds_its_link_instead_of_blaming_the_peer() {
    let cluster = Cluster::start(&["a", "b", "c"]);
    for i in 0..3 {
        wait_nodes(&cluster, i, "links up", |l| {
            l.iter().filter(|n| n["state"] == "up").count() == 3
        })
        .await;
    }
    // a stops answering; once c has counted one unanswered ping, c itself
    // stalls (stopped) in the middle of the streak.
    let pid = |i| nix::unistd::Pid::from_raw(cluster.pid(i) as i32);
    let (a, c) = (pid(0), pid(2));
    let _resume = Resume(vec![a, c]);
    nix::sys::signal::kill(a, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let timeouts = "termesh_peer_request_timeouts_total{node=\"c\",peer=\"a\"}";
    within(PATIENCE, "c's first unanswered ping to a", async {
        while cluster.metric(2, timeouts) < 1.0 {
            poll_pause().await;
        }
    })
    .await;
    nix::sys::signal::kill(c, nix::sys::signal::Signal::SIGSTOP).unwrap();
    // Long enough for b's breaker to give up on c: c was stalled 20 s+.
    wait_nodes(&cluster, 1, "b to drop its link to c", |l| {
        node(l, "c")["state"] == "down"
    })
    .await;
    nix::sys::signal::kill(c, nix::sys::signal::Signal::SIGCONT).unwrap();
    // The streak of c's unanswered pings to a spans c's own stall: held.
    let held = "termesh_peer_breaker_holds_total{node=\"c\",peer=\"a\"}";
    let holding = tokio::time::timeout(PATIENCE, async {
        while cluster.metric(2, held) < 1.0 {
            poll_pause().await;
        }
    })
    .await;
    assert!(
        holding.is_ok(),
        "c never held; its log:\n{}",
        cluster.log(2)
    );
    assert!(
        cluster.log(2).contains("breaker held"),
        "{}",
        cluster.log(2)
    );
    nix::sys::signal::kill(a, nix::sys::signal::Signal::SIGCONT).unwrap();
    for i in 0..3 {
        wait_nodes(&cluster, i, "every link back", |l| {
            l.iter().filter(|n| n["state"] == "up").count() == 3
        })
        .await;
    }
}
