//! `termesh hooks install AGENT`: writes the hook configuration that makes
//! an agent report its lifecycle to `TERMESH_HOOK_URL` (docs/agents.md,
//! "Hooks"), merged into what the user has: entries of its own are kept,
//! one already there is not added twice, a file that does not parse or a
//! setting of the user's own in the way is left alone with the reason.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::Value;

/// Claude Code's hooks, as shipped (`deploy/claude-code-hooks.json`).
const CLAUDE_HOOKS: &str = include_str!("../../deploy/claude-code-hooks.json");

/// The command Codex's `notify` runs: its JSON payload is the last
/// argument, posted as the body.
const CODEX_NOTIFY: &str = "[ -z \"$TERMESH_HOOK_URL\" ] || curl -fsS -m 5 ${TERMESH_CA:+--cacert \"$TERMESH_CA\"} -X POST -H 'Content-Type: application/json' --data-binary \"$1\" \"$TERMESH_HOOK_URL\" >/dev/null 2>&1; exit 0";

/// Gemini CLI's events that say where a turn is; its hook posts the
/// event on stdin and answers the empty JSON its hooks must print.
const GEMINI_EVENTS: [&str; 7] = [
    "SessionStart",
    "BeforeAgent",
    "BeforeTool",
    "AfterTool",
    "Notification",
    "AfterAgent",
    "SessionEnd",
];
const GEMINI_HOOK: &str = "[ -z \"$TERMESH_HOOK_URL\" ] || curl -fsS -m 5 ${TERMESH_CA:+--cacert \"$TERMESH_CA\"} -X POST -H 'Content-Type: application/json' --data-binary @- \"$TERMESH_HOOK_URL\" >/dev/null 2>&1; echo '{}'";

/// The agents this can install hooks for.
pub const AGENTS: [&str; 3] = ["claude", "codex", "gemini"];

/// Installs `agent`'s hooks under `home`; answers the file written, or
/// `None` when everything was there already.
pub fn install(agent: &str, home: &Path) -> anyhow::Result<Option<PathBuf>> {
    match agent {
        "claude" => {
            let shipped: Value =
                serde_json::from_str(CLAUDE_HOOKS).expect("the shipped hooks are JSON");
            merge_hooks(&home.join(".claude/settings.json"), &shipped["hooks"])
        }
        "gemini" => merge_hooks(&home.join(".gemini/settings.json"), &gemini_hooks()),
        "codex" => codex(&home.join(".codex/config.toml")),
        other => bail!(
            "no hooks to install for `{other}` (known: {}); its screen rules apply without them",
            AGENTS.join(", ")
        ),
    }
}

/// Gemini CLI's hooks: one command for each event, every tool matched.
fn gemini_hooks() -> Value {
    let mut hooks = serde_json::Map::new();
    for event in GEMINI_EVENTS {
        let entry = serde_json::json!({
            "matcher": "*",
            "hooks": [{ "name": "termesh", "type": "command", "command": GEMINI_HOOK, "timeout": 10000 }],
        });
        hooks.insert(event.to_string(), Value::Array(vec![entry]));
    }
    Value::Object(hooks)
}

/// Merges `shipped` (event -> entries) into the `hooks` of the settings
/// file at `path` (Claude Code's and Gemini CLI's share the shape).
fn merge_hooks(path: &Path, shipped: &Value) -> anyhow::Result<Option<PathBuf>> {
    let text = read_or_empty(path)?;
    let mut settings: Value = if text.trim().is_empty() {
        serde_json::json!({})
    } else {
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON: left as it is", path.display()))?
    };
    let Some(settings_map) = settings.as_object_mut() else {
        bail!("{} is not a JSON object: left as it is", path.display());
    };
    let hooks = settings_map
        .entry("hooks")
        .or_insert_with(|| serde_json::json!({}));
    let Some(hooks) = hooks.as_object_mut() else {
        bail!(
            "`hooks` in {} is not an object: left as it is",
            path.display()
        );
    };
    let mut added = false;
    for (event, entries) in shipped.as_object().expect("hooks by event") {
        let list = hooks
            .entry(event.clone())
            .or_insert_with(|| Value::Array(Vec::new()));
        let Some(list) = list.as_array_mut() else {
            bail!(
                "`hooks.{event}` in {} is not a list: left as it is",
                path.display()
            );
        };
        for entry in entries.as_array().expect("a list") {
            if !list.contains(entry) {
                list.push(entry.clone());
                added = true;
            }
        }
    }
    if !added {
        return Ok(None);
    }
    write(
        path,
        &format!("{}\n", serde_json::to_string_pretty(&settings)?),
    )?;
    Ok(Some(path.to_path_buf()))
}

/// Sets Codex's `notify` to post its payload, unless the user has a
/// `notify` of their own.
fn codex(path: &Path) -> anyhow::Result<Option<PathBuf>> {
    let text = read_or_empty(path)?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("{} is not TOML: left as it is", path.display()))?;
    let ours = ["sh", "-c", CODEX_NOTIFY, "termesh-hook"];
    if let Some(theirs) = doc.get("notify") {
        let same = theirs.as_array().is_some_and(|a| {
            a.iter()
                .map(|v| v.as_str())
                .eq(ours.iter().map(|s| Some(*s)))
        });
        if same {
            return Ok(None);
        }
        bail!(
            "{} has a `notify` of its own: left as it is (Codex runs one notify program; \
             make yours post its last argument to $TERMESH_HOOK_URL as well)",
            path.display()
        );
    }
    let mut value = toml_edit::value(ours.iter().copied().collect::<toml_edit::Array>());
    if let Some(v) = value.as_value_mut() {
        v.decor_mut().set_prefix(" ");
    }
    doc.insert("notify", value);
    if let Some(mut key) = doc.key_mut("notify") {
        key.leaf_decor_mut().set_prefix(
            "# termesh: Codex's turn ends are posted to the session's TERMESH_HOOK_URL\n",
        );
    }
    write(path, &doc.to_string())?;
    Ok(Some(path.to_path_buf()))
}

fn read_or_empty(path: &Path) -> anyhow::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Writes `text` to `path` whole (a temporary file renamed over it), its
/// folder made when missing.
fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = path.with_extension("termesh-tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_hooks_merge_with_the_users_and_only_once() {
        let home = tempfile::tempdir().unwrap();
        let path = home.path().join(".claude/settings.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mine = serde_json::json!({
            "model": "opus",
            "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]}
        });
        std::fs::write(&path, mine.to_string()).unwrap();
        assert_eq!(install("claude", home.path()).unwrap(), Some(path.clone()));
        let merged: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(merged["model"], "opus");
        let stop = merged["hooks"]["Stop"].as_array().unwrap();
        assert_eq!(stop.len(), 2, "mine kept, termesh's added");
        assert!(stop[1].to_string().contains("TERMESH_HOOK_URL"));
        for event in [
            "PreToolUse",
            "Notification",
            "UserPromptSubmit",
            "SessionEnd",
        ] {
            assert!(merged["hooks"][event].is_array(), "{event}");
        }
        assert_eq!(
            install("claude", home.path()).unwrap(),
            None,
            "nothing twice"
        );
        std::fs::write(&path, "{ not json").unwrap();
        assert!(install("claude", home.path())
            .unwrap_err()
            .to_string()
            .contains("not JSON"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{ not json");
    }

    #[test]
    fn codex_notify_is_set_before_any_table_unless_the_user_has_one() {
        let home = tempfile::tempdir().unwrap();
        let path = home.path().join(".codex/config.toml");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "model = \"o3\"\n[profiles.fast]\nmodel = \"mini\"\n").unwrap();
        install("codex", home.path()).unwrap();
        let written = std::fs::read_to_string(&path).unwrap();
        let t: toml_edit::DocumentMut = written.parse().unwrap();
        assert_eq!(t["model"].as_str(), Some("o3"));
        assert_eq!(t["profiles"]["fast"]["model"].as_str(), Some("mini"));
        assert_eq!(
            t["notify"].as_array().unwrap().get(0).unwrap().as_str(),
            Some("sh")
        );
        // Still a top-level key when read back as plain TOML (before the table).
        assert!(
            written.find("notify").unwrap() < written.find("[profiles").unwrap(),
            "{written}"
        );
        assert_eq!(install("codex", home.path()).unwrap(), None);
        std::fs::write(&path, "notify = [\"my-notifier\"]\n").unwrap();
        assert!(install("codex", home.path())
            .unwrap_err()
            .to_string()
            .contains("of its own"));
        assert!(install("aider", home.path()).is_err());
        install("gemini", home.path()).unwrap();
        let g: Value = serde_json::from_str(
            &std::fs::read_to_string(home.path().join(".gemini/settings.json")).unwrap(),
        )
        .unwrap();
        assert!(g["hooks"]["AfterAgent"][0]["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .contains("TERMESH_HOOK_URL"));
        assert_eq!(install("gemini", home.path()).unwrap(), None);
    }
}
