//! `grep` through one node finds a line another node's session printed
//! megabytes of output ago (long out of every ring: from the owner's
//! output log), with the owner's name on the hit.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_through_one_node_finds_a_line_far_back_on_another() {
    let cluster = Cluster::start(&["a", "b"]);
    let script = "echo 'deploy id 7f3e: rollback needed'; \
                  head -c 6000000 /dev/zero | tr '\\0' 'y' | fold -w 120; echo flood-done; exec sleep 1000";
    let id = common::cluster::create(&cluster, 1, "a", script).await;
    let mut b = Client::connect(&cluster.target(1)).await.unwrap();
    // Read through b, a page after another, to its end.
    let mut since = 0;
    within(PATIENCE, "the flood to end", async {
        loop {
            if let Ok(ServerMsg::Text { text, seq, .. }) = b
                .request(|rid| ClientMsg::Read {
                    id: rid,
                    session: id.clone(),
                    since_seq: Some(since),
                    max_bytes: None,
                })
                .await
            {
                if text.contains("flood-done") {
                    return;
                }
                if seq > since {
                    since = seq;
                    continue;
                }
            }
            poll_pause().await;
        }
    })
    .await;
    let rid = b.next_id();
    b.send(&ClientMsg::Grep {
        id: rid,
        pattern: r"deploy id \w+: rollback".into(),
        sessions: None,
        since_ms: None,
        state: None,
        context: None,
        max_hits: None,
        timeout_ms: None,
        node: None,
    })
    .await
    .unwrap();
    let (mut hits, mut nodes) = (Vec::new(), Vec::new());
    let done = within(PATIENCE, "grep's answers", async {
        loop {
            match b.next_for(rid).await.unwrap() {
                ServerMsg::GrepHits {
                    node, hits: more, ..
                } => {
                    nodes.push(node);
                    hits.extend(more);
                }
                done @ ServerMsg::GrepDone { .. } => return done,
                other => panic!("{other:?}"),
            }
        }
    })
    .await;
    nodes.sort();
    assert_eq!(nodes, ["a", "b"], "each node answered");
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(
        (hits[0].session.as_str(), hits[0].node.as_str(), hits[0].seq),
        (id.as_str(), "a", 1)
    );
    assert_eq!(hits[0].line, "deploy id 7f3e: rollback needed");
    let ServerMsg::GrepDone {
        hits: n,
        scanned_bytes,
        errors,
        ..
    } = done
    else {
        unreachable!()
    };
    assert_eq!((n, errors.len()), (1, 0), "{errors:?}");
    assert!(scanned_bytes > 6_000_000, "{scanned_bytes}");
}
