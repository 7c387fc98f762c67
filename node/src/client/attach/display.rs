//! What the attach loop asks of a display: the renderer (`View`, the
//! default) or the pass-through (`Raw`, `--raw` or output that is not a
//! terminal).

use std::time::{Duration, Instant};

use super::raw::Raw;
pub use super::scan::RawPage;
pub use super::scroll::{Failed, Scrolled};

/// A crop of a raw display is drawn at most this often.
const RAW_REDRAW: Duration = Duration::from_millis(20);

pub trait Display {
    /// The session's screen at `cols` x `rows` (a fresh attach or a
    /// resync, `reset` on the raw display).
    fn snapshot(&mut self, cols: u16, rows: u16, data: &[u8], reset: bool);
    fn output(&mut self, data: &[u8]);
    fn session_resized(&mut self, cols: u16, rows: u16);
    fn term_resized(&mut self, term: (u16, u16));
    /// The status row's text, `None` for none.
    fn set_status(&mut self, text: Option<String>);
    /// When the next frame is due; `None`: nothing to draw.
    fn due(&self) -> Option<Instant>;
    fn redraw(&mut self);
    /// Writes what is buffered (and a frame that is due) to the terminal.
    fn flush(&mut self) -> std::io::Result<()>;
    /// Leaves the terminal as it was found, `note` on a line of its own.
    fn restore(&mut self, note: &str);
    /// On the way out, the session's last screen is printed (it ended).
    fn keep_screen(&mut self);
    /// Opens the scroll mode over `lines` (`older`: the seq they begin
    /// at while older output is retained); false where there is none.
    fn open_scroll(&mut self, lines: Vec<String>, older: Option<u64>) -> bool;
    fn scrolling(&self) -> bool;
    /// Keys typed in the scroll mode: whether it is still open, and the
    /// page of history it wants next (`Scrolled::Older`).
    fn scroll_keys(&mut self, bytes: &[u8]) -> Scrolled;
    /// The older page the scroll mode asked for; answers what it wants
    /// next.
    fn scroll_older(&mut self, _lines: Vec<String>, _older: Option<u64>) -> Option<Scrolled> {
        None
    }
    /// A raw page the scroll mode asked for: a placeholder's (`fill`) or
    /// a search's; answers what it wants next.
    fn scroll_raw(&mut self, _fill: bool, _page: RawPage) -> Option<Scrolled> {
        None
    }
    /// What the last keys asked for past the first (`scroll_keys`).
    fn scroll_more(&mut self) -> Vec<Scrolled> {
        Vec::new()
    }
    /// A page the scroll mode asked for was refused.
    fn scroll_failed(&mut self, _what: Failed, _why: &str) {}
    /// The session's screen (a snapshot) replaces the model, then
    /// `replay` is fed on it (a resync after a resize).
    fn replace(&mut self, _cols: u16, _rows: u16, _data: &[u8], _replay: &[Vec<u8>]) {}
    /// Keys for the program as it should get them (mouse reports moved to
    /// the session's cells, or taken out when the mouse is the attach's),
    /// and whether the wheel went up on the attach's own mouse.
    fn map_input(&self, keys: Vec<u8>) -> (Vec<u8>, bool) {
        (keys, false)
    }
    /// Keys sent to the program, the stream at `seq` (predictive echo).
    fn typed(&mut self, _keys: &[u8], _seq: u64) {}
    /// The stream is at `seq` (after output, and on every tick): guesses
    /// are confirmed or taken back.
    fn settle(&mut self, _seq: u64) {}
    /// A measured round trip of the link.
    fn rtt(&mut self, _rtt: Duration) {}
    /// Predictive echo is on: the link's round trip is wanted.
    fn predicting(&self) -> bool {
        false
    }
}

impl Display for Raw {
    fn snapshot(&mut self, cols: u16, rows: u16, data: &[u8], reset: bool) {
        Raw::snapshot(self, cols, rows, data, reset)
    }
    fn output(&mut self, data: &[u8]) {
        Raw::output(self, data)
    }
    fn session_resized(&mut self, cols: u16, rows: u16) {
        Raw::session_resized(self, cols, rows)
    }
    fn term_resized(&mut self, term: (u16, u16)) {
        Raw::term_resized(self, term)
    }
    fn set_status(&mut self, text: Option<String>) {
        Raw::set_status(self, text)
    }
    fn due(&self) -> Option<Instant> {
        self.needs_redraw().then(|| Instant::now() + RAW_REDRAW)
    }
    fn redraw(&mut self) {
        Raw::redraw(self)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Raw::flush(self)
    }
    fn restore(&mut self, note: &str) {
        Raw::restore(self, note)
    }
    fn keep_screen(&mut self) {
        Raw::keep_screen(self)
    }
    fn open_scroll(&mut self, _: Vec<String>, _: Option<u64>) -> bool {
        false
    }
    fn scrolling(&self) -> bool {
        false
    }
    fn scroll_keys(&mut self, _: &[u8]) -> Scrolled {
        Scrolled::Quit
    }
}
