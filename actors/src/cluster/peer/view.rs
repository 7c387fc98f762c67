//! What this node knows of the other nodes' sessions: each owner's last
//! directory, merged from its snapshot and deltas, and whether its link is
//! up. Written only by that peer's `PeerActor`; read by `list` and REST.
//! While a link is down its sessions stay, shown as `unreachable`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use termesh_transport::{SessionInfo, SessionStatus};

#[derive(Debug, Default)]
struct RemoteNode {
    up: bool,
    /// Its directory arrived at least once since this node started.
    heard: bool,
    /// Each session as its owner last told it, and when it was told (its
    /// `idle_ms` grows from then on).
    sessions: BTreeMap<String, (SessionInfo, Instant)>,
}

/// The remote part of the cluster's directory.
#[derive(Debug, Clone, Default)]
pub struct ClusterView(Arc<RwLock<HashMap<String, RemoteNode>>>);

impl ClusterView {
    fn with<T>(&self, node: &str, f: impl FnOnce(&mut RemoteNode) -> T) -> T {
        let mut map = self.0.write().unwrap_or_else(|p| p.into_inner());
        f(map.entry(node.to_string()).or_default())
    }

    /// Replaces what `node` owns; returns the ids that are gone.
    pub fn replace(&self, node: &str, sessions: Vec<SessionInfo>) -> Vec<String> {
        self.with(node, |n| {
            n.heard = true;
            let now = Instant::now();
            let fresh: BTreeMap<String, (SessionInfo, Instant)> = sessions
                .into_iter()
                .map(|s| (s.id.clone(), (s, now)))
                .collect();
            let gone = n
                .sessions
                .keys()
                .filter(|id| !fresh.contains_key(*id))
                .cloned()
                .collect();
            n.sessions = fresh;
            gone
        })
    }

    /// `node` left the cluster: its sessions go; returns their ids.
    pub fn forget(&self, node: &str) -> Vec<String> {
        let mut map = self.0.write().unwrap_or_else(|p| p.into_inner());
        map.remove(node)
            .map(|n| n.sessions.into_keys().collect())
            .unwrap_or_default()
    }

    pub fn upsert(&self, node: &str, session: SessionInfo) {
        self.with(node, |n| {
            n.sessions
                .insert(session.id.clone(), (session, Instant::now()));
        });
    }

    pub fn remove(&self, node: &str, id: &str) -> bool {
        self.with(node, |n| n.sessions.remove(id).is_some())
    }

    /// Marks the link to `node` up or down; returns its sessions as `list`
    /// now shows them.
    pub fn set_up(&self, node: &str, up: bool) -> Vec<SessionInfo> {
        self.with(node, |n| {
            n.up = up;
            n.sessions.values().map(|s| shown(s, up)).collect()
        })
    }

    /// Every remote session, `unreachable` where its owner's link is down.
    pub fn list(&self) -> Vec<SessionInfo> {
        let map = self.0.read().unwrap_or_else(|p| p.into_inner());
        map.values()
            .flat_map(|n| n.sessions.values().map(|s| shown(s, n.up)))
            .collect()
    }

    /// Every remote session's id.
    pub fn ids(&self) -> Vec<String> {
        let map = self.0.read().unwrap_or_else(|p| p.into_inner());
        map.values()
            .flat_map(|n| n.sessions.keys().map(|k| k.to_string()))
            .collect()
    }

    /// Whether `node`'s directory arrived since this node started.
    pub fn heard(&self, node: &str) -> bool {
        let map = self.0.read().unwrap_or_else(|p| p.into_inner());
        map.get(node).is_some_and(|n| n.heard)
    }

    /// How many sessions `node` owns, as last told.
    pub fn count(&self, node: &str) -> usize {
        let map = self.0.read().unwrap_or_else(|p| p.into_inner());
        map.get(node).map_or(0, |n| n.sessions.len())
    }

    /// Whether a node other than `node` owns `id` as this view knows it.
    pub fn claimed_by_other(&self, node: &str, id: &str) -> bool {
        let map = self.0.read().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .any(|(name, n)| name != node && n.sessions.contains_key(id))
    }

    /// A remote session and whether its owner is reachable.
    pub fn get(&self, id: &str) -> Option<(SessionInfo, bool)> {
        let map = self.0.read().unwrap_or_else(|p| p.into_inner());
        map.values()
            .find_map(|n| n.sessions.get(id).map(|s| (shown(s, n.up), n.up)))
    }

    /// The remote session as `list` shows it.
    pub fn shown(&self, node: &str, id: &str) -> Option<SessionInfo> {
        let map = self.0.read().unwrap_or_else(|p| p.into_inner());
        let n = map.get(node)?;
        n.sessions.get(id).map(|s| shown(s, n.up))
    }
}

fn shown((s, told): &(SessionInfo, Instant), up: bool) -> SessionInfo {
    let mut s = s.clone();
    s.idle_ms = s.idle_ms.saturating_add(told.elapsed().as_millis() as u64);
    if !up {
        s.status = SessionStatus::Unreachable;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str) -> SessionInfo {
        SessionInfo {
            id: id.into(),
            name: None,
            node: "b".into(),
            command: vec!["sh".into()],
            cwd: None,
            status: SessionStatus::Running,
            exit_code: None,
            phase: None,
            created_at: 0,
            cols: 80,
            rows: 24,
            last_seq: 0,
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
    fn a_session_is_claimed_by_its_first_owner_only() {
        let v = ClusterView::default();
        v.upsert("b", info("1"));
        assert!(!v.claimed_by_other("b", "1"));
        assert!(
            v.claimed_by_other("c", "1"),
            "c may not announce b's session"
        );
        assert!(!v.claimed_by_other("c", "2"));
    }

    #[test]
    fn snapshots_deltas_and_unreachable() {
        let v = ClusterView::default();
        v.set_up("b", true);
        assert!(v.replace("b", vec![info("1"), info("2")]).is_empty());
        v.upsert("b", info("3"));
        assert!(v.remove("b", "1"));
        assert_eq!(v.list().len(), 2);
        let down = v.set_up("b", false);
        assert!(down.iter().all(|s| s.status == SessionStatus::Unreachable));
        assert!(!v.get("2").unwrap().1);
        // Up again: the owner's snapshot replaces what was held.
        v.set_up("b", true);
        assert_eq!(
            v.replace("b", vec![info("3"), info("4")]),
            vec!["2".to_string()]
        );
        let mut ids: Vec<String> = v.list().into_iter().map(|s| s.id).collect();
        ids.sort();
        assert_eq!(ids, ["3", "4"]);
        assert!(v.list().iter().all(|s| s.status == SessionStatus::Running));
    }
}
