//! The hook commands `termesh hooks install` writes, run as the agents
//! run them from inside a real session: Codex's `notify` (the payload as
//! its last argument) and Gemini CLI's hook (the payload on stdin, `{}`
//! printed back) each set the session's state.

mod common;

use common::*;
use serde_json::{json, Value};
use termesh_transport::CreateRequest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_installed_codex_notify_reports_a_turn_from_inside_a_session() {
    let home = tempfile::tempdir().unwrap();
    termesh_node::hooks::install("codex", home.path()).unwrap();
    let written = std::fs::read_to_string(home.path().join(".codex/config.toml")).unwrap();
    let doc: toml_edit::DocumentMut = written.parse().unwrap();
    let notify: Vec<String> = doc["notify"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let node = TestNode::start();
    // As Codex runs it: the program and its arguments, the payload last.
    let payload =
        json!({"type": "agent-turn-complete", "last-assistant-message": "All tests pass"});
    let mut command = notify.clone();
    command.push(payload.to_string());
    let script = "\"$@\"; echo notify-exit-$?; exec sleep 1000".to_string();
    let mut argv = vec!["sh".to_string(), "-c".into(), script, "sh".into()];
    argv.extend(command);
    let info = node
        .create_with(CreateRequest {
            command: Some(argv),
            ..Default::default()
        })
        .await;
    wait_output(&node, &info.id, "notify-exit-0").await;
    // The POST landed (stored as a `hook` event), then the state it set.
    within(PATIENCE, "the notify's hook event stored", async {
        while !stored_events(&node, &info.id, 0)
            .await
            .iter()
            .any(|e| e["kind"] == "hook")
        {
            poll_pause().await;
        }
    })
    .await;
    let waiting = node
        .wait_info(&info.id, "the turn's end reported", |s| {
            s.waiting_for.as_deref() == Some("All tests pass")
        })
        .await;
    assert_eq!(waiting.phase.as_deref(), Some("waiting"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_installed_gemini_hook_reports_from_inside_a_session_and_prints_json() {
    let home = tempfile::tempdir().unwrap();
    termesh_node::hooks::install("gemini", home.path()).unwrap();
    let settings: Value = serde_json::from_str(
        &std::fs::read_to_string(home.path().join(".gemini/settings.json")).unwrap(),
    )
    .unwrap();
    let command = settings["hooks"]["Notification"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    let node = TestNode::start();
    let payload = json!({"hook_event_name": "Notification", "message": "Gemini wants to run ls"});
    let info = node
        .create_with(CreateRequest {
            command: Some(vec![
                "sh".into(),
                "-c".into(),
                "out=$(printf %s \"$PAYLOAD\" | sh -c \"$HOOK\"); echo \"hook-said-$out\"; exec sleep 1000"
                    .into(),
            ]),
            env: Some(
                [
                    ("PAYLOAD".to_string(), payload.to_string()),
                    ("HOOK".to_string(), command),
                ]
                .into(),
            ),
            ..Default::default()
        })
        .await;
    // Gemini CLI parses what a hook prints as JSON: it prints `{}`.
    wait_output(&node, &info.id, "hook-said-{}").await;
    node.wait_info(&info.id, "the notification's state", |s| {
        s.waiting_for.as_deref() == Some("Gemini wants to run ls")
    })
    .await;
}
