//! The commands around agents (PROTOCOL.md section 15): `termesh send`
//! answers one (by id, id prefix or name as everywhere in the CLI), `next`
//! picks the one waiting longest, `watch` prints state changes.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Context;
use termesh_transport::{AgentState, ClientMsg, SendWhen, ServerMsg, SessionInfo, SessionStatus};

use super::commands::{list, lookup};
use super::resolve::describe;
use super::{Client, Target};

/// Types `text` into the session (then Enter unless `no_submit`); with
/// `when` waiting, once the session waits.
pub async fn send(
    target: &Target,
    wanted: &str,
    text: &str,
    no_submit: bool,
    when: SendWhen,
) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
    let s = lookup(&mut client, wanted).await?;
    if when == SendWhen::Waiting {
        eprintln!("waiting for {} to wait for you...", describe(&s));
    }
    client
        .request(|id| ClientMsg::Send {
            id,
            session: s.id.clone(),
            text: text.to_string(),
            submit: Some(!no_submit),
            when: Some(when),
        })
        .await
        .with_context(|| format!("cannot send to {}", describe(&s)))?;
    client.close().await;
    Ok(())
}

/// The session `termesh next` goes to: the one waiting longest anywhere in
/// the cluster; after `last` (the one `next` went to before, still
/// waiting because nobody answered) the one waiting next longest, round.
pub fn next_waiting<'a>(
    sessions: &'a [SessionInfo],
    last: Option<&str>,
) -> Option<&'a SessionInfo> {
    let mut waiting: Vec<&SessionInfo> = sessions
        .iter()
        .filter(|s| s.state == Some(AgentState::Waiting))
        .collect();
    waiting.sort_by_key(|s| (s.state_since.unwrap_or(0), s.id.clone()));
    let after = last
        .and_then(|id| waiting.iter().position(|s| s.id == id))
        .map_or(0, |i| i + 1);
    waiting.get(after).or(waiting.first()).copied()
}

/// `termesh next`: the session to attach to, remembered so that the next
/// `next` goes on from it; `None` when none waits.
pub async fn pick_next(target: &Target) -> anyhow::Result<Option<SessionInfo>> {
    let mut client = Client::connect(target).await?;
    let sessions = list(&mut client).await?;
    client.close().await;
    let state = super::last::path();
    let key = format!("next:{}", target.url);
    let last = state.as_deref().and_then(|p| super::last::read(p, &key));
    let Some(found) = next_waiting(&sessions, last.as_deref()).cloned() else {
        return Ok(None);
    };
    if let Some(path) = &state {
        super::last::write(path, &key, &found.id);
    }
    Ok(Some(found))
}

/// One line of `termesh watch`.
fn state_line(s: &SessionInfo) -> String {
    serde_json::json!({
        "session": s.id,
        "name": s.name,
        "node": s.node,
        "state": s.state.map(AgentState::as_str).or(Some(s.status.as_str())),
        "state_since": s.state_since,
        "waiting_for": s.waiting_for,
        "phase": s.phase,
    })
    .to_string()
}

/// `termesh watch`: every session's state, then each change, as JSON lines
/// until interrupted (a session that ends prints its status: `exited`,
/// `lost`; a removed one `removed`).
pub async fn watch(target: &Target) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
    let mut shown: HashMap<String, (Option<AgentState>, SessionStatus)> = HashMap::new();
    let mut out = std::io::stdout().lock();
    for s in list(&mut client).await? {
        writeln!(out, "{}", state_line(&s))?;
        shown.insert(s.id.clone(), (s.state, s.status));
    }
    out.flush()?;
    drop(out);
    client.request(|id| ClientMsg::Watch { id }).await?;
    loop {
        let line = match client.recv().await? {
            ServerMsg::SessionChanged { session } => {
                let now = (session.state, session.status);
                if shown.insert(session.id.clone(), now) == Some(now) {
                    continue;
                }
                state_line(&session)
            }
            ServerMsg::SessionRemoved { session } => {
                shown.remove(&session);
                serde_json::json!({ "session": session, "state": "removed" }).to_string()
            }
            _ => continue,
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(id: &str, since: u64) -> SessionInfo {
        let mut s: SessionInfo = serde_json::from_value(serde_json::json!({
            "id": id, "node": "n", "command": ["claude"], "status": "running",
            "created_at": 0, "cols": 80, "rows": 24, "last_seq": 0, "viewers": 0,
            "idle_ms": 0, "at_prompt": false, "tags": [],
        }))
        .unwrap();
        s.state = Some(AgentState::Waiting);
        s.state_since = Some(since);
        s
    }

    #[test]
    fn next_goes_to_the_longest_waiting_then_on_round() {
        let mut idle = waiting("i", 1);
        idle.state = Some(AgentState::Idle);
        let all = [waiting("b", 20), idle, waiting("a", 10), waiting("c", 30)];
        let id = |last| next_waiting(&all, last).map(|s| s.id.as_str());
        assert_eq!(id(None), Some("a"));
        assert_eq!(id(Some("a")), Some("b"));
        assert_eq!(id(Some("c")), Some("a"), "round");
        assert_eq!(id(Some("answered-meanwhile")), Some("a"));
        assert_eq!(next_waiting(&all[1..2], None), None);
    }
}
