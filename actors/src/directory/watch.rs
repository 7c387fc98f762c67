//! Watch notifications, coalesced per watcher. A watcher's socket may be
//! full (an actix-web-actors actor is then not polled), so the registry
//! never queues messages for it: it records the latest state of each
//! session in the watcher's `WatchQueue` and sends at most one nudge until
//! the watcher drains. Memory per watcher is bounded by the sessions that
//! exist (plus removals not yet told), whatever the churn.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use actix::Message;
use termesh_transport::SessionInfo;

/// What a watcher is told.
#[derive(Debug, Clone, PartialEq)]
// Nearly every event is a change, as large as its `SessionInfo`: boxing it
// would add an allocation to each to save memory on the rare removal.
#[allow(clippy::large_enum_variant)]
pub enum WatchEvent {
    Changed(SessionInfo),
    Removed(String),
}

impl WatchEvent {
    pub fn session(&self) -> &str {
        match self {
            WatchEvent::Changed(info) => &info.id,
            WatchEvent::Removed(id) => id,
        }
    }
}

/// "Your queue has news": sent once until the watcher drains.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct WatchReady;

/// Pending notifications of one watcher: pure logic.
#[derive(Debug, Default)]
pub struct Coalescer {
    /// Sessions with news, in the order their news first came.
    order: VecDeque<String>,
    latest: HashMap<String, WatchEvent>,
    /// Sessions the watcher knows exist (it listed them, or was told):
    /// only those need a removal notice.
    known: HashSet<String>,
    nudged: bool,
}

impl Coalescer {
    /// Starts knowing `sessions` (the ones a `list` would show now).
    pub fn new(sessions: impl IntoIterator<Item = String>) -> Self {
        Coalescer {
            known: sessions.into_iter().collect(),
            ..Default::default()
        }
    }

    /// Records `event`; returns whether the watcher must be nudged.
    pub fn push(&mut self, event: WatchEvent) -> bool {
        let id = event.session().to_string();
        let unknown_removal = matches!(event, WatchEvent::Removed(_)) && !self.known.contains(&id);
        if unknown_removal {
            // Created and removed before the watcher heard of it: nothing
            // to tell.
            if self.latest.remove(&id).is_some() {
                self.order.retain(|x| *x != id);
            }
            return false;
        }
        if self.latest.insert(id.clone(), event).is_none() {
            self.order.push_back(id);
        }
        !std::mem::replace(&mut self.nudged, true)
    }

    /// Takes everything pending, oldest news first; the next push nudges.
    pub fn drain(&mut self) -> Vec<WatchEvent> {
        self.nudged = false;
        let mut out = Vec::with_capacity(self.order.len());
        for id in self.order.drain(..) {
            if let Some(event) = self.latest.remove(&id) {
                match &event {
                    WatchEvent::Changed(_) => self.known.insert(id),
                    WatchEvent::Removed(_) => self.known.remove(&id),
                };
                out.push(event);
            }
        }
        out
    }

    /// Entries held: pending news and known sessions.
    pub fn footprint(&self) -> usize {
        self.latest.len() + self.known.len()
    }
}

/// A watcher's queue, shared by the registry (writer) and the watcher.
pub type WatchQueue = Arc<Mutex<Coalescer>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str, seq: u64) -> SessionInfo {
        SessionInfo {
            id: id.into(),
            name: None,
            node: "n".into(),
            command: vec![],
            cwd: None,
            status: termesh_transport::SessionStatus::Running,
            exit_code: None,
            phase: None,
            created_at: 0,
            cols: 80,
            rows: 24,
            last_seq: seq,
            viewers: 0,
            idle_ms: 0,
            at_prompt: false,
            tags: vec![],
            state: None,
            state_since: None,
            waiting_for: None,
        }
    }

    #[test]
    fn the_latest_state_per_session_in_first_news_order() {
        let mut c = Coalescer::new(["old".to_string()]);
        assert!(
            c.push(WatchEvent::Changed(info("a", 1))),
            "first news nudges"
        );
        assert!(!c.push(WatchEvent::Changed(info("b", 1))), "one nudge only");
        assert!(!c.push(WatchEvent::Changed(info("a", 2))));
        assert!(!c.push(WatchEvent::Removed("old".into())));
        assert_eq!(
            c.drain(),
            vec![
                WatchEvent::Changed(info("a", 2)),
                WatchEvent::Changed(info("b", 1)),
                WatchEvent::Removed("old".into()),
            ]
        );
        assert!(c.drain().is_empty());
        assert!(
            c.push(WatchEvent::Removed("a".into())),
            "nudges again after a drain"
        );
        assert_eq!(c.drain(), vec![WatchEvent::Removed("a".into())]);
    }

    #[test]
    fn churn_the_watcher_never_saw_leaves_nothing() {
        let mut c = Coalescer::new(Vec::<String>::new());
        for i in 0..100_000 {
            let id = format!("s{i}");
            c.push(WatchEvent::Changed(info(&id, 0)));
            c.push(WatchEvent::Changed(info(&id, 1)));
            c.push(WatchEvent::Removed(id));
        }
        assert_eq!(c.footprint(), 0);
        assert!(c.drain().is_empty());
    }

    #[test]
    fn memory_is_bounded_by_live_sessions_whatever_the_churn() {
        let mut c = Coalescer::new(Vec::<String>::new());
        // Ten live sessions changing forever, and churn of short-lived ones,
        // with the watcher never draining.
        for i in 0..50_000u64 {
            c.push(WatchEvent::Changed(info(&format!("live{}", i % 10), i)));
            let id = format!("brief{i}");
            c.push(WatchEvent::Changed(info(&id, 0)));
            c.push(WatchEvent::Removed(id));
        }
        assert_eq!(c.footprint(), 10);
        let told = c.drain();
        assert_eq!(told.len(), 10);
        assert_eq!(told[9], WatchEvent::Changed(info("live9", 49_999)));
    }
}
