//! Naming sessions on the command line: by id, by name, or by a unique
//! prefix of the id, as tmux users expect; `attach` with no name picks
//! the most recently active session.

use termesh_transport::{SessionInfo, SessionStatus};

/// The session `wanted` names: an exact id, then an exact name, then the
/// only session whose id or name starts with it. An ambiguous prefix lists
/// the candidates: a short prefix that starts one session's id and
/// another's name is not silently taken as the id.
pub fn resolve<'a>(sessions: &'a [SessionInfo], wanted: &str) -> Result<&'a SessionInfo, String> {
    if wanted.is_empty() {
        return Err("an empty session name: give an id, an id prefix or a name".into());
    }
    if let Some(s) = sessions.iter().find(|s| s.id == wanted) {
        return Ok(s);
    }
    let named: Vec<&SessionInfo> = sessions
        .iter()
        .filter(|s| s.name.as_deref() == Some(wanted))
        .collect();
    match named.as_slice() {
        [one] => return Ok(one),
        [] => {}
        many => return Err(ambiguous(wanted, "is the name of", many)),
    }
    let prefixed: Vec<&SessionInfo> = sessions
        .iter()
        .filter(|s| {
            s.id.starts_with(wanted) || s.name.as_deref().is_some_and(|n| n.starts_with(wanted))
        })
        .collect();
    match prefixed.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "no session named `{wanted}` or with an id or a name starting with it \
             (`termesh ls` lists them)"
        )),
        many => Err(ambiguous(wanted, "starts the ids or names of", many)),
    }
}

fn ambiguous(wanted: &str, how: &str, many: &[&SessionInfo]) -> String {
    let list: Vec<String> = many.iter().map(|s| describe(s)).collect();
    format!(
        "`{wanted}` {how} {} sessions: {}; give more of the id or the name",
        many.len(),
        list.join(", ")
    )
}

/// `id (name)` or `id`.
pub fn describe(s: &SessionInfo) -> String {
    match &s.name {
        Some(name) => format!("{} ({name})", s.id),
        None => s.id.clone(),
    }
}

/// For a bare `attach`: the session last attached (`last`) while it runs,
/// else the one with the most recent output.
pub fn last_or_most_recent<'a>(
    sessions: &'a [SessionInfo],
    last: Option<&str>,
) -> Result<&'a SessionInfo, String> {
    let again = last.and_then(|id| {
        sessions
            .iter()
            .find(|s| s.id == id && s.status == SessionStatus::Running)
    });
    again.map_or_else(|| most_recent(sessions), Ok)
}

/// The running session with the most recent output, for a bare `attach`.
pub fn most_recent(sessions: &[SessionInfo]) -> Result<&SessionInfo, String> {
    sessions
        .iter()
        .filter(|s| s.status == SessionStatus::Running)
        .min_by_key(|s| s.idle_ms)
        .ok_or_else(|| {
            if sessions.is_empty() {
                "no sessions: start one with `termesh new --attach`".to_string()
            } else {
                "no running session: name one of `termesh ls` to see how it ended".to_string()
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str, name: Option<&str>, idle_ms: u64, running: bool) -> SessionInfo {
        SessionInfo {
            id: id.into(),
            name: name.map(Into::into),
            node: "n".into(),
            command: vec!["sh".into()],
            cwd: None,
            status: if running {
                SessionStatus::Running
            } else {
                SessionStatus::Exited
            },
            exit_code: None,
            phase: None,
            created_at: 0,
            cols: 80,
            rows: 24,
            last_seq: 0,
            viewers: 0,
            idle_ms,
            at_prompt: false,
            tags: vec![],
            state: None,
            state_since: None,
            waiting_for: None,
        }
    }

    #[test]
    fn ids_names_and_prefixes() {
        let all = [
            session("0b5a11111111", Some("build"), 50, true),
            session("0b7c22222222", None, 10, true),
            session("9f0033333333", Some("0b5a11111111x"), 5, false),
        ];
        assert_eq!(resolve(&all, "0b5a11111111").unwrap().id, "0b5a11111111");
        assert_eq!(resolve(&all, "build").unwrap().id, "0b5a11111111");
        // An id's prefix that also starts another's name is ambiguous.
        assert!(resolve(&all, "0b5").unwrap_err().contains("2 sessions"));
        assert_eq!(resolve(&all, "0b7").unwrap().id, "0b7c22222222");
        assert_eq!(resolve(&all, "9").unwrap().id, "9f0033333333");
        let err = resolve(&all, "0b").unwrap_err();
        assert!(
            err.contains("3 sessions")
                && err.contains("0b5a11111111 (build)")
                && err.contains("0b7c22222222"),
            "{err}"
        );
        assert!(resolve(&all, "zz").unwrap_err().contains("no session"));
        // A name's prefix names it.
        assert_eq!(resolve(&all, "bui").unwrap().id, "0b5a11111111");
        assert!(resolve(&all, "").is_err());
        assert_eq!(most_recent(&all).unwrap().id, "0b7c22222222");
        assert!(most_recent(&[]).unwrap_err().contains("no sessions"));
    }

    #[test]
    fn a_prefix_of_one_id_and_another_name_is_ambiguous() {
        let all = [
            session("c0ffee111111", Some("api"), 50, true),
            session("0b7c22222222", Some("codex"), 10, true),
        ];
        // `c` starts an id and a name: both are offered, neither taken.
        let err = resolve(&all, "c").unwrap_err();
        assert!(
            err.contains("2 sessions")
                && err.contains("c0ffee111111 (api)")
                && err.contains("0b7c22222222 (codex)"),
            "{err}"
        );
        assert_eq!(resolve(&all, "co").unwrap().id, "0b7c22222222");
        assert_eq!(resolve(&all, "c0").unwrap().id, "c0ffee111111");
    }

    #[test]
    fn a_bare_attach_returns_to_the_last_session_while_it_runs() {
        let all = [
            session("0b5a11111111", Some("build"), 50, true),
            session("0b7c22222222", None, 10, true),
            session("9f0033333333", None, 5, false),
        ];
        let pick = |last| last_or_most_recent(&all, last).unwrap().id.clone();
        assert_eq!(pick(Some("0b5a11111111")), "0b5a11111111");
        // Ended, or gone: the most recent output instead.
        assert_eq!(pick(Some("9f0033333333")), "0b7c22222222");
        assert_eq!(pick(Some("gone")), "0b7c22222222");
        assert_eq!(pick(None), "0b7c22222222");
    }
}
