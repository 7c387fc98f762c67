//! The node's sessions by id, as connections, peers and requests read
//! them: a read-mostly map behind a lock, written only by the `Registry`,
//! so a keystroke never waits for a message round trip.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use actix::Addr;
use termesh_transport::SessionInfo;

use crate::directory::homes::Home;
use crate::session::{SessionActor, SessionShared};

/// What others hold to reach a session.
#[derive(Clone)]
pub struct SessionHandle {
    pub id: Arc<str>,
    pub addr: Addr<SessionActor>,
    /// The PTY writer's queue: input goes here directly.
    pub input: crate::session::pty::InputTx,
    pub shared: Arc<SessionShared>,
    /// The thread the session and its PTY's tasks run on.
    pub home: Home,
}

impl std::fmt::Debug for SessionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHandle")
            .field("id", &self.id)
            .finish()
    }
}

/// The node's sessions by id; written only by the `Registry`. The flag is
/// set when the node shuts down and empties it.
#[derive(Clone, Default, Debug)]
pub struct Directory(
    Arc<RwLock<HashMap<Arc<str>, SessionHandle>>>,
    Arc<std::sync::atomic::AtomicBool>,
    crate::directory::bells::Bells,
);

impl Directory {
    /// Who waits for which session's changes (rung by the registry).
    pub fn bells(&self) -> &crate::directory::bells::Bells {
        &self.2
    }

    /// The node is shutting down: its sessions are gone from here, not
    /// removed.
    pub fn closing(&self) -> bool {
        self.1.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn get(&self, id: &str) -> Option<SessionHandle> {
        self.0.read().ok()?.get(id).cloned()
    }

    /// Every session, oldest first.
    pub fn list(&self) -> Vec<SessionInfo> {
        let Ok(map) = self.0.read() else {
            return Vec::new();
        };
        let mut infos: Vec<SessionInfo> = map.values().map(|h| h.shared.info()).collect();
        termesh_transport::oldest_first(&mut infos);
        infos
    }

    /// How many running sessions are waiting, working and idle.
    pub fn states(&self) -> [(termesh_transport::AgentState, u64); 3] {
        use termesh_transport::AgentState::*;
        let mut counts = [(Waiting, 0), (Working, 0), (Idle, 0)];
        if let Ok(map) = self.0.read() {
            for handle in map.values() {
                let state = handle
                    .shared
                    .meta
                    .lock()
                    .ok()
                    .and_then(|m| m.agent.as_ref().map(|a| a.state));
                if let Some((_, n)) = counts.iter_mut().find(|(s, _)| Some(*s) == state) {
                    *n += 1;
                }
            }
        }
        counts
    }

    /// The id of the session (other than `except`) named `name`.
    pub fn named(&self, name: &str, except: Option<&str>) -> Option<String> {
        let map = self.0.read().ok()?;
        map.values()
            .find(|h| Some(&*h.id) != except && h.shared.name().as_deref() == Some(name))
            .map(|h| h.id.to_string())
    }

    /// Every session id.
    pub fn ids(&self) -> Vec<String> {
        self.0
            .read()
            .map(|m| m.keys().map(|k| k.to_string()).collect())
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.0.read().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn insert(&self, handle: SessionHandle) {
        if let Ok(mut map) = self.0.write() {
            map.insert(handle.id.clone(), handle);
        }
    }

    pub(crate) fn remove(&self, id: &str) -> Option<SessionHandle> {
        self.0.write().ok()?.remove(id)
    }

    pub(crate) fn drain(&self) -> Vec<SessionHandle> {
        self.1.store(true, std::sync::atomic::Ordering::SeqCst);
        self.0
            .write()
            .map(|mut m| m.drain().map(|(_, h)| h).collect())
            .unwrap_or_default()
    }
}
