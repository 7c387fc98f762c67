//! output_log: reading.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_pages_walk_back_through_everything_retained() {
    // 300,000 lines (2.1 MB): half again the 1 MiB ring, all of it kept.
    const N: u64 = 300_000;
    let node = BinaryNode::start("[session]\nring_bytes = \"1MiB\"\n");
    let session = create(&node, &format!("seq 1 {N}; exit 0")).await.id;
    wait_exited(&node, &session).await;
    let mut c = client(&node).await;
    let page = |before_seq: Option<u64>, rows: Option<u32>| ClientMsg::History {
        id: 0,
        session: session.clone(),
        limit: None,
        before_seq,
        rows,
    };
    let ask = |msg: ClientMsg| {
        let mut msg = msg;
        move |id| {
            if let ClientMsg::History { id: i, .. } = &mut msg {
                *i = id;
            }
            msg
        }
    };
    let (mut before, mut pages, mut lines) = (None, 0, Vec::<String>::new());
    loop {
        let reply = c.request(ask(page(before, Some(10_000)))).await.unwrap();
        let ServerMsg::History {
            lines: Some(got),
            first_seq: Some(first),
            more: Some(more),
            seq,
            ..
        } = reply
        else {
            panic!("{reply:?}")
        };
        // At most the rows asked for, or one frame's lines alone.
        assert!(first <= seq && (got.len() <= 10_000 || first == seq));
        if let Some(b) = before {
            assert_eq!(seq + 1, b, "each page ends where the one after it began");
        }
        pages += 1;
        lines.splice(0..0, got);
        if !more {
            assert_eq!(first, 1, "the oldest page begins at the first frame");
            break;
        }
        before = Some(first);
        assert!(pages < 1000, "walked back forever");
    }
    // Pages split at frame boundaries, which may fall inside a line: the
    // text, every line joined, is the whole output once.
    let want: String = (1..=N).map(|i| i.to_string()).collect();
    assert_eq!(lines.concat(), want, "every retained line once, in order");
    assert!(lines.len() as u64 >= N && lines.len() as u64 <= N + pages);
    println!("{pages} pages back to the first line");

    // The raw tail past the 1 MiB ring comes from the log.
    let reply = c
        .request(|id| ClientMsg::History {
            id,
            session: session.clone(),
            limit: Some(2 << 20),
            before_seq: None,
            rows: None,
        })
        .await
        .unwrap();
    let ServerMsg::History {
        data: Some(raw), ..
    } = reply
    else {
        panic!("{reply:?}")
    };
    let all: Vec<u8> = (1..=N)
        .flat_map(|i| format!("{i}\r\n").into_bytes())
        .collect();
    assert_eq!(raw.len(), 2 << 20, "the newest 2 MiB, past the ring");
    assert!(all.ends_with(&raw));

    // Bad pages are refused clearly.
    for (msg, needle) in [
        (page(None, Some(0)), "rows"),
        (page(None, Some(10_001)), "rows"),
        (page(Some(0), None), "before_seq"),
    ] {
        let err = c.request(ask(msg)).await.unwrap_err();
        assert!(format!("{err:#}").contains(needle), "{err:#}");
    }
    let err = c
        .request(|id| ClientMsg::History {
            id,
            session: session.clone(),
            limit: Some(10),
            before_seq: None,
            rows: Some(5),
        })
        .await
        .unwrap_err();
    assert!(format!("{err:#}").contains("limit"), "{err:#}");

    // The same over REST, in JSON.
    let url = format!("{}/api/v1/sessions/{session}/history?rows=3", node.url);
    let body: serde_json::Value = tokio::task::spawn_blocking(move || {
        ureq::get(&url)
            .set("Authorization", &format!("Bearer {OPERATOR}"))
            .call()
            .unwrap()
            .into_json()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(body["more"], true);
    assert!(body["first_seq"].as_u64().unwrap() > 1);
    let last = body["lines"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last, N.to_string(), "the newest line last");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_tail_of_the_retained_output_is_streamed_in_bounded_pages() {
    // 2,600,000 lines (about 22 MB): past the 4 MiB a request carries and
    // the 16 MiB the walk keeps, so pages are asked for again.
    const N: u64 = 2_600_000;
    let node = BinaryNode::start("");
    let session = create(&node, &format!("seq 1 {N}; exit 0")).await.id;
    wait_exited(&node, &session).await;
    let all: Vec<u8> = (1..=N)
        .flat_map(|i| format!("{i}\r\n").into_bytes())
        .collect();
    let last_seq = info(&node, &session).await.last_seq;
    let logs = |tail: u64| format!("{}/api/v1/sessions/{session}/logs?tail={tail}", node.url);

    for tail in [100, 3 << 20, 20_000_000, 1 << 40] {
        let (body, seq) = get_bytes(logs(tail)).await;
        let want = &all[all.len().saturating_sub(tail as usize)..];
        assert_eq!(body.len(), want.len(), "tail={tail}");
        assert!(body == want, "tail={tail}: not the newest bytes in order");
        assert_eq!(seq, last_seq, "tail={tail}");
    }

    // At most 4 streams at once: a fifth is refused while they run (their
    // bodies unread, so they stay open), and works again once they end.
    let url = logs(20_000_000);
    let (code, said) = tokio::task::spawn_blocking(move || {
        let auth = format!("Bearer {OPERATOR}");
        let get = || {
            ureq::get(&url)
                .set("Authorization", &auth)
                .call()
                .map_err(Box::new)
        };
        let held: Vec<_> = (0..4).map(|_| get().unwrap()).collect();
        let fifth = get().map_err(|e| *e);
        drop(held);
        match fifth {
            Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
            other => panic!("a fifth stream: {:?}", other.map(|r| r.status())),
        }
    })
    .await
    .unwrap();
    assert_eq!(code, 503, "{said}");
    assert!(said.contains("logs streams"), "{said}");
    let small = logs(100);
    within(PATIENCE, "a logs stream once the others ended", async {
        loop {
            let url = small.clone();
            let ok = tokio::task::spawn_blocking(move || {
                ureq::get(&url)
                    .set("Authorization", &format!("Bearer {OPERATOR}"))
                    .call()
                    .is_ok()
            })
            .await
            .unwrap();
            if ok {
                return;
            }
            poll_pause().await;
        }
    })
    .await;

    // The CLI, page by page, raw bytes.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_termesh"))
        .args(["logs", &session, "--tail", "18000000"])
        .args(["--url", &node.url, "--token", OPERATOR])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout == all[all.len() - 18_000_000..],
        "termesh logs --tail"
    );

    // Raw pages by `before_seq`: whole frames, each where the next ends.
    let mut c = client(&node).await;
    let (mut before, mut walked) = (last_seq + 1, Vec::<Vec<u8>>::new());
    loop {
        let reply = c
            .request(|id| ClientMsg::History {
                id,
                session: session.clone(),
                limit: Some(1 << 20),
                before_seq: Some(before),
                rows: None,
            })
            .await
            .unwrap();
        let ServerMsg::History {
            data: Some(data),
            first_seq: Some(first),
            more: Some(more),
            seq,
            ..
        } = reply
        else {
            panic!("{reply:?}")
        };
        assert_eq!(seq, before - 1, "a page ends right before `before_seq`");
        assert!(first <= seq && data.len() <= 1 << 20);
        walked.push(data);
        before = first;
        if !more {
            assert_eq!(first, 1);
            break;
        }
    }
    walked.reverse();
    assert!(walked.concat() == all, "the raw pages are the whole output");
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_sessions_read_back_from_the_log_go_cold_again() {
    const N: usize = 20;
    const WARM: &str = "termesh_sessions_ended_warm";
    let node = BinaryNode::start("");
    let mut ids = Vec::new();
    for i in 0..N {
        ids.push(create(&node, &format!("echo hello-{i}; exit 0")).await.id);
    }
    for id in &ids {
        wait_exited(&node, id).await;
    }
    // A restart brings them back cold: no ring in memory.
    let node = node.restart("");
    assert_eq!(wire::metric(&node.url, WARM).await, 0.0);
    let mut c = client(&node).await;
    for (i, id) in ids.iter().enumerate() {
        let text = screen_text(&mut c, id).await;
        assert!(text.contains(&format!("hello-{i}")), "{text}");
    }
    assert!(wire::metric(&node.url, WARM).await > 0.0, "read back, warm");
    // Unused, they go cold again: past 16, soon; all of them in 30 s.
    within(PATIENCE, "every ended session cold again", async {
        while wire::metric(&node.url, WARM).await > 0.0 {
            poll_pause().await;
        }
    })
    .await;
    // And read back again when asked.
    let text = screen_text(&mut c, &ids[3]).await;
    assert!(text.contains("hello-3"), "{text}");
}
