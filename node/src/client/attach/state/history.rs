//! The scroll mode's history, the attach's side of PROTOCOL.md section 14:
//! the newest page when the mode opens, older pages as the view reaches the
//! top or a search goes on past what is loaded.

use termesh_transport::ClientMsg;

use super::*;

/// The scroll mode's older pages.
pub(super) const HISTORY_OLDER_ID: u64 = 5;
/// Rows of history a page brings.
const HISTORY_ROWS: u32 = 2_000;

impl State {
    /// A page came: the newest one opens the scroll mode (and takes the
    /// keys typed while it loaded), an older one goes above the rest;
    /// either may want the page before it.
    pub(super) async fn on_history(
        &mut self,
        conn: &mut Client,
        id: u64,
        lines: Vec<String>,
        older: Option<u64>,
    ) -> anyhow::Result<()> {
        let wants = if id == HISTORY_ID {
            self.notice = None;
            if !self.view.open_scroll(lines, older) {
                self.notify("no scroll mode with --raw: use the terminal's scrollback".into());
            }
            match self.scroll_wanted.take().filter(|k| !k.is_empty()) {
                Some(keys) => match self.view.scroll_keys(&keys) {
                    Scrolled::Older(before) => Some(before),
                    _ => None,
                },
                None => None,
            }
        } else {
            self.view.scroll_older(lines, older)
        };
        match wants {
            Some(before) => self.ask_history(conn, HISTORY_OLDER_ID, Some(before)).await,
            None => Ok(()),
        }
    }

    /// Asks for a page of history for the scroll mode: the newest
    /// (`before` none) or the one before `before`.
    pub(super) async fn ask_history(
        &self,
        conn: &mut Client,
        id: u64,
        before: Option<u64>,
    ) -> anyhow::Result<()> {
        conn.send(&ClientMsg::History {
            id,
            session: self.opts.session.clone(),
            limit: None,
            before_seq: before,
            rows: Some(HISTORY_ROWS),
        })
        .await?;
        Ok(())
    }
}
