//! The attach's status row: what it says (the link's state first, then
//! the prefix menu, then a notice), the detach hint always first.

use std::time::Instant;

use super::*;

impl State {
    /// Puts the right text in the status row: the link's state first, then
    /// the prefix menu, then a notice.
    pub fn refresh_status(&mut self) {
        if self
            .notice
            .as_ref()
            .is_some_and(|(_, until)| Instant::now() >= *until)
        {
            self.notice = None;
        }
        let detach = format!("[termesh] {} d detaches", key_name(self.opts.prefix));
        let text = if let Some(since) = self.offline_since {
            let next = match self.retry_at {
                Some(at) => format!("next try in {}s", secs_until(at)),
                None => "connecting".to_string(),
            };
            let what = match &self.node_stopped {
                Some(_) => "node stopped; waiting for it to come back".to_string(),
                None => format!("link down {}s", since.elapsed().as_secs()),
            };
            Some(format!(
                "{detach} · {what} · retry {} · {next} · keys typed now are sent on reconnect",
                self.backoff.attempts(),
            ))
        } else if let Some(quiet) = self.quiet_for {
            Some(format!(
                "{detach} · no word from the node for {}s; reconnecting after {}s",
                quiet.as_secs(),
                self.stale_after.as_secs()
            ))
        } else if let Some(since) = self.owner_unreachable {
            Some(format!(
                "{detach} · the session's node is unreachable ({}s); its output resumes when it is back",
                since.elapsed().as_secs(),
            ))
        } else if self.keys.armed() {
            Some(self.help())
        } else {
            self.notice.as_ref().map(|(text, _)| text.clone())
        };
        self.view.set_status(text);
        self.schedule_redraw();
    }

    pub(super) fn help(&self) -> String {
        let p = key_name(self.opts.prefix);
        format!(
            "[termesh] {p} then: d detach · s take the size · [ scroll · {p} send {p} · other keys cancel"
        )
    }

    pub(super) fn notify(&mut self, text: String) {
        let text = if text.starts_with("[termesh]") {
            text
        } else {
            format!("[termesh] {text}")
        };
        self.notice = Some((text, Instant::now() + NOTICE));
    }
}

fn secs_until(at: Instant) -> u64 {
    at.saturating_duration_since(Instant::now())
        .as_secs_f64()
        .ceil() as u64
}

/// `^]` for 0x1d.
pub fn key_name(key: u8) -> String {
    format!("^{}", char::from(key + b'@'))
}
