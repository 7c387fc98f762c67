//! `termesh ls`: the sessions as a table cut to the terminal's width
//! (the command column first), ended sessions hidden unless `--all`;
//! sessions waiting for their person first, the longest waiting on top,
//! with the question they ask (`--waiting`: only those).

use std::io::{IsTerminal, Write};

use termesh_transport::{AgentState, SessionInfo, SessionStatus};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use super::commands::{exit_text, list};
use super::{Client, Target};

/// Widths below this are taken as this: a row keeps its id readable.
const MIN_WIDTH: usize = 20;
/// `COLUMNS` above this is a mistake, not a terminal.
const MAX_WIDTH: usize = 4096;

/// Prints the table on stdout (or every session as JSON); how many ended
/// sessions it hid goes to stderr, so `termesh ls | wc -l` and `awk`
/// see only the header and the rows.
pub async fn ls(target: &Target, json: bool, all: bool, waiting: bool) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
    let mut sessions = list(&mut client).await?;
    client.close().await;
    if waiting {
        sessions.retain(|s| s.state == Some(AgentState::Waiting));
    }
    waiting_first(&mut sessions);
    if json {
        println!("{}", serde_json::to_string_pretty(&sessions)?);
        return Ok(());
    }
    let (shown, hidden): (Vec<SessionInfo>, Vec<SessionInfo>) = sessions
        .into_iter()
        .partition(|s| all || !s.status.has_ended());
    let mut out = std::io::stdout().lock();
    out.write_all(table(&shown, width()).as_bytes())?;
    out.flush()?;
    if let Some(note) = hidden_note(hidden.len()) {
        eprintln!("{note}");
    }
    Ok(())
}

/// The width rows are cut to: the terminal's when stdout is one; else
/// `COLUMNS` when set (as `ps` does), so a script can ask for a width;
/// else none (a pipe gets whole rows).
pub fn width() -> Option<usize> {
    if std::io::stdout().is_terminal() {
        return crossterm::terminal::size()
            .ok()
            .map(|(cols, _)| usize::from(cols))
            .filter(|&c| c > 0)
            .map(|c| c.max(MIN_WIDTH));
    }
    let cols = std::env::var("COLUMNS")
        .ok()?
        .trim()
        .parse::<usize>()
        .ok()?;
    (cols > 0).then(|| cols.clamp(MIN_WIDTH, MAX_WIDTH))
}

/// Waiting sessions first, the longest waiting first; the others keep
/// their order (oldest first).
pub fn waiting_first(sessions: &mut [SessionInfo]) {
    sessions.sort_by_key(|s| match s.state {
        Some(AgentState::Waiting) => (0, s.state_since.unwrap_or(0)),
        _ => (1, 0),
    });
}

/// The last line when ended sessions were left out.
pub fn hidden_note(hidden: usize) -> Option<String> {
    match hidden {
        0 => None,
        1 => Some("(1 ended session hidden; --all shows it)".into()),
        n => Some(format!("({n} ended sessions hidden; --all shows them)")),
    }
}

/// Columns left out, in this order, while a row would leave the command
/// fewer than `MIN_COMMAND` columns: SEQ, VIEWERS, NODE, IDLE, STATE.
const DROP_ORDER: [usize; 5] = [5, 6, 2, 7, 4];
/// The command's room that columns are dropped to keep.
const MIN_COMMAND: usize = 16;

/// The `ls` table: columns as wide as their widest cell; at a width too
/// narrow for them all and a readable command, the least useful columns
/// go first (`DROP_ORDER`), then each row is cut to `width` by shortening
/// its command; only a width too small for ID, NAME and STATUS cuts them.
pub fn table(sessions: &[SessionInfo], width: Option<usize>) -> String {
    let header = [
        "ID", "NAME", "NODE", "STATUS", "STATE", "SEQ", "VIEWERS", "IDLE",
    ];
    let rows: Vec<([String; 8], String)> = sessions.iter().map(cells).collect();
    let mut widths = header.map(str::len);
    for (cells, _) in &rows {
        for (w, cell) in widths.iter_mut().zip(cells) {
            *w = (*w).max(cell.width());
        }
    }
    let mut shown = [true; 8];
    let used =
        |shown: &[bool; 8]| -> usize { (0..8).filter(|&i| shown[i]).map(|i| widths[i] + 2).sum() };
    if let Some(width) = width {
        for i in DROP_ORDER {
            if used(&shown) + MIN_COMMAND <= width {
                break;
            }
            shown[i] = false;
        }
    }
    // SEQ, VIEWERS and IDLE are numbers: right-aligned.
    let line = |cells: &[String; 8], command: &str| {
        let mut prefix = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if !shown[i] {
                continue;
            }
            let pad = " ".repeat(w - cell.width());
            match i {
                5.. => prefix.push_str(&format!("{pad}{cell}  ")),
                _ => prefix.push_str(&format!("{cell}{pad}  ")),
            }
        }
        fit(&prefix, command, width)
    };
    let mut out = line(&header.map(String::from), "COMMAND");
    for (cells, command) in &rows {
        out.push_str(&line(cells, command));
    }
    out
}

/// How long a session has been idle, as a person reads it: `45s`, `12m`,
/// `5h`, `3d` (whole units, rounded down).
pub fn idle_text(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..172_800 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

/// A session's cells before the command, and its command on one line
/// (after the question, for a session waiting).
fn cells(s: &SessionInfo) -> ([String; 8], String) {
    let status = match (s.status, s.exit_code) {
        (SessionStatus::Exited, Some(code)) => exit_text(code),
        (status, _) => format!("{status:?}").to_lowercase(),
    };
    let cells = [
        s.id.clone(),
        s.name.clone().unwrap_or_else(|| "-".into()),
        s.node.clone(),
        status,
        s.state.map_or("-", AgentState::as_str).to_string(),
        s.last_seq.to_string(),
        s.viewers.to_string(),
        idle_text(s.idle_ms),
    ];
    let command = s.command.join(" ");
    let last = match (&s.waiting_for, s.state) {
        (Some(question), Some(AgentState::Waiting)) => format!("\"{question}\"  {command}"),
        _ => command,
    };
    (cells, one_line(&last))
}

/// Control characters (a newline in `sh -c '...'`) escaped: a row is one
/// line.
fn one_line(text: &str) -> String {
    text.chars()
        .flat_map(|c| match c.is_control() {
            true => c.escape_default().collect::<Vec<_>>(),
            false => vec![c],
        })
        .collect()
}

/// `prefix` then `command`, cut to `width` (with `…` where cut): the
/// command shrinks first, then the prefix.
fn fit(prefix: &str, command: &str, width: Option<usize>) -> String {
    let Some(width) = width else {
        return format!("{prefix}{command}\n");
    };
    let room = width.saturating_sub(prefix.width());
    let row = if room >= 2 || (room == 1 && command.width() <= 1) {
        format!("{prefix}{}", cut(command, room))
    } else {
        cut(prefix.trim_end(), width)
    };
    format!("{}\n", row.trim_end())
}

/// `text` in at most `width` columns, ending in `…` when shortened.
fn cut(text: &str, width: usize) -> String {
    if text.width() <= width {
        return text.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        out.push(c);
        used += w;
    }
    if width > 0 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str, status: SessionStatus, command: &str) -> SessionInfo {
        SessionInfo {
            id: id.into(),
            name: Some("build".into()),
            node: "n1".into(),
            command: command.split(' ').map(String::from).collect(),
            cwd: None,
            status,
            exit_code: (status == SessionStatus::Exited).then_some(143),
            phase: None,
            created_at: 0,
            cols: 80,
            rows: 24,
            last_seq: 1234,
            viewers: 1,
            idle_ms: 61_000,
            at_prompt: false,
            tags: vec![],
            state: None,
            state_since: None,
            waiting_for: None,
        }
    }

    #[test]
    fn whole_rows_without_a_width() {
        let all = [
            session("0b5a11111111", SessionStatus::Running, "sleep 1000"),
            session("9f0033333333", SessionStatus::Exited, "sh -c x"),
        ];
        let text = table(&all, None);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "ID            NAME   NODE  STATUS      STATE   SEQ  VIEWERS  IDLE  COMMAND",
                "0b5a11111111  build  n1    running     -      1234        1    1m  sleep 1000",
                "9f0033333333  build  n1    TERM (143)  -      1234        1    1m  sh -c x",
            ]
        );
    }

    #[test]
    fn the_command_is_cut_first_then_the_row() {
        let long = format!("vim {}", "x".repeat(200));
        let all = [session("0b5a11111111", SessionStatus::Running, &long)];
        for width in [20, 40, 60, 70, 80, 120] {
            let text = table(&all, Some(width));
            for line in text.lines() {
                assert!(line.width() <= width, "{width}: {line:?}");
            }
            let row = text.lines().nth(1).unwrap();
            if width >= 70 {
                // The status and idle time are kept (SEQ and VIEWERS go
                // below 80 columns); the command ends in `…`.
                assert!(
                    row.contains("running") && row.contains(" 1m ") && row.ends_with('…'),
                    "{width}: {row:?}"
                );
                assert!(row.contains("vim x"), "{width}: {row:?}");
            }
        }
        let wide = format!("echo {}", "漢".repeat(100));
        let text = table(
            &[session("0b5a11111111", SessionStatus::Running, &wide)],
            Some(80),
        );
        assert!(text.lines().all(|l| l.width() <= 80), "{text}");
    }

    #[test]
    fn narrow_rows_keep_the_command_and_drop_columns_first() {
        let all = [session(
            "0b5a11111111",
            SessionStatus::Running,
            "claude --resume",
        )];
        let text = table(&all, Some(60));
        let (head, row) = (text.lines().next().unwrap(), text.lines().nth(1).unwrap());
        assert!(head.ends_with("COMMAND"), "{text}");
        assert!(row.ends_with("claude --resume"), "{text}");
        assert!(!head.contains("SEQ") && !head.contains("VIEWERS"), "{text}");
        assert!(head.contains("IDLE") && head.contains("STATUS"), "{text}");
        let text = table(&all, Some(40));
        let row = text.lines().nth(1).unwrap();
        assert!(row.starts_with("0b5a11111111  build  running"), "{text}");
        assert!(row.contains("claude"), "{text}");
        for width in [20, 40, 60] {
            assert!(table(&all, Some(width)).lines().all(|l| l.width() <= width));
        }
    }

    #[test]
    fn idle_reads_as_a_person_says_it() {
        assert_eq!(idle_text(999), "0s");
        assert_eq!(idle_text(59_999), "59s");
        assert_eq!(idle_text(60_000), "1m");
        assert_eq!(idle_text(3_599_000), "59m");
        assert_eq!(idle_text(3_600_000), "1h");
        assert_eq!(idle_text(47 * 3_600_000), "47h");
        assert_eq!(idle_text(3 * 86_400_000), "3d");
    }

    #[test]
    fn waiting_sessions_come_first_with_their_question() {
        let mut all = [
            session("aaaa11111111", SessionStatus::Running, "bash"),
            session("bbbb22222222", SessionStatus::Running, "claude"),
            session("cccc33333333", SessionStatus::Running, "codex"),
        ];
        all[0].state = Some(AgentState::Idle);
        for (i, since) in [(1, 20), (2, 10)] {
            let s = &mut all[i];
            s.state = Some(AgentState::Waiting);
            s.state_since = Some(since);
            s.waiting_for = Some("Do you want to proceed?".into());
        }
        waiting_first(&mut all);
        let ids: Vec<&str> = all.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["cccc33333333", "bbbb22222222", "aaaa11111111"]);
        let text = table(&all, Some(100));
        let first = text.lines().nth(1).unwrap();
        assert!(first.contains("waiting"), "{first}");
        assert!(
            first.ends_with("\"Do you want to proceed?\"  codex"),
            "{first}"
        );
        let narrow = table(&all, Some(90));
        assert!(narrow.lines().nth(1).unwrap().ends_with('…'), "{narrow}");
    }

    #[test]
    fn control_characters_stay_on_the_row() {
        let mut s = session("0b5a11111111", SessionStatus::Running, "sh");
        s.command = vec!["sh".into(), "-c".into(), "echo a\necho b".into()];
        let text = table(&[s], None);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("echo a\\necho b"), "{text}");
    }

    #[test]
    fn the_note_counts_what_was_hidden() {
        assert_eq!(hidden_note(0), None);
        assert!(hidden_note(1).unwrap().contains("1 ended session hidden"));
        assert_eq!(
            hidden_note(3).unwrap(),
            "(3 ended sessions hidden; --all shows them)"
        );
        assert!(SessionStatus::Lost.has_ended() && SessionStatus::Exited.has_ended());
        assert!(!SessionStatus::Unreachable.has_ended() && !SessionStatus::Running.has_ended());
    }
}
