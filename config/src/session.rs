//! The `[session]` section: what a session runs by default, its size, its
//! replay ring, its subscription window, how it is killed, how many a
//! node holds, and when an idle screen model goes.

use std::time::Duration;

use serde::Deserialize;

use crate::{
    check_ring_bytes, default_shell, defaults, duration_or, show, size_or, ConfigError, SizeValue,
};

#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Program run by `create` without `command`.
    pub command: Vec<String>,
    pub cols: u16,
    pub rows: u16,
    pub ring_bytes: usize,
    pub ring_frames: usize,
    /// Window of a subscription that names none, already within the clamp.
    pub default_window: u64,
    pub kill_grace: Duration,
    pub max_sessions: usize,
    /// Quiet this long, a session's screen model goes (its last snapshot
    /// stays).
    pub model_idle: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSession {
    command: Option<Vec<String>>,
    cols: Option<i64>,
    rows: Option<i64>,
    ring_bytes: Option<SizeValue>,
    ring_frames: Option<SizeValue>,
    default_window: Option<SizeValue>,
    kill_grace: Option<String>,
    max_sessions: Option<SizeValue>,
    model_idle: Option<String>,
}

pub(crate) fn parse(s: RawSession, file: &str) -> Result<SessionConfig, ConfigError> {
    let bad = |key: &str, value: String, reason: String| ConfigError::Value {
        file: file.to_string(),
        key: key.to_string(),
        value,
        reason,
    };
    let command = s.command.unwrap_or_else(default_shell);
    if command.is_empty() || command[0].is_empty() {
        return Err(bad(
            "session.command",
            format!("{command:?}"),
            "must name a program".into(),
        ));
    }
    let cols = s.cols.unwrap_or(defaults::COLS.into());
    let (max_cols, max_rows) = (defaults::MAX_COLS, defaults::MAX_ROWS);
    let cols = u16::try_from(cols)
        .ok()
        .filter(|c| (1..=max_cols).contains(c))
        .ok_or_else(|| {
            bad(
                "session.cols",
                cols.to_string(),
                format!("must be 1 to {max_cols}"),
            )
        })?;
    let rows = s.rows.unwrap_or(defaults::ROWS.into());
    let rows = u16::try_from(rows)
        .ok()
        .filter(|r| (1..=max_rows).contains(r))
        .ok_or_else(|| {
            bad(
                "session.rows",
                rows.to_string(),
                format!("must be 1 to {max_rows}"),
            )
        })?;
    let ring_bytes = size_or(&s.ring_bytes, defaults::RING_BYTES)
        .and_then(check_ring_bytes)
        .map_err(|r| bad("session.ring_bytes", show(&s.ring_bytes), r))?;
    let ring_frames = size_or(&s.ring_frames, defaults::RING_FRAMES)
        .and_then(|n| {
            if (16..=10_000_000).contains(&n) {
                Ok(n as usize)
            } else {
                Err("must be 16 to 10000000 frames".into())
            }
        })
        .map_err(|r| bad("session.ring_frames", show(&s.ring_frames), r))?;
    let default_window = size_or(&s.default_window, defaults::WINDOW)
        .and_then(|n| {
            if (defaults::WINDOW_MIN..=defaults::WINDOW_MAX).contains(&n) {
                Ok(n)
            } else {
                Err("must be 16KiB to 16MiB".into())
            }
        })
        .map_err(|r| bad("session.default_window", show(&s.default_window), r))?;
    let kill_grace = duration_or(&s.kill_grace, defaults::KILL_GRACE)
        .map_err(|r| bad("session.kill_grace", format!("{:?}", s.kill_grace), r))?;
    let model_idle = duration_or(&s.model_idle, defaults::MODEL_IDLE)
        .and_then(|d| {
            if (Duration::from_millis(100)..=Duration::from_secs(86_400)).contains(&d) {
                Ok(d)
            } else {
                Err("must be 100ms to 24h".into())
            }
        })
        .map_err(|r| bad("session.model_idle", format!("{:?}", s.model_idle), r))?;
    let max_sessions = size_or(&s.max_sessions, defaults::MAX_SESSIONS)
        .and_then(|n| {
            if (1..=100_000).contains(&n) {
                Ok(n as usize)
            } else {
                Err("must be 1 to 100000".into())
            }
        })
        .map_err(|r| bad("session.max_sessions", show(&s.max_sessions), r))?;
    Ok(SessionConfig {
        command,
        cols,
        rows,
        ring_bytes,
        ring_frames,
        default_window,
        kill_grace,
        max_sessions,
        model_idle,
    })
}
