//! The part of a session's state others read without messaging it: what
//! `list` and `session_changed` show. Written only by the session actor.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use termesh_transport::{AgentState, SessionInfo, SessionStatus};

#[derive(Debug)]
pub struct SessionShared {
    pub id: Arc<str>,
    pub node: String,
    pub command: Vec<String>,
    pub cwd: Option<String>,
    pub created_at: u64,
    /// What `revive` runs instead of `command` (the create's, or the
    /// agent's known one).
    pub resume_command: Option<Vec<String>>,
    pub last_seq: AtomicU64,
    /// Unix ms of the last output (creation time before any).
    pub last_output_ms: AtomicU64,
    pub viewers: AtomicU32,
    pub at_prompt: AtomicBool,
    /// The program turned bracketed paste on (`send` wraps text in it).
    pub bracketed_paste: AtomicBool,
    /// When input last reached the program, whichever run of it (every
    /// input queue of the session shares it: `InputTx::share_typed`).
    pub typed: super::bulk::Typed,
    /// Set once, when the program has ended; input is refused after.
    pub exited: AtomicBool,
    pub meta: Mutex<Meta>,
}

/// Fields that change rarely, under one lock.
#[derive(Debug, Clone)]
pub struct Meta {
    pub name: Option<String>,
    pub tags: Vec<String>,
    pub cols: u16,
    pub rows: u16,
    pub status: SessionStatus,
    pub exit_code: Option<u32>,
    pub phase: Option<String>,
    /// The running program's state (`None` once it is gone).
    pub agent: Option<AgentView>,
}

/// A session's state as `SessionInfo` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentView {
    pub state: AgentState,
    /// Unix ms.
    pub since: u64,
    pub waiting_for: Option<String>,
}

impl SessionShared {
    pub fn info(&self) -> SessionInfo {
        let meta = self
            .meta
            .lock()
            .map(|m| m.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        let now = now_ms();
        SessionInfo {
            id: self.id.to_string(),
            name: meta.name,
            node: self.node.clone(),
            command: self.command.clone(),
            cwd: self.cwd.clone(),
            status: meta.status,
            exit_code: meta.exit_code,
            phase: meta.phase,
            created_at: self.created_at,
            cols: meta.cols,
            rows: meta.rows,
            last_seq: self.last_seq.load(Ordering::Relaxed),
            viewers: self.viewers.load(Ordering::Relaxed),
            idle_ms: now.saturating_sub(self.last_output_ms.load(Ordering::Relaxed)),
            at_prompt: self.at_prompt.load(Ordering::Relaxed),
            tags: meta.tags,
            state: meta.agent.as_ref().map(|a| a.state),
            state_since: meta.agent.as_ref().map(|a| a.since),
            waiting_for: meta.agent.and_then(|a| a.waiting_for),
        }
    }

    pub fn name(&self) -> Option<String> {
        self.meta
            .lock()
            .map(|m| m.name.clone())
            .unwrap_or_else(|p| p.into_inner().name.clone())
    }

    pub fn update(&self, f: impl FnOnce(&mut Meta)) {
        let mut guard = self.meta.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard);
    }

    pub fn is_exited(&self) -> bool {
        self.exited.load(Ordering::Acquire)
    }
}

pub use crate::clock::now_ms;
