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
use termesh_actors::session::screen::Utf8Decoder;

use super::display::{Display, Failed, RawPage, Scrolled};
use super::frame::{diff, origin, screen_rows, Frame, Glyph};
use super::mouse::{take, translate, Window};
use super::outer::{Modes, Outer};
use super::predict::Predictor;
use super::scroll::Scroll;

/// Frames are drawn at most this often while output streams; the first
/// change after a quiet spell (an echo) is drawn at once.
const FRAME: Duration = Duration::from_millis(8);

/// What the renderer does beyond drawing.
#[derive(Debug, Clone, Copy, Default)]
pub struct ViewOptions {
    /// Predictive local echo.
    pub predict: bool,
    /// The wheel scrolls (the mouse is the attach's) while the program has
    /// not asked for the mouse.
    pub mouse: bool,
}

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
    /// Where the session's cells were drawn last (for mouse reports).
    window: Window,
    /// `--mouse`: the mouse is the attach's while the program has not
    /// asked for it (the wheel opens the scroll mode).
    take_mouse: bool,
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
    pub fn new(term: (u16, u16), name: String, prefix: String, opts: ViewOptions) -> View {
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
            predict: Predictor::new(opts.predict),
            take_mouse: opts.mouse,
            window: Window {
                top: 0,
                left: 0,
                rows: usize::from(term.1),
                cols: usize::from(term.0),
            },
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
                self.window = self.compose(&mut frame);
                let mut modes =
                    Modes::of_program(&self.modes, self.model.cursor_key_app_mode(), self.title());
                if self.take_mouse && !self.program_mouse() {
                    // `--mouse`: the wheel is the attach's (to scroll).
                    modes = modes.with_mouse();
                }
                modes
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

    /// The program asked for mouse reports.
    fn program_mouse(&self) -> bool {
        [1000, 1002, 1003].iter().any(|m| self.modes.mode(*m))
    }

    fn title(&self) -> String {
        match self.modes.title() {
            Some(title) if !title.is_empty() => format!("{}: {title}", self.name),
            _ => self.name.clone(),
        }
    }

    /// The live session: at its size top-left, or through a viewport.
    fn compose(&self, frame: &mut Frame) -> Window {
        let (tcols, trows) = frame.size();
        let (scols, srows) = self.model.size();
        let fits = scols <= tcols && srows <= trows;
        let notice = match (&self.status, fits) {
            (Some(text), _) => Some(text.clone()),
            (None, true) => None,
            (None, false) => Some(format!(
                "[termesh] {} s takes the size · session {scols}x{srows} shown in part, around the cursor",
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
        // At a pending wrap the model's cursor is one past the last
        // column: it is shown on the last column, never on the edge mark.
        let shown_cols = tcols.min(scols - left).max(1);
        frame.cursor = (cursor.visible && inside)
            .then(|| (cursor.row - top, (cursor.col - left).min(shown_cols - 1)));
        // Predicted keys, in the pen of the cell they cover, underlined,
        // and the cursor after them.
        for g in self.predict.shown() {
            let (Some(r), Some(c)) = (g.row.checked_sub(top), g.col.checked_sub(left)) else {
                continue;
            };
            // Never over half a wide character: the guesses stop there.
            if r >= rows || c >= shown_cols || frame.rows[r][c].width != 1 {
                break;
            }
            {
                let mut pen = frame.rows[r][c].pen;
                pen.set_underline();
                frame.rows[r][c] = Glyph {
                    ch: g.ch,
                    width: 1,
                    pen,
                };
                if frame.cursor.is_some() {
                    frame.cursor = Some((r, (c + 1).min(shown_cols - 1)));
                }
            }
        }
        Window {
            top,
            left,
            rows: rows.min(srows - top),
            cols: shown_cols,
        }
    }

    /// The session's last screen, for the terminal's normal screen.
    fn print_screen(&mut self) {
        for row in screen_rows(&self.model, usize::from(self.term.0)) {
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

    fn open_scroll(&mut self, lines: Vec<String>, older: Option<u64>) -> bool {
        self.scroll =
            Some(Scroll::new(lines, usize::from(self.session.0), older).sized(self.session.1));
        self.dirty = true;
        true
    }

    fn scroll_older(&mut self, lines: Vec<String>, older: Option<u64>) -> Option<Scrolled> {
        let height = usize::from(self.term.1).saturating_sub(1).max(1);
        let scroll = self.scroll.as_mut()?;
        self.dirty = true;
        scroll.older_page(lines, older, height)
    }

    fn scroll_more(&mut self) -> Vec<Scrolled> {
        self.scroll
            .as_mut()
            .map(|s| s.take_more())
            .unwrap_or_default()
    }

    fn scroll_failed(&mut self, what: Failed, why: &str) {
        if let Some(scroll) = self.scroll.as_mut() {
            scroll.failed(what, why);
            self.dirty = true;
        }
    }

    fn scroll_raw(&mut self, fill: bool, page: RawPage) -> Option<Scrolled> {
        let height = usize::from(self.term.1).saturating_sub(1).max(1);
        let scroll = self.scroll.as_mut()?;
        self.dirty = true;
        if fill {
            scroll.filled(page, height)
        } else {
            scroll.scanned(page, height)
        }
    }

    fn scrolling(&self) -> bool {
        self.scroll.is_some()
    }

    fn replace(&mut self, cols: u16, rows: u16, data: &[u8], replay: &[Vec<u8>]) {
        self.snapshot(cols, rows, data, false);
        for data in replay {
            self.feed(data);
        }
        self.bell = false;
    }

    fn map_input(&self, keys: Vec<u8>) -> (Vec<u8>, bool) {
        if self.scroll.is_some() {
            (keys, false)
        } else if self.program_mouse() {
            (translate(&keys, self.window), false)
        } else if self.take_mouse {
            take(&keys)
        } else {
            (keys, false)
        }
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

    fn scroll_keys(&mut self, bytes: &[u8]) -> Scrolled {
        let height = usize::from(self.term.1).saturating_sub(1).max(1);
        let Some(scroll) = self.scroll.as_mut() else {
            return Scrolled::Quit;
        };
        self.dirty = true;
        let done = scroll.keys(bytes, height);
        if done == Scrolled::Quit {
            self.scroll = None;
        }
        done
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
mod tests;
