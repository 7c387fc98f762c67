//! `[[notify]]`: a webhook receiver in the test gets one POST per change
//! it asked for (a session waiting, then failing), with its bearer token,
//! and the node retries after the receiver answers 500 once.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use serde_json::Value;
use termesh_config::notify::{NotifyConfig, NotifyFormat};

/// One request the receiver got: its headers (lowercased names) and body.
#[derive(Debug, Clone)]
struct Got {
    headers: Vec<(String, String)>,
    body: String,
    answered: u16,
}

/// An HTTP receiver on 127.0.0.1 answering 500 to its first request and
/// 200 after; ends with the test process.
fn receiver() -> (String, Arc<Mutex<Vec<Got>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let got: Arc<Mutex<Vec<Got>>> = Arc::default();
    let seen = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(100) {
            let Ok(mut stream) = stream else { continue };
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut headers = Vec::new();
            let mut line = String::new();
            let _ = reader.read_line(&mut line); // the request line
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = line.trim_end().split_once(':') {
                    headers.push((k.to_lowercase(), v.trim().to_string()));
                }
            }
            let len: usize = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .map_or(0, |(_, v)| v.parse().unwrap());
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            let mut all = seen.lock().unwrap();
            let answered = if all.is_empty() { 500 } else { 200 };
            all.push(Got {
                headers,
                body: String::from_utf8_lossy(&body).into(),
                answered,
            });
            drop(all);
            let _ = write!(
                stream,
                "HTTP/1.1 {answered} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    (url, got)
}

async fn wait_for(got: &Arc<Mutex<Vec<Got>>>, n: usize, what: &str) -> Vec<Got> {
    within(PATIENCE, what, async {
        loop {
            let all = got.lock().unwrap().clone();
            if all.len() >= n {
                return all;
            }
            poll_pause().await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_session_and_its_failure_are_posted_once_each_with_a_retry() {
    let (url, got) = receiver();
    let node = TestNode::start_with(|c| {
        c.notify = vec![NotifyConfig {
            url,
            format: NotifyFormat::Json,
            on: vec!["waiting".into(), "failed".into()],
            token: Some("hook-token".into()),
            quiet: Duration::from_secs(60),
        }]
    });
    let session = node
        .create(&["sh", "-c", "printf 'Deploy now? [y/n] '; read a; exit 3"])
        .await
        .id;
    // The first POST is answered 500; the retry a second later lands.
    let all = wait_for(&got, 2, "the waiting notification and its retry").await;
    assert_eq!((all[0].answered, all[1].answered), (500, 200));
    assert_eq!(
        all[0].body, all[1].body,
        "the retry is the same notification"
    );
    let body: Value = serde_json::from_str(&all[1].body).unwrap();
    assert_eq!(body["session"], session.as_str());
    assert_eq!(body["node"], "t1");
    assert_eq!(body["state"], "waiting");
    assert_eq!(body["waiting_for"], "Deploy now? [y/n]");
    assert!(body["seq"].as_u64().unwrap() > 0);
    let link = body["url"].as_str().unwrap();
    assert!(link.ends_with(&format!("/#/session/{session}")), "{link}");
    let auth = all[1].headers.iter().find(|(k, _)| k == "authorization");
    assert_eq!(auth.map(|(_, v)| v.as_str()), Some("Bearer hook-token"));

    let mut c = node.client(OPERATOR).await;
    c.send(&termesh_transport::ClientMsg::Input {
        session: session.clone(),
        data: b"y\n".to_vec(),
    })
    .await
    .unwrap();
    let all = wait_for(&got, 3, "the failure's notification").await;
    let failed: Value = serde_json::from_str(&all[2].body).unwrap();
    assert_eq!(failed["state"], "failed");
    assert_eq!(failed["session"], session.as_str());
    // Sent and counted: two notifications (one change each), no more.
    // (counted once the POST's answer is read, a moment after it arrived)
    within(PATIENCE, "two notifications counted", async {
        loop {
            let metrics = http_get(&format!("{}/metrics", node.url()), VIEWER).await;
            if metrics.contains("termesh_notify_sent_total{node=\"t1\"} 2\n") {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    let waiting_posts = all
        .iter()
        .filter(|g| g.answered == 200 && g.body.contains("\"waiting\""))
        .count();
    assert_eq!(waiting_posts, 1);
}
