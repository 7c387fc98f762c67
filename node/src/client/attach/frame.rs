//! What the outer terminal shows, cell by cell, and the bytes that take it
//! from one frame to the next: only the cells that changed, in runs, with
//! the fewest cursor moves and pen changes, wide characters kept whole.

use avt::Pen;
use termesh_actors::session::screen::sgr;

/// Unchanged cells between two changed ones that are rewritten rather
/// than jumped over (a cursor move costs about as much).
const GAP: usize = 6;

/// One cell: a character, its width (2 for the first cell of a wide
/// character, 0 for the cell it covers) and its pen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Glyph {
    pub ch: char,
    pub width: u8,
    pub pen: Pen,
}

impl Glyph {
    pub fn blank() -> Glyph {
        Glyph {
            ch: ' ',
            width: 1,
            pen: Pen::default(),
        }
    }

    pub fn plain(ch: char) -> Glyph {
        Glyph {
            ch,
            ..Glyph::blank()
        }
    }

    pub fn from_cell(cell: &avt::Cell) -> Glyph {
        Glyph {
            ch: cell.char(),
            width: cell.width(),
            pen: *cell.pen(),
        }
    }

    fn is_blank_in(&self, pen: &Pen) -> bool {
        self.ch == ' ' && self.width == 1 && self.pen == *pen
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub cols: usize,
    pub rows: Vec<Vec<Glyph>>,
    /// Where the cursor shows (row, col), `None` hidden.
    pub cursor: Option<(usize, usize)>,
}

impl Frame {
    pub fn blank(cols: usize, rows: usize) -> Frame {
        Frame {
            cols,
            rows: vec![vec![Glyph::blank(); cols]; rows],
            cursor: None,
        }
    }

    pub fn size(&self) -> (usize, usize) {
        (self.cols, self.rows.len())
    }

    /// Writes `text` at (row, col) in `pen`, cut at the right edge; wide
    /// characters that do not fit whole are left out.
    pub fn put_text(&mut self, row: usize, col: usize, text: &str, pen: Pen) -> usize {
        let Some(line) = self.rows.get_mut(row) else {
            return col;
        };
        let mut at = col;
        for ch in text.chars() {
            let width = char_width(ch);
            if width == 0 {
                continue;
            }
            if at + width > line.len() {
                break;
            }
            line[at] = Glyph {
                ch,
                width: width as u8,
                pen,
            };
            if width == 2 {
                line[at + 1] = Glyph {
                    ch: ' ',
                    width: 0,
                    pen,
                };
            }
            at += width;
        }
        at
    }

    /// Fills (row, from..) to the right edge with blanks in `pen`.
    pub fn fill(&mut self, row: usize, from: usize, pen: Pen) {
        if let Some(line) = self.rows.get_mut(row) {
            for g in line.iter_mut().skip(from) {
                *g = Glyph {
                    ch: ' ',
                    width: 1,
                    pen,
                };
            }
        }
    }
}

/// The width a terminal gives `ch` (controls 0, East Asian wide 2), as
/// avt measures it.
pub fn char_width(ch: char) -> usize {
    unicode_width::UnicodeWidthChar::width(ch)
        .unwrap_or(0)
        .min(2)
}

/// The model's screen as rows of text with SGR, cut to `cols` (a wide
/// character cut in half left out), trailing blank rows dropped: the last
/// screen of a session that ended, for the terminal's normal screen.
pub fn screen_rows(model: &avt::Terminal, cols: usize) -> Vec<String> {
    let mut rows: Vec<String> = model
        .screen()
        .visible_lines()
        .map(|line| {
            let cells = line.cells();
            let mut end = cells.len().min(cols);
            if end > 0 && cells[end - 1].width() == 2 {
                end -= 1;
            }
            termesh_actors::session::screen::render_cells(&cells[..end])
        })
        .collect();
    while rows.last().is_some_and(|r| r.is_empty()) {
        rows.pop();
    }
    rows
}

/// The first row (or column) of a window of `len` over `total` that shows
/// `at`: as near the start as possible.
pub fn origin(at: usize, len: usize, total: usize) -> usize {
    let last_start = total.saturating_sub(len);
    (at + 1).saturating_sub(len).min(last_start)
}

/// Takes the outer terminal from `old` to `new` (same size). The pen is
/// left at its default; the cursor where `new` wants it, shown or hidden.
pub fn diff(old: &Frame, new: &Frame, out: &mut Vec<u8>) {
    let mut pen: Option<Pen> = None;
    let mut at: Option<(usize, usize)> = None;
    let changed = old != new;
    if changed && new.rows != old.rows {
        out.extend_from_slice(b"\x1b[?25l");
    }
    for (r, (a, b)) in old.rows.iter().zip(&new.rows).enumerate() {
        for (start, end) in spans(a, b) {
            write_span(r, start, end, b, &mut pen, &mut at, out);
        }
    }
    if pen.is_some_and(|p| !p.is_default()) {
        out.extend_from_slice(b"\x1b[0m");
    }
    if !changed {
        return;
    }
    match new.cursor {
        Some((r, c)) => {
            if at != Some((r, c)) {
                out.extend_from_slice(format!("\x1b[{};{}H", r + 1, c + 1).as_bytes());
            }
            out.extend_from_slice(b"\x1b[?25h");
        }
        None => out.extend_from_slice(b"\x1b[?25l"),
    }
}

/// Runs of changed columns in one row, `[start, end)`, widened so that no
/// run starts or ends inside a wide character (of either frame).
fn spans(a: &[Glyph], b: &[Glyph]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (c, glyph) in b.iter().enumerate() {
        if a.get(c) == Some(glyph) {
            continue;
        }
        match out.last_mut() {
            Some((_, end)) if c <= *end + GAP => *end = c + 1,
            _ => out.push((c, c + 1)),
        }
    }
    for (start, end) in &mut out {
        while *start > 0 && (b[*start].width == 0 || a.get(*start).is_some_and(|g| g.width == 0)) {
            *start -= 1;
        }
        while *end < b.len() && (b[*end].width == 0 || a.get(*end).is_some_and(|g| g.width == 0)) {
            *end += 1;
        }
    }
    // Widening may have made runs meet.
    out.dedup_by(|next, prev| {
        if next.0 <= prev.1 {
            prev.1 = prev.1.max(next.1);
            true
        } else {
            false
        }
    });
    out
}

fn write_span(
    row: usize,
    start: usize,
    end: usize,
    line: &[Glyph],
    pen: &mut Option<Pen>,
    at: &mut Option<(usize, usize)>,
    out: &mut Vec<u8>,
) {
    // Blanks to the end of the row in one pen are an erase (EL), which
    // paints the pen's background, and only that: blanks in reverse video,
    // underlined or struck through are written as spaces.
    let mut tail = end;
    if end == line.len() && erases_as(&line[end - 1].pen) {
        let last = line[end - 1].pen;
        while tail > start && line[tail - 1].is_blank_in(&last) {
            tail -= 1;
        }
        if end - tail < 4 {
            tail = end;
        }
    }
    if *at != Some((row, start)) {
        out.extend_from_slice(format!("\x1b[{};{}H", row + 1, start + 1).as_bytes());
    }
    let mut col = start;
    let mut text = [0u8; 4];
    while col < tail {
        let g = &line[col];
        if g.width == 0 {
            // A wide character's second half whose first half is outside
            // the run: a blank stands in for it.
            set_pen(pen, &g.pen, out);
            out.push(b' ');
            col += 1;
            continue;
        }
        if g.width == 2 && col + 1 >= line.len() {
            // Half a wide character at the right edge cannot be drawn.
            set_pen(pen, &g.pen, out);
            out.push(b' ');
            col += 1;
            continue;
        }
        set_pen(pen, &g.pen, out);
        out.extend_from_slice(g.ch.encode_utf8(&mut text).as_bytes());
        col += usize::from(g.width);
    }
    if tail < end {
        set_pen(pen, &line[end - 1].pen, out);
        out.extend_from_slice(b"\x1b[K");
        *at = Some((row, tail));
    } else if col < line.len() {
        *at = Some((row, col));
    } else {
        // At the right margin the cursor's column is not to be trusted
        // (pending wrap): the next run moves it.
        *at = None;
    }
}

/// Whether an erase in `pen` looks like blanks in `pen` on a real
/// terminal: only the background is painted by one.
fn erases_as(pen: &Pen) -> bool {
    !(pen.is_inverse() || pen.is_underline() || pen.is_strikethrough())
}

fn set_pen(current: &mut Option<Pen>, want: &Pen, out: &mut Vec<u8>) {
    if *current != Some(*want) {
        out.extend_from_slice(sgr(want).as_bytes());
        *current = Some(*want);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays `bytes` into an emulator of the frame's size and reads it back.
    fn replay(term: &mut avt::Terminal, bytes: &[u8]) -> Frame {
        term.feed(String::from_utf8_lossy(bytes).as_ref());
        let (cols, _) = term.size();
        let rows = term
            .screen()
            .visible_lines()
            .map(|l| l.cells().iter().map(Glyph::from_cell).collect())
            .collect();
        let c = term.cursor();
        Frame {
            cols,
            rows,
            cursor: c.visible.then_some((c.row, c.col)),
        }
    }

    fn frame_of(text: &[u8], cols: usize, rows: usize) -> Frame {
        let mut t = avt::Terminal::new(cols, rows).unwrap();
        replay(&mut t, text)
    }

    #[test]
    fn a_blank_is_avts_blank() {
        assert_eq!(Glyph::blank(), Glyph::from_cell(&avt::Cell::default()));
    }

    #[test]
    fn origin_keeps_the_cursor_in_view() {
        assert_eq!(origin(0, 10, 40), 0);
        assert_eq!(origin(9, 10, 40), 0);
        assert_eq!(origin(10, 10, 40), 1);
        assert_eq!(origin(39, 10, 40), 30);
        assert_eq!(origin(5, 10, 8), 0);
    }

    #[test]
    fn widths() {
        assert_eq!(char_width('a'), 1);
        assert_eq!(char_width('日'), 2);
        assert_eq!(char_width('\u{7}'), 0);
    }

    #[test]
    fn a_diff_takes_the_terminal_to_the_new_frame() {
        let screens: [&[u8]; 5] = [
            b"hello world\r\n\x1b[31mred\x1b[0m and plain\r\n\x1b[44m   \x1b[K\x1b[0m",
            b"hello there\r\n\x1b[32mgreen\x1b[0m and plain\r\n",
            "wide 日本語 text\r\nab日cd\r\n".as_bytes(),
            "wide 本日語 text\r\na日bcd\r\n\x1b[?25l".as_bytes(),
            b"\x1b[1;4;7mbold\x1b[0m\r\n\r\n\x1b[3;20Hedge",
        ];
        let (cols, rows) = (20, 4);
        let mut outer = avt::Terminal::new(cols, rows).unwrap();
        let mut shown = Frame::blank(cols, rows);
        for s in screens {
            let want = frame_of(s, cols, rows);
            let mut out = Vec::new();
            diff(&shown, &want, &mut out);
            let got = replay(&mut outer, &out);
            assert_eq!(
                got.rows,
                want.rows,
                "after {:?}",
                String::from_utf8_lossy(s)
            );
            assert_eq!(got.cursor, want.cursor);
            shown = want;
        }
    }

    #[test]
    fn reversed_blanks_are_written_not_erased() {
        // A real terminal's erase paints the background only: a status
        // line of reversed blanks must be spaces, not ESC[K.
        let line = format!("\x1b[7mstatus{}\x1b[0m", " ".repeat(14));
        let want = frame_of(line.as_bytes(), 20, 2);
        let mut out = Vec::new();
        diff(&Frame::blank(20, 2), &want, &mut out);
        let text = String::from_utf8_lossy(&out);
        assert!(!text.contains("\x1b[K"), "{text:?}");
        let want = frame_of(b"\x1b[44mblue\x1b[K\x1b[0m", 20, 2);
        let mut out = Vec::new();
        diff(&Frame::blank(20, 2), &want, &mut out);
        assert!(
            String::from_utf8_lossy(&out).contains("\x1b[K"),
            "a background is erased"
        );
    }

    #[test]
    fn one_changed_cell_costs_a_few_bytes() {
        let a = frame_of(b"$ ech", 80, 24);
        let b = frame_of(b"$ echo", 80, 24);
        let mut out = Vec::new();
        diff(&a, &b, &mut out);
        let text = String::from_utf8_lossy(&out);
        assert!(out.len() < 40, "{text:?}");
        assert!(text.contains('o') && !text.contains("ech"), "{text:?}");
        // Nothing changed: nothing written.
        let mut out = Vec::new();
        diff(&b, &b, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn text_is_cut_at_the_edge_and_wide_characters_stay_whole() {
        let mut f = Frame::blank(5, 1);
        assert_eq!(f.put_text(0, 0, "ab日本", Pen::default()), 4);
        assert_eq!(f.rows[0][2].width, 2);
        assert_eq!(f.rows[0][3].width, 0);
        assert_eq!(f.rows[0][4], Glyph::blank());
    }
}
