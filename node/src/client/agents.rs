//! The commands around agents (PROTOCOL.md section 15): `termesh send`
//! answers one (by id, id prefix or name as everywhere in the CLI), `next`
//! picks the one waiting longest, `watch` prints state changes.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Context;
use termesh_transport::{
    AgentState, ClientMsg, ErrorCode, SendWhen, ServerMsg, SessionInfo, SessionStatus,
};

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
    let stdin;
    let text = if text == "-" {
        stdin = std::io::read_to_string(std::io::stdin()).context("cannot read standard input")?;
        // `echo y |` means "y", then Enter (which `send` adds).
        let text = stdin.strip_suffix('\n').unwrap_or(&stdin);
        text.strip_suffix('\r').unwrap_or(text)
    } else {
        text
    };
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

/// Exit code of `termesh wait` when the time ran out (as `timeout(1)`).
pub const WAIT_TIMED_OUT: i32 = 124;

/// `termesh wait`: 0 once the session is in one of `until` (printing the
/// state and seq), `WAIT_TIMED_OUT` past `limit`. A connection that drops
/// (the node restarts) is made again, for the time that is left.
pub async fn wait(
    target: &Target,
    wanted: &str,
    until: Vec<String>,
    limit: std::time::Duration,
) -> anyhow::Result<i32> {
    let deadline = std::time::Instant::now() + limit;
    let mut client = Client::connect(target).await?;
    let s = lookup(&mut client, wanted).await?;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let asked = client
            .request(|id| ClientMsg::Wait {
                id,
                session: s.id.clone(),
                until: until.clone(),
                timeout_ms: Some(left.as_millis() as u64),
            })
            .await;
        match asked {
            Ok(ServerMsg::State { state, seq, .. }) => {
                println!("{state} {seq}");
                client.close().await;
                return Ok(0);
            }
            Ok(other) => anyhow::bail!("unexpected answer {other:?}"),
            Err(e) if super::error_code(&e) == Some(ErrorCode::Timeout) => {
                eprintln!(
                    "{} is not {} after {}s",
                    describe(&s),
                    until.join(" or "),
                    limit.as_secs()
                );
                return Ok(WAIT_TIMED_OUT);
            }
            Err(e) if super::error_code(&e).is_some() => {
                return Err(e).with_context(|| format!("cannot wait for {}", describe(&s)));
            }
            // The link dropped: again, while time is left.
            Err(e) => {
                if std::time::Instant::now() >= deadline {
                    return Err(e).context("the node went away and did not come back in time");
                }
                client = reconnect(target, deadline).await?;
            }
        }
    }
}

/// A new connection, tried every 200 ms until `deadline`.
async fn reconnect(target: &Target, deadline: std::time::Instant) -> anyhow::Result<Client> {
    loop {
        match Client::connect(target).await {
            Ok(c) => return Ok(c),
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
}

/// `termesh read`: the text on stdout, the seq it ends at on stderr (or
/// both as JSON).
pub async fn read(target: &Target, wanted: &str, since: u64, json: bool) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
    let s = lookup(&mut client, wanted).await?;
    let reply = client
        .request(|id| ClientMsg::Read {
            id,
            session: s.id.clone(),
            since_seq: Some(since),
            max_bytes: None,
        })
        .await
        .with_context(|| format!("cannot read {}", describe(&s)))?;
    client.close().await;
    let ServerMsg::Text { seq, text, .. } = reply else {
        anyhow::bail!("unexpected answer {reply:?}");
    };
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::json!({ "seq": seq, "text": text }))?;
    } else {
        out.write_all(text.as_bytes())?;
        out.flush()?;
        eprintln!("seq {seq}");
    }
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
