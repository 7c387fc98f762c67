//! `wait` and `read` (PROTOCOL.md section 15). A wait is answered by the
//! node the client asked, from what it knows of the session (its own, or
//! what the owner announced): it rings at every change, so a wait on
//! another node's session costs the mesh nothing and outlives the owner's
//! restart (the owner announces its sessions again when it is back). A
//! `send` held for another node's session waits here the same way, then is
//! forwarded to be written at once. `read` is answered by the owner from
//! the output log, as plain text (`plain`).

use std::time::Duration;

use termesh_transport::{
    AgentState, ErrorCode, SessionInfo, MAX_READ_OUTPUT, WAIT_DEFAULT_MS, WAIT_MAX_MS,
};

use super::ops::NodeCtx;
use crate::error::ApiError;

/// What a `wait` waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Until {
    states: Vec<AgentState>,
}

impl Until {
    /// `until` as sent: states and/or `exited` (an ended session always
    /// answers `exited`), at least one.
    pub fn parse(until: &[String]) -> Result<Until, ApiError> {
        if until.is_empty() {
            return Err(ApiError::bad_request(
                "`until` names no state: give one or more of working, waiting, idle, exited",
            ));
        }
        let mut states = Vec::new();
        for name in until {
            match (name.as_str(), AgentState::parse(name)) {
                ("exited", _) => {}
                (_, Some(state)) => states.push(state),
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "`until` has `{name}`: the states are working, waiting, idle and exited"
                    )))
                }
            }
        }
        Ok(Until { states })
    }

    /// The answer when `info` is one of these: its state (or `exited`)
    /// and its seq.
    pub fn reached(&self, info: &SessionInfo) -> Option<(String, u64)> {
        if info.status.has_ended() {
            return Some(("exited".into(), info.last_seq));
        }
        match info.state {
            Some(state) if self.states.contains(&state) => {
                Some((state.as_str().to_string(), info.last_seq))
            }
            _ => None,
        }
    }
}

/// A `timeout_ms` as sent, checked.
pub fn wait_limit(timeout_ms: Option<u64>) -> Result<Duration, ApiError> {
    let ms = timeout_ms.unwrap_or(WAIT_DEFAULT_MS);
    if ms > WAIT_MAX_MS {
        return Err(ApiError::bad_request(format!(
            "`timeout_ms` of {ms} is over the {WAIT_MAX_MS} ms bound"
        )));
    }
    Ok(Duration::from_millis(ms))
}

impl NodeCtx {
    /// Waits until session `id` is in one of `until`, at most `limit`.
    pub async fn wait(
        &self,
        id: &str,
        until: &Until,
        limit: Duration,
    ) -> Result<(String, u64), ApiError> {
        let bell = self.dir.bells().bell(id)?;
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let rung = bell.rung();
            tokio::pin!(rung);
            // Enabled before the session is read: a change in between rings.
            rung.as_mut().enable();
            if let Some(answer) = until.reached(&self.info(id)?) {
                return Ok(answer);
            }
            if tokio::time::timeout_at(deadline, rung).await.is_err() {
                return Err(ApiError::new(
                    ErrorCode::Timeout,
                    format!(
                        "session `{id}` did not reach {:?} within {} ms",
                        until.states.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
                        limit.as_millis()
                    ),
                ));
            }
        }
    }

    /// What session `id` (of this node) printed after `since`, as plain
    /// text, and the seq it ends at (`since` when nothing followed).
    pub async fn read_text(
        &self,
        id: &str,
        since: u64,
        max_bytes: Option<u64>,
    ) -> Result<(u64, String), ApiError> {
        let max = max_bytes.unwrap_or(MAX_READ_OUTPUT);
        let frames = self.read_output(id, since, max).await?;
        let seq = frames.last().map_or(since, |f| f.seq);
        let bytes: Vec<u8> = frames.into_iter().flat_map(|f| f.data).collect();
        Ok((seq, super::plain::text(&bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_takes_states_and_exited_and_refuses_the_rest() {
        assert!(Until::parse(&[]).is_err());
        assert!(Until::parse(&["sleeping".into()]).is_err());
        let u = Until::parse(&["waiting".into(), "exited".into()]).unwrap();
        assert_eq!(u.states, vec![AgentState::Waiting]);
        assert!(wait_limit(Some(WAIT_MAX_MS + 1)).is_err());
        assert_eq!(
            wait_limit(None).unwrap(),
            Duration::from_millis(WAIT_DEFAULT_MS)
        );
    }
}
