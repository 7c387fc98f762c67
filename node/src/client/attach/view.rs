//! The attach renderer, as tmux and mosh draw: the session lives in a local
//! screen model (avt, the emulator the node renders snapshots with) fed by
//! the seq-tagged stream, and the outer terminal's alternate screen shows
//! frames composed from it, written as cell diffs. A session smaller than
//! the terminal sits top-left with its edges marked; a larger one shows
//! through a viewport that follows its cursor, with a notice row. The
//! program's modes reach the outer terminal through `Outer`, which also
//! leaves it as it was found.

use std::io::Write;
use std::time::{Duration, Instant};

use avt::Pen;
use termesh_actors::session::modes::ModeTracker;
use termesh_actors::session::screen::{render_cells, Utf8Decoder};

use super::display::Display;
use super::frame::{diff, origin, Frame, Glyph};
use super::outer::{Modes, Outer};
use super::predict::Predictor;
use super::scroll::Scroll;

/// Frames are drawn at most this often while output streams; the first
/// change after a quiet spell (an echo) is drawn at once.
const FRAME: Duration = Duration::from_millis(8);

pub struct View {
    /// Bytes for the outer terminal, written out by `flush`.
    out: Vec<u8>,
    model: avt::Terminal,
    decoder: Utf8Decoder,
    modes: ModeTracker,
    session: (u16, u16),
    term: (u16, u16),
    outer: Outer,
    /// What the outer terminal shows; `None`: unknown (clear and draw).
    shown: Option<Frame>,
    status: Option<String>,
    /// The prefix key's name, for the notice of a larger session.
    prefix: String,
    /// The session's name, the outer terminal's title.
    name: String,
    scroll: Option<Scroll>,
    predict: Predictor,
    /// The program rang the bell since the last frame.
    bell: bool,
    /// A snapshot arrived: there is something to draw.
    live: bool,
    dirty: bool,
    last_draw: Instant,
    keep_screen: bool,
    restored: bool,
}

impl View {
    pub fn new(term: (u16, u16), name: String, prefix: String, predict: bool) -> View {
        View {
            out: Vec::new(),
            model: model(term),
            decoder: Utf8Decoder::default(),
            modes: ModeTracker::default(),
            session: term,
            term,
            outer: Outer::default(),
            shown: None,
            status: None,
            prefix,
            name,
            scroll: None,
            predict: Predictor::new(predict),
            bell: false,
            live: false,
            dirty: false,
            last_draw: Instant::now() - FRAME,
            keep_screen: false,
            restored: false,
        }
    }

    fn feed(&mut self, data: &[u8]) {
        let bells = self.modes.bells();
        self.modes.feed(data);
        if self.modes.bells() != bells {
            self.bell = true;
        }
        let text = self.decoder.decode(data);
        self.model.feed(text.as_ref());
        self.dirty = true;
    }

    /// Composes the frame for the outer terminal and writes the cells that
    /// differ from what it shows.
    fn render(&mut self) {
        self.dirty = false;
        if !self.live || self.restored {
            return;
        }
        self.last_draw = Instant::now();
        let (tcols, trows) = (
            usize::from(self.term.0).max(1),
            usize::from(self.term.1).max(1),
        );
        let mut frame = Frame::blank(tcols, trows);
        let modes = match &self.scroll {
            Some(scroll) => {
                scroll.draw(&mut frame);
                Modes::scrolling(self.title())
            }
            None => {
                self.compose(&mut frame);
                Modes::of_program(&self.modes, self.model.cursor_key_app_mode(), self.title())
            }
        };
        let mut out = std::mem::take(&mut self.out);
        out.extend_from_slice(b"\x1b[?2026h");
        self.outer.enter(&mut out);
        self.outer.sync(&modes, &mut out);
        let shown = match self.shown.take() {
            Some(shown) if shown.size() == frame.size() => shown,
            _ => {
                out.extend_from_slice(b"\x1b[0m\x1b[H\x1b[2J");
                Frame::blank(tcols, trows)
            }
        };
        diff(&shown, &frame, &mut out);
        out.extend_from_slice(b"\x1b[?2026l");
        if std::mem::take(&mut self.bell) {
            out.push(0x07);
        }
        self.shown = Some(frame);
        self.out = out;
    }

    fn title(&self) -> String {
        match self.modes.title() {
            Some(title) if !title.is_empty() => format!("{}: {title}", self.name),
            _ => self.name.clone(),
        }
    }

    /// The live session: at its size top-left, or through a viewport.
    fn compose(&self, frame: &mut Frame) {
        let (tcols, trows) = frame.size();
        let (scols, srows) = self.model.size();
        let fits = scols <= tcols && srows <= trows;
        let notice = match (&self.status, fits) {
            (Some(text), _) => Some(text.clone()),
            (None, true) => None,
            (None, false) => Some(format!(
                "[termesh] session {scols}x{srows} > terminal {tcols}x{trows}: a part follows the cursor · {} s takes the size",
                self.prefix
            )),
        };
        let rows = if notice.is_some() { trows - 1 } else { trows }.max(1);
        let cursor = self.model.cursor();
        let top = origin(cursor.row, rows, srows);
        let left = origin(cursor.col, tcols, scols);
        let screen = self.model.screen();
        for (r, line) in screen.visible_lines().skip(top).take(rows).enumerate() {
            let cells = line.cells();
            for (c, cell) in cells.iter().skip(left).take(tcols).enumerate() {
                frame.rows[r][c] = Glyph::from_cell(cell);
            }
            // Half a wide character at either edge shows as a blank.
            if let Some(first) = frame.rows[r].first_mut() {
                if first.width == 0 {
                    *first = Glyph::blank();
                }
            }
            let last = (scols - left).min(tcols) - 1;
            if frame.rows[r][last].width == 2 {
                frame.rows[r][last] = Glyph::blank();
            }
        }
        // The edges of a smaller session are marked.
        let shown_rows = srows.min(rows);
        if scols < tcols {
            for r in 0..shown_rows {
                frame.rows[r][scols] = Glyph::plain('│');
            }
        }
        if srows < rows {
            for c in 0..scols.min(tcols) {
                frame.rows[srows][c] = Glyph::plain('─');
            }
            if scols < tcols {
                frame.rows[srows][scols] = Glyph::plain('┘');
            }
        }
        if let Some(text) = notice {
            let mut pen = Pen::default();
            pen.set_inverse();
            let end = frame.put_text(trows - 1, 0, &text, pen);
            frame.fill(trows - 1, end, pen);
        }
        let inside = cursor.row >= top && cursor.row < top + rows && cursor.col >= left;
        frame.cursor = (cursor.visible && inside)
            .then(|| (cursor.row - top, (cursor.col - left).min(tcols - 1)));
        // Predicted keys, underlined, and the cursor after them.
        let mut pen = Pen::default();
        pen.set_underline();
        for g in self.predict.shown() {
            let (Some(r), Some(c)) = (g.row.checked_sub(top), g.col.checked_sub(left)) else {
                continue;
            };
            if r < rows && c < tcols {
                frame.rows[r][c] = Glyph {
                    ch: g.ch,
                    width: 1,
                    pen,
                };
                frame.cursor = Some((r, (c + 1).min(tcols - 1)));
            }
        }
    }

    /// The session's last screen as lines cut to the terminal's width,
    /// trailing blank rows dropped, for the normal screen.
    fn print_screen(&mut self) {
        let tcols = usize::from(self.term.0);
        let screen = self.model.screen();
        let mut rows: Vec<String> = screen
            .visible_lines()
            .map(|line| {
                let cells = line.cells();
                let mut end = cells.len().min(tcols);
                if end > 0 && cells[end - 1].width() == 2 {
                    end -= 1;
                }
                render_cells(&cells[..end])
            })
            .collect();
        while rows.last().is_some_and(|r| r.is_empty()) {
            rows.pop();
        }
        for row in rows {
            self.out.extend_from_slice(row.as_bytes());
            self.out.extend_from_slice(b"\r\n");
        }
    }
}

impl Display for View {
    fn snapshot(&mut self, cols: u16, rows: u16, data: &[u8], _reset: bool) {
        self.model = model((cols, rows));
        self.decoder = Utf8Decoder::default();
        self.modes = ModeTracker::default();
        self.session = (cols, rows);
        self.live = true;
        self.feed(data);
        // A snapshot rings no bell.
        self.bell = false;
    }

    fn output(&mut self, data: &[u8]) {
        self.feed(data);
    }

    fn session_resized(&mut self, cols: u16, rows: u16) {
        if (cols, rows) != self.session {
            self.session = (cols, rows);
            self.model.resize(cols.max(1).into(), rows.max(1).into());
            self.dirty = true;
        }
    }

    fn term_resized(&mut self, term: (u16, u16)) {
        if term != self.term {
            self.term = term;
            // The terminal reflowed what it showed: draw it all again.
            self.shown = None;
            self.dirty = true;
        }
    }

    fn set_status(&mut self, text: Option<String>) {
        if text != self.status {
            self.status = text;
            self.dirty = true;
        }
    }

    fn due(&self) -> Option<Instant> {
        (self.dirty && self.live).then(|| (self.last_draw + FRAME).max(Instant::now()))
    }

    fn redraw(&mut self) {
        if self.dirty {
            self.render();
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.due().is_some_and(|at| at <= Instant::now()) {
            self.render();
        }
        if self.out.is_empty() {
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        out.write_all(&self.out)?;
        self.out.clear();
        out.flush()
    }

    fn restore(&mut self, note: &str) {
        if std::mem::replace(&mut self.restored, true) {
            return;
        }
        if self.outer.entered() {
            self.out.extend_from_slice(b"\x1b[?2026l");
            self.outer.leave(&mut self.out);
            if self.keep_screen {
                self.print_screen();
            }
        }
        if !note.is_empty() {
            self.out.extend_from_slice(format!("{note}\r\n").as_bytes());
        }
    }

    fn keep_screen(&mut self) {
        self.keep_screen = true;
    }

    fn open_scroll(&mut self, lines: Vec<String>) -> bool {
        self.scroll = Some(Scroll::new(lines, usize::from(self.session.0)));
        self.dirty = true;
        true
    }

    fn scrolling(&self) -> bool {
        self.scroll.is_some()
    }

    fn typed(&mut self, keys: &[u8], seq: u64) {
        if !self.predict.enabled() {
            return;
        }
        let cursor = self.model.cursor();
        let cols = self.model.size().0;
        let alt = self.modes.alt_screen();
        self.predict
            .typed(keys, (cursor.row, cursor.col), cols, alt, seq);
        self.dirty = true;
    }

    fn settle(&mut self, seq: u64) {
        let screen = self.model.screen();
        let cell = |r: usize, c: usize| Some(screen.line(r)?.cells().get(c)?.char());
        if self.predict.check(seq, cell) {
            self.dirty = true;
        }
    }

    fn rtt(&mut self, rtt: Duration) {
        self.predict.rtt(rtt);
    }

    fn predicting(&self) -> bool {
        self.predict.enabled()
    }

    fn scroll_keys(&mut self, bytes: &[u8]) -> bool {
        let height = usize::from(self.term.1).saturating_sub(1).max(1);
        let Some(scroll) = self.scroll.as_mut() else {
            return false;
        };
        self.dirty = true;
        if scroll.keys(bytes, height) == super::scroll::Scrolled::Quit {
            self.scroll = None;
            return false;
        }
        true
    }
}

impl Drop for View {
    /// An attach that ends by an error (or a panic) leaves a sane terminal.
    fn drop(&mut self) {
        if cfg!(test) {
            return;
        }
        self.restore("");
        let _ = Display::flush(self);
    }
}

fn model((cols, rows): (u16, u16)) -> avt::Terminal {
    avt::Terminal::with_scrollback(cols.max(1).into(), rows.max(1).into(), Some(0))
        .expect("sizes are at least 1")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the outer terminal shows after everything the view wrote.
    fn outer_rows(outer: &mut avt::Terminal, view: &mut View) -> Vec<String> {
        view.render();
        outer.feed(String::from_utf8_lossy(&std::mem::take(&mut view.out)).as_ref());
        outer
            .screen()
            .visible_lines()
            .map(|l| l.text().trim_end().to_string())
            .collect()
    }

    fn view(term: (u16, u16)) -> (View, avt::Terminal) {
        let outer = avt::Terminal::new(term.0.into(), term.1.into()).unwrap();
        (View::new(term, "big".into(), "^]".into(), true), outer)
    }

    #[test]
    fn a_smaller_session_sits_top_left_with_its_edges_marked_and_never_wraps() {
        let (mut v, mut outer) = view((30, 8));
        let long = "x".repeat(25);
        v.snapshot(
            20,
            4,
            format!("{long}\r\n\x1b[44mab\x1b[K\x1b[0m").as_bytes(),
            true,
        );
        let rows = outer_rows(&mut outer, &mut v);
        assert_eq!(rows[0], format!("{}│", "x".repeat(20)));
        assert_eq!(rows[1], "xxxxx               │");
        assert_eq!(rows[2], format!("ab{}│", " ".repeat(18)));
        assert_eq!(rows[4], format!("{}┘", "─".repeat(20)));
        assert_eq!(rows[5], "");
        // The erase's background stops at the session's edge.
        let line = outer
            .screen()
            .visible_lines()
            .nth(2)
            .unwrap()
            .cells()
            .to_vec();
        assert!(line[19].pen().background().is_some());
        assert!(line[21].pen().background().is_none());
    }

    #[test]
    fn a_larger_session_shows_a_viewport_at_its_cursor_with_a_notice() {
        let (mut v, mut outer) = view((20, 6));
        let mut data = String::new();
        for i in 0..10 {
            data.push_str(&format!("row {i} {}\r\n", "y".repeat(30)));
        }
        data.push_str("$ ");
        v.snapshot(40, 12, data.as_bytes(), true);
        let rows = outer_rows(&mut outer, &mut v);
        assert_eq!(rows[0], "row 6 yyyyyyyyyyyyyy");
        assert_eq!(rows[4], "$");
        assert!(rows[5].starts_with("[termesh] session 40"), "{rows:?}");
        // The session takes this terminal's size: drawn whole.
        v.session_resized(20, 6);
        v.output(b"\x1b[H\x1b[2Jfits");
        let rows = outer_rows(&mut outer, &mut v);
        assert_eq!(rows, ["fits", "", "", "", "", ""]);
    }

    #[test]
    fn typing_redraws_a_few_cells_only() {
        let (mut v, mut outer) = view((80, 24));
        v.snapshot(80, 24, b"$ ", true);
        outer_rows(&mut outer, &mut v);
        v.output(b"e");
        v.render();
        let out = String::from_utf8_lossy(&v.out).into_owned();
        assert!(out.len() < 60, "{out:?}");
        assert!(!out.contains("\x1b[2J"));
        assert!(!out.contains('\x07'));
        // The program's bell rings the terminal's.
        v.output(b"\x07");
        v.render();
        assert!(String::from_utf8_lossy(&v.out).contains('\x07'));
    }

    #[test]
    fn the_status_row_overlays_and_gives_back_what_it_covered() {
        let (mut v, mut outer) = view((20, 4));
        v.snapshot(20, 4, b"a\r\nb\r\nc\r\nbottom", true);
        v.set_status(Some("[termesh] link down".into()));
        let rows = outer_rows(&mut outer, &mut v);
        assert_eq!(rows[3], "[termesh] link down");
        assert_eq!(rows[..2], ["b", "c"], "the view follows the cursor");
        v.set_status(None);
        let rows = outer_rows(&mut outer, &mut v);
        assert_eq!(rows, ["a", "b", "c", "bottom"]);
    }

    #[test]
    fn modes_title_and_restore() {
        let (mut v, mut outer) = view((20, 4));
        v.snapshot(
            20,
            4,
            b"\x1b[?1049h\x1b[?1000h\x1b]2;edit\x07\x1b[6 qvim",
            true,
        );
        v.render();
        let on = String::from_utf8_lossy(&v.out).into_owned();
        assert!(
            on.contains("\x1b[22;0t") && on.contains("\x1b[?1000h"),
            "{on:?}"
        );
        assert!(
            on.contains("\x1b]2;big: edit\x07") && on.contains("\x1b[6 q"),
            "{on:?}"
        );
        outer_rows(&mut outer, &mut v);
        v.keep_screen();
        v.restore("[termesh: detached]");
        let off = String::from_utf8_lossy(&v.out).into_owned();
        let leave = off
            .find("\x1b[?1049l")
            .expect("leaves the alternate screen");
        let note = off.find("[termesh: detached]").unwrap();
        assert!(leave < note && off.contains("\x1b[?1000l") && off.contains("\x1b[0 q"));
        assert!(
            off.contains("\x1b[23;0t") && off[leave..].contains("vim"),
            "{off:?}"
        );
    }

    #[test]
    fn the_scroll_mode_draws_over_the_screen_and_gives_it_back() {
        let (mut v, mut outer) = view((20, 4));
        v.snapshot(20, 4, b"live", true);
        outer_rows(&mut outer, &mut v);
        assert!(v.open_scroll((0..50).map(|i| format!("old {i}")).collect()));
        let rows = outer_rows(&mut outer, &mut v);
        assert_eq!(rows[..3], ["old 47", "old 48", "old 49"]);
        assert!(v.scroll_keys(b"k"));
        let rows = outer_rows(&mut outer, &mut v);
        assert_eq!(rows[2], "old 48");
        assert!(!v.scroll_keys(b"q"));
        let rows = outer_rows(&mut outer, &mut v);
        assert_eq!(rows[0], "live");
    }
}
