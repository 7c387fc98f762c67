//! A Server-Sent Events reader for tests: `GET .../events/stream` on its
//! own thread (ureq), each event handed over a channel.

use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

use super::{within, PATIENCE};

/// Reads the stream at `url` with `token`; `Last-Event-ID` when given.
/// Each event (`id`, parsed `data`) goes to the channel; it stops after
/// `stop_after` events (closing the connection) or when the stream ends
/// (then the channel closes).
pub fn sse(
    url: String,
    token: &str,
    last_event_id: Option<u64>,
    stop_after: usize,
) -> UnboundedReceiver<(u64, Value)> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let auth = format!("Bearer {token}");
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut req = ureq::get(&url).set("authorization", &auth);
        if let Some(id) = last_event_id {
            req = req.set("Last-Event-ID", &id.to_string());
        }
        let resp = req.call().expect("the stream opens");
        assert_eq!(resp.content_type(), "text/event-stream");
        let reader = std::io::BufReader::new(resp.into_reader());
        let (mut id, mut data, mut sent) = (None, None, 0);
        for line in reader.lines() {
            let Ok(line) = line else { return };
            if let Some(v) = line.strip_prefix("id: ") {
                id = v.parse::<u64>().ok();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = serde_json::from_str::<Value>(v).ok();
            } else if line.is_empty() {
                if let (Some(i), Some(d)) = (id.take(), data.take()) {
                    assert_eq!(d["id"].as_u64(), Some(i), "the SSE id is the event's");
                    if tx.send((i, d)).is_err() {
                        return;
                    }
                    sent += 1;
                    if sent >= stop_after {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// Events from the reader until `until` holds for one (or it ends).
pub async fn take(
    rx: &mut UnboundedReceiver<(u64, Value)>,
    what: &str,
    until: impl Fn(&Value) -> bool,
) -> Vec<(u64, Value)> {
    within(PATIENCE, what, async {
        let mut got = Vec::new();
        while let Some((id, e)) = rx.recv().await {
            let stop = until(&e);
            got.push((id, e));
            if stop {
                break;
            }
        }
        got
    })
    .await
}
