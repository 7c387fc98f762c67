//! `[[agents]]`: programs the node should know as agents, beside its
//! built-in ones (docs/agents.md): which commands, what on their screen
//! means waiting or working (regular expressions, case-insensitive), and
//! what `revive` runs to continue the conversation.

use serde::Deserialize;

use crate::ConfigError;

/// Most `[[agents]]` entries.
pub const MAX_AGENTS: usize = 64;
/// Most patterns (waiting and working together) per entry.
pub const MAX_PATTERNS: usize = 32;
/// The longest pattern, in bytes.
pub const MAX_PATTERN_LEN: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    pub name: String,
    /// Program names matched against the command's first word.
    pub command: Vec<String>,
    pub waiting: Vec<String>,
    pub working: Vec<String>,
    pub resume: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAgent {
    name: Option<String>,
    #[serde(default)]
    command: Vec<String>,
    #[serde(default)]
    waiting: Vec<String>,
    #[serde(default)]
    working: Vec<String>,
    resume: Option<Vec<String>>,
}

pub(crate) fn parse(raw: Vec<RawAgent>, file: &str) -> Result<Vec<AgentConfig>, ConfigError> {
    let bad = |key: String, value: String, reason: &str| ConfigError::Value {
        file: file.to_string(),
        key,
        value,
        reason: reason.to_string(),
    };
    if raw.len() > MAX_AGENTS {
        return Err(bad(
            "agents".into(),
            format!("{} entries", raw.len()),
            &format!("at most {MAX_AGENTS}"),
        ));
    }
    let mut agents: Vec<AgentConfig> = Vec::new();
    for (i, a) in raw.into_iter().enumerate() {
        let key = |field: &str| format!("agents[{i}].{field}");
        let name = a
            .name
            .ok_or_else(|| bad(key("name"), "(none)".into(), "every entry needs a name"))?;
        crate::check_name(&name).map_err(|r| bad(key("name"), format!("{name:?}"), &r))?;
        if agents.iter().any(|other| other.name == name) {
            return Err(bad(key("name"), format!("{name:?}"), "named twice"));
        }
        if a.command.is_empty() || a.command.iter().any(|c| c.is_empty() || c.contains('/')) {
            return Err(bad(
                key("command"),
                format!("{:?}", a.command),
                "program names without a directory, at least one (\"claude\")",
            ));
        }
        if a.waiting.len() + a.working.len() > MAX_PATTERNS {
            return Err(bad(
                key("waiting"),
                format!("{} patterns", a.waiting.len() + a.working.len()),
                &format!("at most {MAX_PATTERNS} patterns (waiting and working)"),
            ));
        }
        for (field, list) in [("waiting", &a.waiting), ("working", &a.working)] {
            for p in list {
                check_pattern(p).map_err(|r| bad(key(field), format!("{p:?}"), &r))?;
            }
        }
        if a.resume
            .as_ref()
            .is_some_and(|r| r.is_empty() || r[0].is_empty())
        {
            return Err(bad(
                key("resume"),
                format!("{:?}", a.resume),
                "must name a program",
            ));
        }
        agents.push(AgentConfig {
            name,
            command: a.command,
            waiting: a.waiting,
            working: a.working,
            resume: a.resume,
        });
    }
    Ok(agents)
}

/// A pattern compiles as the node compiles it (case-insensitive, bounded).
fn check_pattern(p: &str) -> Result<(), String> {
    if p.len() > MAX_PATTERN_LEN {
        return Err(format!("longer than {MAX_PATTERN_LEN} bytes"));
    }
    regex::RegexBuilder::new(p)
        .case_insensitive(true)
        .size_limit(64 * 1024)
        .build()
        .map(drop)
        .map_err(|e| format!("not a regular expression: {e}"))
}
