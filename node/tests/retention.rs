//! Retention on a real node and its real sled files: the output a session
//! keeps stays under its cap while a long flood runs (oldest dropped, the
//! newest kept), the vacuum trims events by count, a removed session
//! stays on disk as a tombstone until the vacuum, and purge wipes its
//! output and events at once.

mod common;

use common::binary::BinaryNode;
use common::*;
use termesh_actors::store::Store;
use termesh_node::client::Client;
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg, SessionInfo, SessionStatus};

const CAP: u64 = 256 << 10;
const CONFIG: &str = "[store]\noutput_bytes = \"256KiB\"\nevents = 10\nvacuum_every = \"1s\"\n";

async fn client(node: &BinaryNode) -> Client {
    Client::connect(&node.target(OPERATOR)).await.unwrap()
}

async fn create(node: &BinaryNode, script: &str) -> SessionInfo {
    let req = CreateRequest {
        command: Some(vec!["sh".into(), "-c".into(), script.into()]),
        ..Default::default()
    };
    match client(node)
        .await
        .request(|id| ClientMsg::Create { id, req })
        .await
        .unwrap()
    {
        ServerMsg::Created { session, .. } => session,
        other => panic!("{other:?}"),
    }
}

/// The bytes stored for a session now: one read, which the store answers
/// between two writes (the cap is well under one read's 1 MiB).
async fn stored_now(c: &mut Client, session: &str) -> u64 {
    let reply = c
        .request(|id| ClientMsg::ReadOutput {
            id,
            session: session.to_string(),
            after: None,
            max_bytes: None,
        })
        .await
        .unwrap();
    let ServerMsg::StoredOutput { frames, .. } = reply else {
        panic!("{reply:?}");
    };
    let bytes: u64 = frames.iter().map(|f| f.data.len() as u64).sum();
    assert!(bytes < 1 << 20, "one read holds it all");
    bytes
}

/// Every stored frame's bytes, oldest first, and the first seq.
async fn stored_output(c: &mut Client, session: &str) -> (u64, Vec<u8>) {
    let (mut after, mut first, mut data) = (0, 0, Vec::new());
    loop {
        let reply = c
            .request(|id| ClientMsg::ReadOutput {
                id,
                session: session.to_string(),
                after: Some(after),
                max_bytes: None,
            })
            .await
            .unwrap();
        let ServerMsg::StoredOutput { frames, .. } = reply else {
            panic!("{reply:?}");
        };
        let Some(last) = frames.last() else {
            return (first, data);
        };
        if first == 0 {
            first = frames[0].seq;
        }
        after = last.seq;
        for f in &frames {
            data.extend_from_slice(&f.data);
        }
    }
}

fn store_bytes(node: &BinaryNode) -> u64 {
    let text = ureq::get(&format!("{}/metrics", node.url))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    text.lines()
        .find(|l| l.starts_with("termesh_store_bytes"))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .expect("termesh_store_bytes in /metrics")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_output_cap_holds_during_a_long_flood_and_events_are_trimmed() {
    const LINES: u64 = 2_000_000;
    let node = BinaryNode::start(CONFIG);
    let session = create(&node, &format!("stty -onlcr; exec seq 1 {LINES}")).await;
    let mut c = client(&node).await;
    // While it floods, what is stored never passes the cap by more than
    // the eighth the writer allows plus one frame.
    let bound = CAP + CAP / 8 + (64 << 10);
    let mut samples = 0;
    let mut most = 0;
    within(PATIENCE, "the flood to end", async {
        loop {
            let stored = stored_now(&mut c, &session.id).await;
            samples += 1;
            most = most.max(stored);
            assert!(stored <= bound, "{stored} bytes stored");
            let info = node_info(&mut c, &session.id).await;
            if info.status == SessionStatus::Exited {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    let expected: Vec<u8> = (1..=LINES)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    // The store writes behind the session: wait for the last frame.
    let (first, data) = within(PATIENCE, "the last frame stored", async {
        loop {
            let (first, data) = stored_output(&mut c, &session.id).await;
            if data.ends_with(format!("\n{LINES}\n").as_bytes()) {
                return (first, data);
            }
            poll_pause().await;
        }
    })
    .await;
    assert!(data.len() as u64 <= bound);
    assert!(
        data.len() as u64 >= CAP - (64 << 10),
        "the newest cap's worth is kept"
    );
    assert!(
        expected.ends_with(&data),
        "what is kept is the newest output"
    );
    println!(
        "{} bytes of output; {samples} samples during the flood, at most {most} stored; \
         at the end {} bytes from seq {first}",
        expected.len(),
        data.len(),
    );

    // Events: 30 made, the vacuum (every second here) keeps the newest 10.
    let cat = create(&node, "exec cat").await.id;
    for i in 0..30 {
        c.request(|id| ClientMsg::Tag {
            id,
            session: cat.clone(),
            tags: vec![format!("t{i}")],
        })
        .await
        .unwrap();
    }
    let kept = within(PATIENCE, "the vacuum to trim events", async {
        loop {
            let kept = events_of(&mut c, &cat).await;
            let newest = kept.last().map(|e| e["tags"][0] == "t29");
            if kept.len() <= 10 && newest == Some(true) {
                return kept;
            }
            poll_pause().await;
        }
    })
    .await;
    assert_eq!(kept.len(), 10);
    let ids: Vec<u64> = kept.iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
    assert!(node.log().contains("store vacuumed"), "{}", node.log());
    let on_disk = store_bytes(&node);
    assert!(on_disk > 0, "termesh_store_bytes measures the store");
    println!("store on disk after the vacuum: {on_disk} bytes");
}

async fn node_info(c: &mut Client, id: &str) -> SessionInfo {
    match c.request(ClientMsg::list).await.unwrap() {
        ServerMsg::Sessions { sessions, .. } => {
            sessions.into_iter().find(|s| s.id == id).expect("listed")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_leaves_a_tombstone_and_purge_wipes_at_once() {
    let node = BinaryNode::start("");
    let kept = create(&node, "echo keep-me; exit 0").await.id;
    let wiped = create(&node, "echo wipe-me; exit 0").await.id;
    let mut c = client(&node).await;
    for id in [&kept, &wiped] {
        within(PATIENCE, "the output stored", async {
            while stored_output(&mut c, id).await.1.is_empty()
                || node_info(&mut c, id).await.status != SessionStatus::Exited
            {
                poll_pause().await;
            }
        })
        .await;
    }
    for (id, purge) in [(&kept, None), (&wiped, Some(true))] {
        c.request(|rid| ClientMsg::Remove {
            id: rid,
            session: id.clone(),
            purge,
        })
        .await
        .unwrap();
        // Gone from the API either way.
        let err = c
            .request(|rid| ClientMsg::Events {
                id: rid,
                session: id.clone(),
                after: None,
                limit: None,
            })
            .await
            .unwrap_err();
        assert!(format!("{err:#}").contains("not_found"), "{err:#}");
    }
    c.close().await;

    // On disk: both records marked removed; the tombstone keeps its data
    // (until the vacuum), the purged one has none left.
    let dir = node.stop_keeping_dir();
    let store = Store::open(&BinaryNode::store_path(&dir)).unwrap();
    let records = store.records().unwrap();
    for id in [&kept, &wiped] {
        let (_, _, removed) = records.iter().find(|(r, _, _)| r == id).unwrap();
        assert!(removed, "{id} is a tombstone");
    }
    let store_path = BinaryNode::store_path(&dir);
    let (log, _) = termesh_actors::store::log::OutputLog::open(
        &termesh_actors::store::log_dir(&store_path),
        termesh_actors::store::log::SEGMENT_BYTES,
        u64::MAX,
        Default::default(),
    )
    .unwrap();
    let out = |id: &str| log.after(id, 0, 1 << 20).unwrap();
    let evs = |id: &str| store.events_after(id, 0, 100).unwrap();
    assert!(String::from_utf8_lossy(&out(&kept)[0].data).contains("keep-me"));
    let kinds: Vec<String> = evs(&kept)
        .iter()
        .map(|e| e.event_json()["kind"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        kinds,
        ["created", "exited", "removed"],
        "a tombstone keeps its events"
    );
    assert!(out(&wiped).is_empty(), "purge wiped the output");
    let left: Vec<serde_json::Value> = evs(&wiped).iter().map(|e| e.event_json()).collect();
    assert!(left.is_empty(), "purge wiped the events; left: {left:?}");
}
