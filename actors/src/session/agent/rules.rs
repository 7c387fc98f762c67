//! What a screen says about its program: the built-in rules for the
//! common agents and shells (docs/agents.md lists them) and the
//! `[[agents]]` entries of the config, and the classifier that reads the
//! bottom of a screen with them. Pure: text and a cursor in, a verdict out.

use std::sync::Arc;

use regex::{Regex, RegexBuilder};

/// What the bottom of a screen shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// A question or permission prompt: the line that asks.
    Asking(String),
    /// An input prompt with the cursor after it (a shell, a REPL, an
    /// agent's input box): the prompt line.
    Prompt(String),
    /// A spinner or an "esc to interrupt": it works.
    Busy,
    /// Nothing that asks or works.
    Nothing,
}

/// One agent's rules: which programs it is, what on its screen means
/// waiting or working, and what `revive` runs.
#[derive(Debug, Clone)]
pub struct Agent {
    pub name: String,
    /// Program names (the command's first word, without its directory).
    pub programs: Vec<String>,
    pub waiting: Vec<Regex>,
    pub working: Vec<Regex>,
    /// What `revive` runs instead of the command (`None`: the command).
    pub resume: Option<Vec<String>>,
}

pub use termesh_config::agents::AgentConfig as AgentSpec;

/// How many rows at the bottom of what a screen shows are read.
const BOTTOM_ROWS: usize = 12;
/// A pattern's compiled size bound (the config's patterns are input).
const PATTERN_SIZE: usize = 64 * 1024;
/// The longest `waiting_for` kept.
pub const MAX_WAITING_FOR: usize = 200;

/// Compiles a pattern, case-insensitive; the error says which and why.
pub fn pattern(text: &str) -> Result<Regex, String> {
    RegexBuilder::new(text)
        .case_insensitive(true)
        .size_limit(PATTERN_SIZE)
        .build()
        .map_err(|e| format!("the pattern {text:?} is not a regular expression: {e}"))
}

impl Agent {
    pub fn from_spec(spec: &AgentSpec) -> Result<Agent, String> {
        let compile = |list: &[String]| -> Result<Vec<Regex>, String> {
            list.iter().map(|p| pattern(p)).collect()
        };
        Ok(Agent {
            name: spec.name.clone(),
            programs: spec.command.clone(),
            waiting: compile(&spec.waiting)?,
            working: compile(&spec.working)?,
            resume: spec.resume.clone(),
        })
    }
}

/// The built-in agents (docs/agents.md, "Built-in rules").
pub fn built_in() -> Vec<AgentSpec> {
    let s = |list: &[&str]| list.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    vec![
        AgentSpec {
            name: "claude".into(),
            command: s(&["claude"]),
            waiting: s(&[r"^\s*Do you want to", r"^\s*│?\s*Do you want"]),
            working: s(&[r"esc to interrupt"]),
            resume: Some(s(&["claude", "--continue"])),
        },
        AgentSpec {
            name: "codex".into(),
            command: s(&["codex"]),
            waiting: s(&[r"^\s*Allow command\?", r"^\s*Would you like to run"]),
            working: s(&[r"esc to interrupt", r"Working \("]),
            resume: Some(s(&["codex", "resume", "--last"])),
        },
        AgentSpec {
            name: "gemini".into(),
            command: s(&["gemini"]),
            waiting: s(&[r"^\s*│?\s*Allow execution", r"Apply this change\?"]),
            working: s(&[r"esc to cancel"]),
            resume: None,
        },
        AgentSpec {
            name: "aider".into(),
            command: s(&["aider"]),
            waiting: s(&[r"\(Y\)es/\(N\)o"]),
            working: s(&[]),
            resume: Some(s(&["aider", "--restore-chat-history"])),
        },
    ]
}

/// The node's agents: the config's entries first (one named as a built-in
/// replaces it), then the built-ins.
#[derive(Debug, Clone)]
pub struct Agents(Arc<Vec<Agent>>);

impl Default for Agents {
    fn default() -> Self {
        Agents::new(&[]).expect("the built-in rules compile")
    }
}

impl Agents {
    pub fn new(configured: &[AgentSpec]) -> Result<Agents, String> {
        let mut all = Vec::new();
        for spec in configured {
            all.push(Agent::from_spec(spec).map_err(|e| format!("agent `{}`: {e}", spec.name))?);
        }
        for spec in built_in() {
            if !configured.iter().any(|c| c.name == spec.name) {
                all.push(Agent::from_spec(&spec)?);
            }
        }
        Ok(Agents(Arc::new(all)))
    }

    /// The agent `command` runs, if any.
    pub fn of(&self, command: &[String]) -> Option<Agent> {
        let program = program_name(command)?;
        self.0
            .iter()
            .find(|a| a.programs.contains(&program))
            .cloned()
    }
}

/// The program a command runs: its first word without the directory, or
/// for `sh -c "SCRIPT"` the script's first word (after an `exec`).
pub fn program_name(command: &[String]) -> Option<String> {
    let base = |word: &str| word.rsplit('/').next().unwrap_or(word).to_string();
    let first = base(command.first()?);
    let shell = matches!(first.as_str(), "sh" | "bash" | "zsh" | "dash");
    if shell && command.get(1).map(String::as_str) == Some("-c") {
        let mut words = command.get(2)?.split_whitespace();
        let word = match words.next()? {
            "exec" => words.next()?,
            word => word,
        };
        return Some(base(word));
    }
    Some(first)
}

/// Reads the bottom of a screen: `rows` as text, the cursor at
/// (`col`, `row`). `agent`'s own patterns first, then the common ones.
pub fn classify(rows: &[String], cursor: (usize, usize), agent: Option<&Agent>) -> Seen {
    let Some(last) = rows.iter().rposition(|r| !r.trim().is_empty()) else {
        return Seen::Nothing;
    };
    let bottom_start = (last + 1).saturating_sub(BOTTOM_ROWS);
    let bottom: Vec<&str> = rows[bottom_start..=last]
        .iter()
        .map(|r| r.trim_end())
        .collect();
    // What asks and what works, each at its lowest row: the lower one is
    // the newer (a spinner below a menu works; a question below a spinner
    // asks).
    let own = |list: fn(&Agent) -> &Vec<Regex>| agent.and_then(|a| find(&bottom, list(a)));
    let asks = own(|a| &a.waiting).or_else(|| common_question(&bottom));
    let works = own(|a| &a.working).or_else(|| find(&bottom, &common().working));
    match (asks, works) {
        (Some(ask), Some(work)) if work > ask => return Seen::Busy,
        (Some(ask), _) => return Seen::Asking(asking_line(&bottom, ask)),
        (None, Some(_)) => return Seen::Busy,
        (None, None) => {}
    }
    if let Some(prompt) = prompt_at_cursor(rows, cursor, last) {
        return Seen::Prompt(prompt);
    }
    Seen::Nothing
}

/// The common rules, compiled once.
struct Common {
    /// A yes/no question anywhere in the last rows.
    yes_no: Regex,
    /// A question that starts a line.
    question: Regex,
    /// A numbered choice with a selection mark.
    choice: Regex,
    working: Vec<Regex>,
}

fn common() -> &'static Common {
    static COMMON: std::sync::OnceLock<Common> = std::sync::OnceLock::new();
    COMMON.get_or_init(|| Common {
        yes_no: pattern(r"[\[(]\s*y(es)?\s*/\s*n(o)?\s*[\])]").expect("compiles"),
        question: pattern(
            r"^\W*(do you want|would you like|allow|proceed|continue|are you sure)\b.*\?",
        )
        .expect("compiles"),
        choice: pattern(r"^\W*[❯>›▶→●]\s*\d+[.)]\s+\S").expect("compiles"),
        working: vec![
            pattern(r"(esc|ctrl\+c) to (interrupt|cancel)").expect("compiles"),
            pattern(r"^\s*[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏✻✶✳✢✽]\s+\S.*…").expect("compiles"),
        ],
    })
}

/// The last of `bottom`'s rows that one of `patterns` matches.
fn find(bottom: &[&str], patterns: &[Regex]) -> Option<usize> {
    bottom
        .iter()
        .rposition(|row| patterns.iter().any(|p| p.is_match(row)))
}

/// A common question: a yes/no on the last row, a question on one of
/// the last three, or a numbered choice with a selection mark anywhere in
/// the bottom (an answered question scrolls up; a TUI erases its menu).
fn common_question(bottom: &[&str]) -> Option<usize> {
    let c = common();
    let last = bottom.len() - 1;
    if c.yes_no.is_match(bottom[last]) {
        return Some(last);
    }
    if let Some(i) = bottom.iter().position(|r| c.choice.is_match(r)) {
        // The question stands above the choices.
        let above = bottom[..i]
            .iter()
            .rposition(|r| !r.trim().is_empty() && !c.choice.is_match(r));
        return Some(above.unwrap_or(i));
    }
    let tail = bottom.len().saturating_sub(3);
    let question = bottom[tail..].iter().rposition(|r| c.question.is_match(r));
    question.map(|i| tail + i)
}

/// The line that asks, cleaned of frame characters and cut to
/// `MAX_WAITING_FOR`.
fn asking_line(bottom: &[&str], line: usize) -> String {
    clean(bottom[line])
}

pub fn clean(line: &str) -> String {
    let frame = |c: char| c.is_whitespace() || "│┃║|╭╮╰╯─━".contains(c);
    let text = line.trim_matches(frame);
    let mut out: String = text.chars().take(MAX_WAITING_FOR).collect();
    if text.chars().count() > MAX_WAITING_FOR {
        out.push('…');
    }
    out
}

/// A prompt (`$ `, `# `, `% `, `> `, `>>> `, `❯ `) just before the cursor
/// on the last row that shows anything, with nothing but frame characters
/// after it (text typed after the prompt is someone answering).
fn prompt_at_cursor(rows: &[String], (col, row): (usize, usize), last: usize) -> Option<String> {
    if row != last {
        return None;
    }
    let text = rows.get(row)?;
    let mut before: String = text.chars().take(col).collect();
    // Rows come with trailing blanks trimmed: the cursor may stand past.
    let short = col.saturating_sub(before.chars().count());
    before.extend(std::iter::repeat_n(' ', short));
    let after: String = text.chars().skip(col).collect();
    if !after
        .chars()
        .all(|c| c.is_whitespace() || "│┃║".contains(c))
    {
        return None;
    }
    let trimmed = before.trim_end_matches(' ');
    let prompt_end = ["$", "#", "%", ">", "❯", "›"];
    let ends = prompt_end.iter().any(|p| trimmed.ends_with(p)) && before.ends_with(' ');
    (ends && !trimmed.trim().is_empty()).then(|| clean(trimmed))
}
