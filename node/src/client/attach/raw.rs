//! `attach --raw` (and an attach whose output is not a terminal): the
//! session's output passes straight through while the session fits this
//! terminal, so `attach | tee` and a terminal's native scrollback work; when it is
//! larger (another viewer took the size) the client shows a readable crop
//! of it instead, drawn from a local emulator that mirrors the session. One
//! status row (the bottom one) tells of the link and of the size; the row
//! beneath it is redrawn from the mirror when the status goes. On the way
//! out every mode the session turned on is turned off again.

use std::io::Write;

use termesh_actors::session::modes::ModeTracker;
use termesh_actors::session::screen::{render_cells, Utf8Decoder};

use super::frame::{origin, screen_rows};

/// Turns off what a session may have turned on, except the alternate
/// screen (left first, only when on): mouse and focus reporting, bracketed
/// paste, application cursor keys and keypad, a hidden cursor, insert mode,
/// a scroll region (inside a cursor save, as it homes the cursor), colours.
const RESET_MODES: &str = "\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l\
\x1b[?1004l\x1b[?2004l\x1b[?1l\x1b>\x1b[4l\x1b[?7h\x1b7\x1b[r\x1b8\x1b[0m\x1b(B\x1b[?25h";

pub struct Raw {
    /// Bytes for the outer terminal, written out by `flush`.
    buf: Vec<u8>,
    mirror: avt::Terminal,
    decoder: Utf8Decoder,
    modes: ModeTracker,
    session: (u16, u16),
    term: (u16, u16),
    /// The session is larger than this terminal: show a crop of it.
    cropped: bool,
    /// The crop needs drawing.
    dirty: bool,
    /// The status row's text, as drawn.
    status: Option<String>,
    /// The outer terminal shows its alternate screen (the session's, or
    /// the one the crop is drawn on).
    outer_alt: bool,
    /// On the way out, a crop's screen is printed on the normal screen
    /// (the session ended: its last screen is worth keeping).
    keep_screen: bool,
    restored: bool,
}

impl Raw {
    pub fn new(term: (u16, u16)) -> Raw {
        Raw {
            buf: Vec::new(),
            mirror: terminal(term),
            decoder: Utf8Decoder::default(),
            modes: ModeTracker::default(),
            session: term,
            term,
            cropped: false,
            dirty: false,
            status: None,
            outer_alt: false,
            keep_screen: false,
            restored: false,
        }
    }

    #[cfg(test)]
    pub fn is_cropped(&self) -> bool {
        self.cropped
    }

    /// A snapshot: the session's screen at `cols` x `rows`; `reset` resets
    /// the outer terminal first (a fresh attach or a resync).
    pub fn snapshot(&mut self, cols: u16, rows: u16, data: &[u8], reset: bool) {
        self.mirror = terminal((cols, rows));
        self.decoder = Utf8Decoder::default();
        self.modes = ModeTracker::default();
        self.session = (cols, rows);
        self.feed_mirror(data);
        let shown = self.status.take();
        if self.needs_crop() {
            self.enter_crop();
        } else {
            self.cropped = false;
            if reset {
                self.buf.extend_from_slice(b"\x1bc");
                self.outer_alt = false;
            }
            self.buf.extend_from_slice(data);
            self.outer_alt |= self.modes.alt_screen();
        }
        self.set_status(shown);
    }

    pub fn output(&mut self, data: &[u8]) {
        if self.cropped {
            self.feed_mirror(data);
            self.dirty = true;
            return;
        }
        // Output under a status row could scroll it into the screen: put
        // back the row it covers (as the mirror has it before this output),
        // write the output, and draw the status again.
        let shown = self.status.take();
        if shown.is_some() {
            self.draw_status(None);
        }
        self.feed_mirror(data);
        self.buf.extend_from_slice(data);
        self.outer_alt = self.modes.alt_screen();
        self.set_status(shown);
    }

    pub fn session_resized(&mut self, cols: u16, rows: u16) {
        if (cols, rows) != self.session {
            self.session = (cols, rows);
            self.mirror.resize(cols.into(), rows.into());
            self.refit();
        }
    }

    pub fn term_resized(&mut self, term: (u16, u16)) {
        if term != self.term {
            self.term = term;
            // Whatever was drawn is the terminal's to reflow now.
            self.status = None;
            self.refit();
            self.dirty = self.cropped;
        }
    }

    /// Shows `text` in the status row, or takes it away (`None`).
    pub fn set_status(&mut self, text: Option<String>) {
        if text == self.status {
            return;
        }
        if self.cropped {
            self.status = text;
            self.dirty = true;
        } else {
            if text.is_some() || self.status.is_some() {
                self.draw_status(text.as_deref());
            }
            self.status = text;
        }
    }

    pub fn needs_redraw(&self) -> bool {
        self.cropped && self.dirty
    }

    /// Draws the crop: the part of the session around its cursor, and a
    /// notice row that says so.
    pub fn redraw(&mut self) {
        if !self.needs_redraw() {
            return;
        }
        self.dirty = false;
        let (tcols, trows) = (usize::from(self.term.0), usize::from(self.term.1));
        let rows = trows.saturating_sub(1).max(1);
        let cursor = self.mirror.cursor();
        let (scols, srows) = self.mirror.size();
        let top = origin(cursor.row, rows, srows);
        let left = origin(cursor.col, tcols, scols);
        self.buf.extend_from_slice(b"\x1b[?25l");
        let screen = self.mirror.screen();
        for (i, line) in screen.visible_lines().skip(top).take(rows).enumerate() {
            let cells = line.cells();
            let mut start = left.min(cells.len());
            let mut end = (left + tcols).min(cells.len());
            let mut row = format!("\x1b[{};1H\x1b[0m", i + 1);
            // Half a wide character at either edge is drawn as a blank.
            if start < end && cells[start].width() == 0 {
                row.push(' ');
                start += 1;
            }
            if end > start && cells[end - 1].width() == 2 {
                end -= 1;
            }
            row.push_str(&render_cells(&cells[start..end]));
            row.push_str("\x1b[0m\x1b[K");
            self.buf.extend_from_slice(row.as_bytes());
        }
        let notice = self.status.clone().unwrap_or_else(|| {
            format!(
                "[termesh] session {}x{} > terminal {}x{}: showing a part; prefix then s takes the size",
                self.session.0, self.session.1, self.term.0, self.term.1
            )
        });
        let notice = status_row(&notice, tcols);
        self.buf
            .extend_from_slice(format!("\x1b[{trows};1H{notice}").as_bytes());
        if cursor.row >= top && cursor.row < top + rows && cursor.col >= left {
            let at = format!(
                "\x1b[{};{}H",
                cursor.row - top + 1,
                (cursor.col - left + 1).min(tcols)
            );
            self.buf.extend_from_slice(at.as_bytes());
            if cursor.visible {
                self.buf.extend_from_slice(b"\x1b[?25h");
            }
        }
    }

    /// Writes what is buffered to the terminal.
    pub fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        out.write_all(&self.buf)?;
        self.buf.clear();
        out.flush()
    }

    /// Leaves the terminal as it was before the attach (status row gone,
    /// modes off, alternate screen left) with `note` on a line of its own;
    /// `flush` writes it.
    pub fn restore(&mut self, note: &str) {
        if std::mem::replace(&mut self.restored, true) {
            return;
        }
        if !self.cropped && self.status.take().is_some() {
            self.draw_status(None);
        }
        self.status = None;
        if std::mem::take(&mut self.outer_alt) {
            self.buf.extend_from_slice(b"\x1b[?1049l");
            if self.cropped && self.keep_screen {
                self.print_screen();
            }
        }
        self.buf.extend_from_slice(RESET_MODES.as_bytes());
        if !note.is_empty() {
            self.buf
                .extend_from_slice(format!("\r\n{note}\r\n").as_bytes());
        }
    }

    pub fn keep_screen(&mut self) {
        self.keep_screen = true;
    }

    /// The session's screen as lines cut to this terminal's width, trailing
    /// blank rows dropped.
    fn print_screen(&mut self) {
        self.buf.extend_from_slice(b"\r\n");
        for row in screen_rows(&self.mirror, usize::from(self.term.0)) {
            self.buf.extend_from_slice(row.as_bytes());
            self.buf.extend_from_slice(b"\r\n");
        }
    }

    fn feed_mirror(&mut self, data: &[u8]) {
        self.modes.feed(data);
        let text = self.decoder.decode(data);
        self.mirror.feed(text.as_ref());
    }

    fn needs_crop(&self) -> bool {
        self.session.0 > self.term.0 || self.session.1 > self.term.1
    }

    fn refit(&mut self) {
        match (self.cropped, self.needs_crop()) {
            (false, true) => self.enter_crop(),
            (true, false) => {
                // Back to passing output through: draw the session's screen
                // from the mirror on a reset terminal.
                self.cropped = false;
                let (cols, _) = self.mirror.size();
                let dump = termesh_actors::session::portable::portable(&self.mirror.dump(), cols);
                // RIS also leaves the crop's alternate screen.
                self.buf.extend_from_slice(b"\x1bc");
                self.outer_alt = self.modes.alt_screen();
                self.buf.extend_from_slice(dump.as_bytes());
                self.buf
                    .extend_from_slice(self.modes.restore_sequence().as_bytes());
                let shown = self.status.take();
                self.set_status(shown);
            }
            _ => {}
        }
    }

    /// The crop is drawn on the alternate screen, so that what the
    /// terminal showed before the attach is still there after it.
    fn enter_crop(&mut self) {
        self.cropped = true;
        self.dirty = true;
        if !std::mem::replace(&mut self.outer_alt, true) {
            self.buf.extend_from_slice(b"\x1b[?1049h");
        }
        self.buf.extend_from_slice(b"\x1b[0m\x1b[H\x1b[2J");
    }

    /// Draws the status row (pass-through only), or puts back the row it
    /// covered as the mirror has it. The cursor and pen are kept (DECSC).
    fn draw_status(&mut self, text: Option<&str>) {
        let (tcols, trows) = (usize::from(self.term.0), usize::from(self.term.1));
        let mut out = format!("\x1b7\x1b[{trows};1H\x1b[0m");
        match text {
            Some(text) => out.push_str(&status_row(text, tcols)),
            None => {
                let row = trows - 1;
                let screen = self.mirror.screen();
                if let Some(line) = screen.visible_lines().nth(row) {
                    let cells = line.cells();
                    out.push_str(&render_cells(&cells[..cells.len().min(tcols)]));
                }
                out.push_str("\x1b[0m\x1b[K");
            }
        }
        out.push_str("\x1b8");
        self.buf.extend_from_slice(out.as_bytes());
    }
}

impl Drop for Raw {
    /// An attach that ends by an error (or a panic) leaves a sane terminal.
    fn drop(&mut self) {
        if cfg!(test) {
            return;
        }
        self.restore("");
        let _ = self.flush();
    }
}

fn terminal((cols, rows): (u16, u16)) -> avt::Terminal {
    avt::Terminal::new(cols.max(1).into(), rows.max(1).into()).expect("sizes are at least 1")
}

/// Reverse-video text cut or padded to `cols`.
fn status_row(text: &str, cols: usize) -> String {
    let mut shown: String = text.chars().take(cols).collect();
    let pad = cols.saturating_sub(shown.chars().count());
    shown.extend(std::iter::repeat_n(' ', pad));
    format!("\x1b[0;7m{shown}\x1b[0m")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(view: &mut Raw, cols: u16, rows: u16) -> Vec<String> {
        view.redraw();
        let mut term = avt::Terminal::new(cols.into(), rows.into()).unwrap();
        term.feed(String::from_utf8_lossy(&view.buf).as_ref());
        term.screen()
            .visible_lines()
            .map(|l| l.text().trim_end().to_string())
            .collect()
    }

    #[test]
    fn a_larger_session_is_shown_cropped_not_wrapped() {
        let mut view = Raw::new((20, 6));
        let mut data = String::new();
        for i in 0..10 {
            data.push_str(&format!("row {i} {}\r\n", "x".repeat(30)));
        }
        data.push_str("$ ");
        view.snapshot(40, 12, data.as_bytes(), true);
        assert!(view.is_cropped());
        let rows = shown(&mut view, 20, 6);
        // Five rows of the session end at its cursor row; none wrapped.
        assert_eq!(rows[0], "row 6 xxxxxxxxxxxxxx");
        assert_eq!(rows[3], "row 9 xxxxxxxxxxxxxx");
        assert_eq!(rows[4], "$");
        assert_eq!(rows[5], "[termesh] session 40");

        // The session shrinks to fit: the screen is drawn whole again.
        view.buf.clear();
        view.session_resized(20, 6);
        assert!(!view.is_cropped());
        let rows = shown(&mut view, 20, 6);
        assert_eq!(rows[5], "$", "{rows:?}");
    }

    #[test]
    fn the_status_row_goes_and_gives_back_what_it_covered() {
        let mut view = Raw::new((20, 4));
        view.snapshot(20, 4, b"a\r\nb\r\nc\r\nbottom", true);
        view.set_status(Some("[termesh] link down".into()));
        let rows = shown(&mut view, 20, 4);
        assert_eq!(rows[3], "[termesh] link down");
        assert_eq!(rows[0], "a");
        view.set_status(None);
        let rows = shown(&mut view, 20, 4);
        assert_eq!(rows, ["a", "b", "c", "bottom"]);
    }

    #[test]
    fn output_under_a_status_row_scrolls_the_screen_not_the_status() {
        let mut view = Raw::new((20, 4));
        view.snapshot(20, 4, b"a\r\nb\r\nc\r\nd", true);
        view.set_status(Some("[termesh] notice".into()));
        view.output(b"\r\ne\r\nf");
        let rows = shown(&mut view, 20, 4);
        assert_eq!(rows, ["c", "d", "e", "[termesh] notice"]);
        view.set_status(None);
        let rows = shown(&mut view, 20, 4);
        assert_eq!(rows, ["c", "d", "e", "f"]);
    }

    #[test]
    fn restore_turns_off_what_the_session_turned_on() {
        let mut view = Raw::new((20, 4));
        view.snapshot(20, 4, b"\x1b[?1049h\x1b[?1000h\x1b[?25lvim", true);
        view.buf.clear();
        view.restore("[termesh] detached");
        let text = String::from_utf8_lossy(&view.buf).into_owned();
        let leave = text
            .find("\x1b[?1049l")
            .expect("leaves the alternate screen");
        let note = text.find("[termesh] detached").unwrap();
        assert!(leave < note && text.contains("\x1b[?1000l") && text.contains("\x1b[?25h"));
    }
}
