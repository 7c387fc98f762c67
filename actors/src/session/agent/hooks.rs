//! What an agent CLI's lifecycle hook means (PROTOCOL.md section 12, "Hook
//! phases", and section 15): a phase for `SessionInfo.phase` and a state.
//! Claude Code's and Gemini CLI's hook names, and Codex's `notify` payload
//! (`type`), are known; others are recorded and change nothing.

use serde_json::Value;

use super::rules::clean;
use super::Hook;

/// The hook's name: `hook_event_name` (Claude Code, Gemini CLI) or `type`
/// (Codex's `notify`).
pub fn name(body: &Value) -> Option<&str> {
    body.get("hook_event_name")
        .or_else(|| body.get("type"))
        .and_then(Value::as_str)
}

/// The phase and the state a hook sets.
pub fn meaning(name: &str, body: &Value) -> (Option<&'static str>, Option<Hook>) {
    let text = |key: &str, default: &str| {
        let said = body.get(key).and_then(Value::as_str).map(clean);
        Hook::Waiting(
            said.filter(|s| !s.is_empty())
                .unwrap_or_else(|| default.into()),
        )
    };
    let next_prompt = "waiting for your next prompt";
    match name {
        "UserPromptSubmit" => (Some("running"), Some(Hook::Working)),
        "Stop" => (Some("waiting"), Some(text("message", next_prompt))),
        "StopFailure" => (Some("failed"), Some(text("error", "its turn failed"))),
        "SessionEnd" => (Some("completed"), None),
        // An agent asking permission, or idle for a while.
        "Notification" => (None, Some(text("message", "it needs your attention"))),
        "PreToolUse" | "PostToolUse" | "BeforeTool" | "AfterTool" | "BeforeAgent" => {
            (None, Some(Hook::Working))
        }
        "AfterAgent" => (Some("waiting"), Some(text("message", next_prompt))),
        "agent-turn-complete" => (
            Some("waiting"),
            Some(text("last-assistant-message", next_prompt)),
        ),
        _ => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claude_codex_and_gemini_hooks_set_phase_and_state() {
        let body = json!({"hook_event_name": "Notification", "message": "Claude needs your permission to use Bash"});
        assert_eq!(
            meaning(name(&body).unwrap(), &body),
            (
                None,
                Some(Hook::Waiting(
                    "Claude needs your permission to use Bash".into()
                ))
            )
        );
        let stop = json!({"hook_event_name": "Stop"});
        assert_eq!(
            meaning("Stop", &stop),
            (
                Some("waiting"),
                Some(Hook::Waiting("waiting for your next prompt".into()))
            )
        );
        let codex =
            json!({"type": "agent-turn-complete", "last-assistant-message": "Done: tests pass"});
        assert_eq!(name(&codex), Some("agent-turn-complete"));
        assert_eq!(
            meaning("agent-turn-complete", &codex).1,
            Some(Hook::Waiting("Done: tests pass".into()))
        );
        assert_eq!(
            meaning("PreToolUse", &json!({})),
            (None, Some(Hook::Working))
        );
        assert_eq!(meaning("SomethingNew", &json!({})), (None, None));
    }
}
