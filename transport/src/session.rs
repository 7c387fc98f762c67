//! A session as the protocol shows it (PROTOCOL.md section 6): its
//! `SessionInfo`, its status, and its state for its person (section 15).

use serde::{Deserialize, Serialize};

/// Status of a session in `SessionInfo.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Running,
    Exited,
    Lost,
    Unreachable,
}

impl SessionStatus {
    /// Its program is gone for good (exited, or lost with its node):
    /// `termesh ls` hides these unless asked. `unreachable` is not ended:
    /// the program may still run behind a cut link.
    pub fn has_ended(self) -> bool {
        matches!(self, SessionStatus::Exited | SessionStatus::Lost)
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Running => "running",
            SessionStatus::Exited => "exited",
            SessionStatus::Lost => "lost",
            SessionStatus::Unreachable => "unreachable",
        }
    }
}

/// A session as `list`, `created` and `session_changed` describe it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub node: String,
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    pub status: SessionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    pub created_at: u64,
    pub cols: u16,
    pub rows: u16,
    pub last_seq: u64,
    pub viewers: u32,
    pub idle_ms: u64,
    pub at_prompt: bool,
    pub tags: Vec<String>,
    /// A running session's state (PROTOCOL.md section 15); none once its
    /// program is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<AgentState>,
    /// Unix ms the state began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_since: Option<u64>,
    /// When `waiting`: the line on its screen that asks, or the hook's
    /// message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
}

/// What a running session is doing, as far as a person is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentState {
    /// It needs a person: a question on its screen, a prompt after its
    /// turn, or its agent hook said so.
    Waiting,
    /// Output in the last few seconds, or its agent hook said so.
    Working,
    /// Quiet, asking nothing.
    Idle,
}

impl AgentState {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentState::Waiting => "waiting",
            AgentState::Working => "working",
            AgentState::Idle => "idle",
        }
    }

    pub fn parse(text: &str) -> Option<AgentState> {
        match text {
            "waiting" => Some(AgentState::Waiting),
            "working" => Some(AgentState::Working),
            "idle" => Some(AgentState::Idle),
            _ => None,
        }
    }
}

/// `list`'s order: oldest first, by id among sessions created in the same
/// millisecond.
pub fn oldest_first(sessions: &mut [SessionInfo]) {
    sessions.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
}
