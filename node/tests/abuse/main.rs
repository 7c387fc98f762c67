//! The abuse suite (issue 28): a real node, real sockets, a hostile client
//! doing what its token allows as hard as it can. Each case asserts the
//! node's memory stays within the case's bound (docs/operations.md,
//! "What one client may cost"), that another client's keystrokes still
//! echo, and that programs run on.

#[path = "../common/mod.rs"]
mod common;

mod connections;
mod peer;
mod requests;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::binary::{client, BinaryNode};
use common::*;
use termesh_transport::{ClientMsg, ServerMsg};

/// The node's resident memory, KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Samples the node's RSS every 10 ms until dropped; `peak()` the most.
pub struct RssWatch {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
}

impl RssWatch {
    pub fn start(pid: u32) -> RssWatch {
        let (stop, peak) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (s, p) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss_kib(pid), Ordering::Relaxed);
                // The sampling period, not a wait for an event: RSS has
                // no event to wait on, and the peak is what is measured.
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        });
        RssWatch { stop, peak }
    }

    pub fn peak_mib(&self) -> f64 {
        self.peak.load(Ordering::Relaxed) as f64 / 1024.0
    }
}

impl Drop for RssWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Another client's keystrokes echo in its own session, `rounds` times.
pub async fn echo_works(node: &BinaryNode, session: &str, rounds: usize) {
    echo_at(&node.target(OPERATOR), session, rounds).await
}

/// Keystrokes through the node `target` names echo in `session`.
pub async fn echo_at(target: &termesh_node::client::Target, session: &str, rounds: usize) {
    let mut c = termesh_node::client::Client::connect(target)
        .await
        .expect("connects");
    let mut s = Stream::new(1 << 20);
    subscribe(&mut c, session, None, 1 << 20).await.unwrap();
    for k in 0..rounds {
        let key = format!("echo-{k}-");
        c.send(&ClientMsg::Input {
            session: session.to_string(),
            data: format!("{key}\r").into_bytes(),
        })
        .await
        .unwrap();
        within(
            PATIENCE,
            "a keystroke's echo",
            pump_until(&mut c, session, &mut s, true, |s| {
                String::from_utf8_lossy(&s.data).contains(&key)
            }),
        )
        .await
        .unwrap();
    }
    c.close().await;
}

/// The session's screen as text.
pub async fn screen_text(node: &BinaryNode, session: &str) -> String {
    let mut c = client(node).await;
    let reply = c
        .request(|id| ClientMsg::Screen {
            id,
            session: session.to_string(),
            scrollback: None,
        })
        .await
        .unwrap();
    c.close().await;
    match reply {
        ServerMsg::Snapshot { data, .. } => String::from_utf8_lossy(&data).into_owned(),
        other => panic!("{other:?}"),
    }
}
