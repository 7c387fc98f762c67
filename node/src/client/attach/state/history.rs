//! The scroll mode's history, the attach's side of PROTOCOL.md section 14:
//! the newest page when the mode opens, older pages as the view reaches the
//! top, raw pages as a search goes on past what is loaded or a placeholder
//! comes into view.

use termesh_transport::ClientMsg;

use super::*;

/// The scroll mode's older pages, a search's raw pages, and the raw pages
/// of placeholders.
pub(super) const HISTORY_OLDER_ID: u64 = 5;
pub(super) const HISTORY_SCAN_ID: u64 = 6;
pub(super) const HISTORY_FILL_ID: u64 = 7;
/// Rows of history a page brings.
const HISTORY_ROWS: u32 = 2_000;

impl State {
    /// A page came: the newest one opens the scroll mode (and takes the
    /// keys typed while it loaded), an older one goes above the rest;
    /// either may want more.
    pub(super) fn on_history(&mut self, id: u64, lines: Vec<String>, older: Option<u64>) {
        let wants = if id == HISTORY_ID {
            self.notice = None;
            if !self.view.open_scroll(lines, older) {
                self.notify("no scroll mode with --raw: use the terminal's scrollback".into());
            }
            self.scroll_wanted
                .take()
                .filter(|k| !k.is_empty())
                .map(|keys| self.view.scroll_keys(&keys))
        } else {
            self.view.scroll_older(lines, older)
        };
        self.ask_scroll(wants)
    }

    /// A raw page for the scroll mode: a search's or a placeholder's.
    pub(super) fn on_raw_page(&mut self, id: u64, page: RawPage) {
        let wants = self.view.scroll_raw(id == HISTORY_FILL_ID, page);
        self.ask_scroll(wants)
    }

    /// Asks for what the scroll mode wants, if anything.
    pub(super) fn ask_scroll(&mut self, want: Option<Scrolled>) {
        let (id, limit, before, rows) = match want {
            Some(Scrolled::Older(before)) => {
                (HISTORY_OLDER_ID, None, Some(before), Some(HISTORY_ROWS))
            }
            Some(Scrolled::Raw {
                before,
                limit,
                fill,
            }) => {
                let id = if fill {
                    HISTORY_FILL_ID
                } else {
                    HISTORY_SCAN_ID
                };
                (id, Some(limit), Some(before), None)
            }
            _ => return,
        };
        self.send(ClientMsg::History {
            id,
            session: self.opts.session.clone(),
            limit,
            before_seq: before,
            rows,
        });
    }

    /// Asks for the newest page of history, which opens the scroll mode.
    pub(super) fn ask_newest(&mut self) {
        self.ask_page(None);
    }

    /// Asks for the page of history before seq `before` (the newest for
    /// `None`), which opens the scroll mode.
    pub(super) fn ask_page(&mut self, before: Option<u64>) {
        self.send(ClientMsg::History {
            id: HISTORY_ID,
            session: self.opts.session.clone(),
            limit: None,
            before_seq: before,
            rows: Some(HISTORY_ROWS),
        });
    }
}
