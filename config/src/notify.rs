//! `[[notify]]`: where a node posts when one of its sessions starts to
//! need its person (PROTOCOL.md section 15, "Notifications").

use std::time::Duration;

use serde::Deserialize;

use crate::ConfigError;

/// Most `[[notify]]` entries.
pub const MAX_NOTIFY: usize = 16;
/// The longest URL.
pub const MAX_URL: usize = 2048;

/// How a notification's body is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyFormat {
    /// `{session, name, node, state, waiting_for, seq, url}`.
    Json,
    /// An ntfy topic URL: the text as the body, a title and a click link.
    Ntfy,
    /// A Slack-compatible incoming webhook: `{"text": ...}`.
    Slack,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyConfig {
    pub url: String,
    pub format: NotifyFormat,
    /// States (`waiting`, `working`, `idle`) and/or `failed` (a non-zero
    /// exit).
    pub on: Vec<String>,
    pub token: Option<String>,
    /// A session notified of a state is not notified of it again within
    /// this time (a flapping prompt pages once).
    pub quiet: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNotify {
    url: Option<String>,
    format: Option<String>,
    on: Option<Vec<String>>,
    token: Option<String>,
    quiet: Option<String>,
}

const DEFAULT_QUIET: Duration = Duration::from_secs(60);

pub(crate) fn parse(raw: Vec<RawNotify>, file: &str) -> Result<Vec<NotifyConfig>, ConfigError> {
    let bad = |key: String, value: String, reason: &str| ConfigError::Value {
        file: file.to_string(),
        key,
        value,
        reason: reason.to_string(),
    };
    if raw.len() > MAX_NOTIFY {
        return Err(bad(
            "notify".into(),
            format!("{} entries", raw.len()),
            &format!("at most {MAX_NOTIFY}"),
        ));
    }
    let mut out = Vec::new();
    for (i, n) in raw.into_iter().enumerate() {
        let key = |field: &str| format!("notify[{i}].{field}");
        let url = n.url.unwrap_or_default();
        let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
        if !scheme_ok || url.len() > MAX_URL || url.chars().any(char::is_whitespace) {
            return Err(bad(
                key("url"),
                format!("{url:?}"),
                "an http:// or https:// URL of at most 2048 bytes",
            ));
        }
        let format = match n.format.as_deref().unwrap_or("json") {
            "json" => NotifyFormat::Json,
            "ntfy" => NotifyFormat::Ntfy,
            "slack" => NotifyFormat::Slack,
            other => {
                return Err(bad(
                    key("format"),
                    format!("{other:?}"),
                    "one of json, ntfy, slack",
                ))
            }
        };
        let on =
            n.on.unwrap_or_else(|| vec!["waiting".into(), "failed".into()]);
        let known = ["waiting", "working", "idle", "failed"];
        if on.is_empty() || on.iter().any(|o| !known.contains(&o.as_str())) {
            return Err(bad(
                key("on"),
                format!("{on:?}"),
                "one or more of waiting, working, idle, failed",
            ));
        }
        if n.token
            .as_ref()
            .is_some_and(|t| t.is_empty() || t.len() > 4096 || t.contains(['\r', '\n']))
        {
            return Err(bad(
                key("token"),
                "(hidden)".into(),
                "one line of at most 4096 bytes",
            ));
        }
        let quiet = crate::duration_or(&n.quiet, DEFAULT_QUIET)
            .map_err(|r| bad(key("quiet"), format!("{:?}", n.quiet), &r))?;
        if quiet > crate::DAY {
            return Err(bad(key("quiet"), format!("{:?}", n.quiet), "at most a day"));
        }
        out.push(NotifyConfig {
            url,
            format,
            on,
            token: n.token,
            quiet,
        });
    }
    Ok(out)
}
