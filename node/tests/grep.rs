//! `grep` over stored output (docs/protocol.md section 16) on a real node:
//! a line far behind the ring (read back from the output log), as plain
//! text, with its context and frame; the filters (sessions, state, time),
//! the hit bound, bad patterns; and `termesh grep` printing hits as grep
//! does. The cross-node case is in `cluster/agents.rs`.

mod common;

use std::process::Command;

use common::*;
use termesh_node::client::{error_code, Client};
use termesh_transport::{ClientMsg, ErrorCode, GrepHit, ServerMsg};

/// Every hit of a `grep` (node-wide), and the `grep_done` totals.
async fn grep(c: &mut Client, msg: impl FnOnce(u64) -> ClientMsg) -> (Vec<GrepHit>, ServerMsg) {
    let id = c.next_id();
    c.send(&msg(id)).await.unwrap();
    let mut hits = Vec::new();
    loop {
        match within(PATIENCE, "grep's answers", c.next_for(id))
            .await
            .unwrap()
        {
            ServerMsg::GrepHits { hits: more, .. } => hits.extend(more),
            done @ ServerMsg::GrepDone { .. } => return (hits, done),
            other => panic!("{other:?}"),
        }
    }
}

/// The fields of a `grep` a test sets.
#[derive(Default)]
struct G {
    sessions: Option<Vec<String>>,
    since_ms: Option<u64>,
    state: Option<String>,
    context: Option<u32>,
    max_hits: Option<u32>,
}

fn request(id: u64, pattern: &str, g: G) -> ClientMsg {
    ClientMsg::Grep {
        id,
        pattern: pattern.into(),
        sessions: g.sessions,
        since_ms: g.since_ms,
        state: g.state,
        context: g.context,
        max_hits: g.max_hits,
        timeout_ms: None,
        node: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_far_behind_the_ring_is_found_with_its_context() {
    // A small ring: the marker is long gone from memory.
    let node = TestNode::start_with(|c| c.session.ring_bytes = 64 << 10);
    let script = "echo before-it; printf '\\033[1;31mneedle\\033[0m: disk full\\r\\n'; echo after-it; \
                  head -c 3000000 /dev/zero | tr '\\0' 'x' | fold -w 100; echo flood-done; exec sleep 1000";
    let flood = node.create(&["sh", "-c", script]).await.id;
    let quiet = node
        .create(&["sh", "-c", "echo needle elsewhere; exec sleep 1000"])
        .await
        .id;
    wait_output(&node, &flood, "flood-done").await;
    wait_output(&node, &quiet, "needle elsewhere").await;
    let mut c = node.client(VIEWER).await;

    let g = G {
        context: Some(1),
        sessions: Some(vec![flood.clone()]),
        ..G::default()
    };
    let (hits, done) = grep(&mut c, |id| request(id, "^needle: ", g)).await;
    assert_eq!(hits.len(), 1, "{hits:?}");
    let hit = &hits[0];
    assert_eq!(
        (hit.session.as_str(), hit.node.as_str(), hit.line.as_str()),
        (flood.as_str(), "t1", "needle: disk full")
    );
    assert_eq!(
        (hit.before.as_slice(), hit.after.as_slice()),
        (
            &["before-it".to_string()][..],
            &["after-it".to_string()][..]
        )
    );
    let ServerMsg::GrepDone {
        hits: n,
        scanned_bytes,
        truncated,
        errors,
        ..
    } = done
    else {
        panic!()
    };
    assert_eq!((n, truncated, errors.len()), (1, false, 0));
    assert!(scanned_bytes > 3_000_000, "{scanned_bytes}");
    // Its frame is far behind the ring (64 KiB: a frame or two of the
    // flood), read from the log, as `read` shows it.
    let info = node.info(&flood).await.unwrap();
    assert!(
        hit.seq + 5 < info.last_seq,
        "{} vs {}",
        hit.seq,
        info.last_seq
    );
    let text = match c
        .request(|id| ClientMsg::Read {
            id,
            session: flood.clone(),
            since_seq: Some(hit.seq - 1),
            max_bytes: Some(100),
        })
        .await
        .unwrap()
    {
        ServerMsg::Text { text, .. } => text,
        other => panic!("{other:?}"),
    };
    assert!(text.contains("needle: disk full"), "{text:?}");

    // Every session; the bound; filters.
    let (hits, _) = grep(&mut c, |id| request(id, "needle", G::default())).await;
    assert_eq!(hits.len(), 2);
    let (hits, done) = grep(&mut c, |id| {
        request(
            id,
            "needle",
            G {
                max_hits: Some(1),
                ..G::default()
            },
        )
    })
    .await;
    assert_eq!(hits.len(), 1);
    assert!(
        matches!(
            done,
            ServerMsg::GrepDone {
                truncated: true,
                ..
            }
        ),
        "{done:?}"
    );
    let (hits, _) = grep(&mut c, |id| {
        request(
            id,
            "needle",
            G {
                since_ms: Some(u64::MAX / 2),
                ..G::default()
            },
        )
    })
    .await;
    assert!(hits.is_empty());
    let (hits, _) = grep(&mut c, |id| {
        request(
            id,
            "needle",
            G {
                state: Some("waiting".into()),
                ..G::default()
            },
        )
    })
    .await;
    assert!(hits.is_empty(), "nothing waits");
    // Bad requests are refused with what was wrong.
    for (pattern, context) in [("(", 0), ("x", 11)] {
        let err = c
            .request(|id| {
                request(
                    id,
                    pattern,
                    G {
                        context: Some(context),
                        ..G::default()
                    },
                )
            })
            .await
            .unwrap_err();
        assert_eq!(error_code(&err), Some(ErrorCode::BadRequest), "{err}");
    }

    // The CLI, as grep prints.
    let out = Command::new("timeout")
        .args([
            "-s",
            "KILL",
            "60",
            env!("CARGO_BIN_EXE_termesh"),
            "grep",
            "needle: disk",
            "-C",
            "1",
        ])
        .args(["--url", &node.url(), "--token", VIEWER])
        .output()
        .unwrap();
    let at = format!("{flood}@t1");
    let seq = hit.seq;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{at}-{seq}-before-it\n{at}:{seq}:needle: disk full\n{at}-{seq}-after-it\n")
    );
    assert_eq!(out.status.code(), Some(0));
    let none = Command::new("timeout")
        .args([
            "-s",
            "KILL",
            "60",
            env!("CARGO_BIN_EXE_termesh"),
            "grep",
            "no such text",
        ])
        .args(["--url", &node.url(), "--token", VIEWER])
        .output()
        .unwrap();
    assert_eq!(
        none.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&none.stderr)
    );
    c.close().await;
}
