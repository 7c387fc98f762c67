//! The screen model: session output fed through an avt 0.19 `Terminal`,
//! composed into snapshots (history lines, screen, cursor, modes) and
//! rendered into clean history lines. Pure logic; the session runs it off
//! its actor thread and caches it with the seq it has reached.

use avt::{Color, Line, Pen, Terminal};

use crate::output::ring::Frame;

/// History rows the model keeps (PROTOCOL.md: at most 10,000).
pub const HISTORY_ROWS: usize = 10_000;

/// A terminal resize, placed in the output stream after `after_seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResizeMark {
    /// Increasing per session; tells which marks a model has applied.
    pub id: u64,
    pub after_seq: u64,
    pub cols: u16,
    pub rows: u16,
}

/// Incremental UTF-8 decoding: an incomplete sequence at the end of one
/// frame is carried into the next; invalid bytes become U+FFFD.
#[derive(Debug, Default, Clone)]
pub struct Utf8Decoder {
    pending: Vec<u8>,
}

impl Utf8Decoder {
    /// Decodes a frame; borrows it when it is complete, valid UTF-8 (the
    /// usual case), so feeding the emulator costs no copy.
    pub fn decode<'a>(&mut self, data: &'a [u8]) -> std::borrow::Cow<'a, str> {
        if self.pending.is_empty() {
            if let Ok(text) = std::str::from_utf8(data) {
                return std::borrow::Cow::Borrowed(text);
            }
        }
        std::borrow::Cow::Owned(self.decode_slow(data))
    }

    /// The end of the input: an incomplete sequence left is one U+FFFD
    /// (as a lossy conversion of all of it would end).
    pub fn finish(&mut self) -> Option<char> {
        (!std::mem::take(&mut self.pending).is_empty()).then_some('\u{fffd}')
    }

    fn decode_slow(&mut self, data: &[u8]) -> String {
        let mut buf = std::mem::take(&mut self.pending);
        buf.extend_from_slice(data);
        let mut out = String::with_capacity(buf.len());
        let mut rest = &buf[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(good).expect("validated prefix"));
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{fffd}');
                            rest = &bad[n..];
                        }
                        None => {
                            self.pending = bad.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }
}

/// An emulator that has consumed a session's output through `seq`.
pub struct ScreenModel {
    term: Terminal,
    /// The seq it started at, blank: it has seen the output after it.
    origin: u64,
    seq: u64,
    resize_id: u64,
    decoder: Utf8Decoder,
}

impl std::fmt::Debug for ScreenModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScreenModel")
            .field("seq", &self.seq)
            .field("size", &self.term.size())
            .finish()
    }
}

impl ScreenModel {
    /// A blank model that stands at `seq` (its next frame is `seq + 1`),
    /// with every resize up to `resize_id` already applied.
    pub fn new(cols: u16, rows: u16, seq: u64, resize_id: u64) -> Self {
        let term =
            Terminal::with_scrollback(cols.max(1).into(), rows.max(1).into(), Some(HISTORY_ROWS))
                .expect("sizes are at least 1");
        ScreenModel {
            term,
            origin: seq,
            seq,
            resize_id,
            decoder: Utf8Decoder::default(),
        }
    }

    /// A model standing at `seq` whose screen is what `snapshot` (one of
    /// its own, taken at `seq` at this size) draws: a dropped model
    /// brought back from its last snapshot instead of from the ring.
    pub fn from_snapshot(cols: u16, rows: u16, seq: u64, resize_id: u64, snapshot: &[u8]) -> Self {
        let mut model = ScreenModel::new(cols, rows, seq, resize_id);
        model.term.feed(String::from_utf8_lossy(snapshot).as_ref());
        model
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The last resize mark it applied.
    pub fn resize_id(&self) -> u64 {
        self.resize_id
    }

    /// The seq it started at, blank.
    pub fn origin(&self) -> u64 {
        self.origin
    }

    pub fn size(&self) -> (u16, u16) {
        let (cols, rows) = self.term.size();
        (cols as u16, rows as u16)
    }

    /// Feeds `frames` (contiguous, starting at `seq + 1`; earlier ones are
    /// skipped) and applies the resizes that fall between them.
    pub fn advance<'a>(
        &mut self,
        frames: impl IntoIterator<Item = &'a Frame>,
        marks: &[ResizeMark],
    ) {
        for frame in frames {
            if frame.seq <= self.seq {
                continue;
            }
            debug_assert_eq!(frame.seq, self.seq + 1, "frames are contiguous");
            self.apply_marks(marks, frame.seq - 1);
            let text = self.decoder.decode(&frame.data);
            self.term.feed(text.as_ref());
            self.seq = frame.seq;
        }
        self.apply_marks(marks, self.seq);
    }

    /// Feeds output that is not one of the session's frames in order (a
    /// page of stored output: `page`); its seq stays.
    pub fn feed(&mut self, data: &[u8]) {
        let text = self.decoder.decode(data);
        self.term.feed(text.as_ref());
    }

    /// Takes the history rows out of the model (rendered, oldest first),
    /// leaving its screen, cursor and pen as they are: a model fed more
    /// than its scrollback holds gives up no row.
    pub fn take_history(&mut self) -> Vec<String> {
        let lines = self.history_only(self.history_rows());
        let (cols, rows) = self.size();
        let screen = self.term.dump();
        let decoder = std::mem::take(&mut self.decoder);
        *self = ScreenModel::from_snapshot(cols, rows, self.seq, self.resize_id, screen.as_bytes());
        self.decoder = decoder;
        lines
    }

    /// Stands at `seq` without frames for the seqs before it: they were
    /// skipped (a node that crashed gave them out unstored), so the screen
    /// is the last one known.
    pub fn reach(&mut self, seq: u64, marks: &[ResizeMark]) {
        if seq > self.seq {
            self.seq = seq;
            self.apply_marks(marks, seq);
        }
    }

    fn apply_marks(&mut self, marks: &[ResizeMark], through_seq: u64) {
        for mark in marks {
            if mark.id > self.resize_id && mark.after_seq <= through_seq {
                self.term.resize(mark.cols.into(), mark.rows.into());
                self.resize_id = mark.id;
            }
        }
    }

    /// Escape sequences that, written into a fresh (or reset) terminal of
    /// this size, reproduce the screen, with the last `scrollback` history
    /// lines above it, then `modes` (what avt's dump omits).
    pub fn snapshot(&self, scrollback: usize, modes: &str) -> String {
        let mut out = String::new();
        let history = self.history_only(scrollback);
        if !history.is_empty() {
            for line in &history {
                out.push_str(line);
                out.push_str("\r\n");
            }
            // Scroll every history line off the screen: from any row,
            // rows - 1 line feeds reach and pass the bottom far enough.
            let (_, rows) = self.term.size();
            for _ in 1..rows {
                out.push('\n');
            }
            out.push_str("\x1b[H");
        }
        let (cols, _) = self.term.size();
        out.push_str(&crate::session::portable::portable(&self.term.dump(), cols));
        out.push_str(modes);
        out
    }

    /// History rows above the primary screen.
    pub fn history_rows(&self) -> usize {
        let screen = self.term.primary_screen();
        screen.all_lines().count() - screen.visible_lines().len()
    }

    /// The last `max` history rows above the primary screen, rendered.
    fn history_only(&self, max: usize) -> Vec<String> {
        if max == 0 {
            return Vec::new();
        }
        let screen = self.term.primary_screen();
        let total = screen.all_lines().count();
        let visible = screen.visible_lines().len();
        let history = total - visible;
        let skip = history.saturating_sub(max);
        screen
            .all_lines()
            .take(history)
            .skip(skip)
            .map(render_line)
            .collect()
    }

    /// History and screen as clean lines (SGR kept, no cursor movement),
    /// trailing blank rows dropped, the last `max` kept.
    pub fn lines(&self, max: usize) -> Vec<String> {
        let screen = self.term.screen();
        let mut lines: Vec<String> = screen.all_lines().map(render_line).collect();
        while lines.last().is_some_and(|l| l.is_empty()) {
            lines.pop();
        }
        let skip = lines.len().saturating_sub(max);
        lines.drain(..skip);
        lines
    }

    /// The visible screen as plain text rows (no attributes).
    pub fn text(&self) -> Vec<String> {
        self.term
            .screen()
            .visible_lines()
            .map(|l| l.text().trim_end().to_string())
            .collect()
    }

    /// Cursor (col, row) and visibility.
    pub fn cursor(&self) -> (usize, usize, bool) {
        let c = self.term.cursor();
        (c.col, c.row, c.visible)
    }
}

/// One row as text with SGR attributes, trailing default blanks trimmed:
/// written into a terminal, it draws the row as the screen showed it.
pub fn render_line(line: &Line) -> String {
    render_cells(line.cells())
}

/// `render_line` of some of a row's cells (a crop of it).
pub fn render_cells(cells: &[avt::Cell]) -> String {
    let mut out = String::new();
    let mut pending_blanks = String::new();
    let mut current = Pen::default();
    // The second cell of a wide character holds no character of its own.
    let cells: Vec<&avt::Cell> = cells.iter().filter(|c| c.width() > 0).collect();
    for cells in cells.chunk_by(|a, b| a.pen() == b.pen()) {
        let pen = *cells[0].pen();
        let text: String = cells.iter().map(|c| c.char()).collect();
        // Blanks in the default pen only count when something follows them.
        let (body, blanks) = if pen.is_default() {
            let body = text.trim_end_matches(' ');
            (body, &text[body.len()..])
        } else {
            (text.as_str(), "")
        };
        if !body.is_empty() {
            if !pending_blanks.is_empty() && !current.is_default() {
                // Blanks of the default pen are drawn in it, not in the
                // colour or underline of the text before them.
                out.push_str("\x1b[0m");
                current = Pen::default();
            }
            out.push_str(&pending_blanks);
            pending_blanks.clear();
            if pen != current {
                out.push_str(&sgr(&pen));
                current = pen;
            }
            out.push_str(body);
        }
        pending_blanks.push_str(blanks);
    }
    if !current.is_default() {
        out.push_str("\x1b[0m");
    }
    out
}

/// A complete SGR sequence setting exactly `pen`'s attributes.
pub fn sgr(pen: &Pen) -> String {
    let mut params = vec!["0".to_string()];
    let flags = [
        (pen.is_bold(), "1"),
        (pen.is_faint(), "2"),
        (pen.is_italic(), "3"),
        (pen.is_underline(), "4"),
        (pen.is_blink(), "5"),
        (pen.is_inverse(), "7"),
        (pen.is_strikethrough(), "9"),
    ];
    params.extend(
        flags
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, p)| p.to_string()),
    );
    if let Some(color) = pen.foreground() {
        params.push(color_param(color, 30, 90, 38));
    }
    if let Some(color) = pen.background() {
        params.push(color_param(color, 40, 100, 48));
    }
    format!("\x1b[{}m", params.join(";"))
}

fn color_param(color: Color, base: u8, bright: u8, extended: u8) -> String {
    match color {
        Color::Indexed(n) if n < 8 => (base + n).to_string(),
        Color::Indexed(n) if n < 16 => (bright + n - 8).to_string(),
        Color::Indexed(n) => format!("{extended};5;{n}"),
        Color::RGB(c) => format!("{extended};2;{};{};{}", c.r, c.g, c.b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_by_chunks_is_the_lossy_text_of_the_whole() {
        let whole = "añb€c😀d"
            .as_bytes()
            .iter()
            .copied()
            .chain([0xff, b'e', 0xe2]);
        let whole: Vec<u8> = whole.collect();
        for cut in 0..=whole.len() {
            let mut d = Utf8Decoder::default();
            let mut text = d.decode(&whole[..cut]).into_owned();
            text += &d.decode(&whole[cut..]);
            text.extend(d.finish());
            assert_eq!(text, String::from_utf8_lossy(&whole), "cut at {cut}");
        }
    }
    use crate::output::ring::Ring;
    use bytes::Bytes;
    use proptest::prelude::*;

    fn model_after(chunks: &[&[u8]], cols: u16, rows: u16) -> ScreenModel {
        let mut ring = Ring::new(1 << 30, 1 << 20);
        let frames: Vec<Frame> = chunks
            .iter()
            .map(|c| ring.push(Bytes::copy_from_slice(c)))
            .collect();
        let mut m = ScreenModel::new(cols, rows, 0, 0);
        m.advance(&frames, &[]);
        m
    }

    fn replay(snapshot: &str, cols: u16, rows: u16) -> Terminal {
        let mut t =
            Terminal::with_scrollback(cols.into(), rows.into(), Some(HISTORY_ROWS)).unwrap();
        t.feed(snapshot);
        t
    }

    #[test]
    fn utf8_split_across_frames() {
        let mut d = Utf8Decoder::default();
        let bytes = "héllo €".as_bytes();
        let (a, b) = bytes.split_at(2);
        let (b, c) = b.split_at(b.len() - 1);
        let text = d.decode(a).into_owned() + &d.decode(b) + &d.decode(c);
        assert_eq!(text, "héllo €");
        assert!(matches!(
            d.decode(b"plain"),
            std::borrow::Cow::Borrowed("plain")
        ));
        assert_eq!(d.decode(b"a\xffb"), "a\u{fffd}b");
    }

    #[test]
    fn snapshot_restores_screen_cursor_and_alt_buffer() {
        let m = model_after(
            &[
                b"primary line\r\n\x1b[1;31mred\x1b[0m",
                b"\x1b[?1049h\x1b[2J\x1b[5;10Halt here",
                b"\x1b[3;3H",
            ],
            40,
            10,
        );
        let t = replay(&m.snapshot(0, ""), 40, 10);
        assert_eq!(t.screen().text(), m.term.screen().text());
        assert_eq!(t.screen().visible_lines().len(), 10);
        assert_eq!((t.cursor().col, t.cursor().row), (2, 2));
        assert_eq!(t.active_screen_kind(), avt::ScreenKind::Alternate);
        assert_eq!(t.primary_screen().text(), m.term.primary_screen().text());
    }

    #[test]
    fn snapshots_are_portable_where_avts_dump_is_not() {
        let m = model_after(
            &[b"+------------------------+\r\n\x1b[38;5;208morange\x1b[0m\x1b[?1049h\x1b[38;2;1;2;3mx"],
            40,
            10,
        );
        assert!(!crate::session::portable::is_portable(&m.term.dump()));
        let snapshot = m.snapshot(0, "");
        assert!(
            crate::session::portable::is_portable(&snapshot),
            "{snapshot:?}"
        );
    }

    #[test]
    fn snapshot_puts_requested_history_above_the_screen() {
        let mut out = Vec::new();
        for i in 0..50 {
            out.extend_from_slice(format!("line {i}\r\n").as_bytes());
        }
        let m = model_after(&[&out], 20, 5);
        let t = replay(&m.snapshot(10, ""), 20, 5);
        let all: Vec<String> = t
            .screen()
            .all_lines()
            .map(|l| l.text().trim_end().to_string())
            .collect();
        let visible: Vec<String> = m.text();
        assert_eq!(&all[all.len() - 5..], &visible[..]);
        assert_eq!(all[all.len() - 6], "line 45");
        assert_eq!(all[all.len() - 15], "line 36");
        assert_eq!(all.len(), 15, "exactly the requested history");
    }

    #[test]
    fn lines_keep_colour_and_drop_redraws() {
        let m = model_after(
            &[b"\x1b[32mok\x1b[0m done\r\n", b"50%\r75%\r100%\r\n"],
            20,
            5,
        );
        assert_eq!(
            m.lines(100),
            vec!["\x1b[0;32mok\x1b[0m done".to_string(), "100%".to_string()]
        );
        assert_eq!(m.lines(1), vec!["100%".to_string()]);
    }

    /// History lines draw in an independent emulator (the `vt100` crate)
    /// exactly what the live output drew: no colour or underline carried
    /// onto the blanks after coloured text, wide characters in place.
    #[test]
    fn history_lines_render_as_the_screen_showed_them() {
        let rows: [&[u8]; 5] = [
            b"\x1b[4munder\x1b[0m   plain \x1b[31mred\x1b[0m  \x1b[42mgreen bg\x1b[0m end",
            b"\x1b[1;33mbold\x1b[0m \x1b[7minv\x1b[0m",
            "\x1b[38;5;208m界面\x1b[0m  wide \x1b[4m字\x1b[0m x".as_bytes(),
            b"\x1b[44m  \x1b[0m  \x1b[38;2;1;2;3mrgb\x1b[0m",
            b"no colour at all",
        ];
        let cells = |bytes: &[u8]| -> Vec<String> {
            let mut p = vt100::Parser::new(1.try_into().unwrap(), 60.try_into().unwrap(), 0);
            p.process(bytes);
            (0..60)
                .map(|c| {
                    let cell = p.screen().cell(0, c).unwrap();
                    let text = match cell.contents() {
                        "" if !cell.is_wide_continuation() => " ",
                        t => t,
                    };
                    format!(
                        "{text}{:?}{:?}{}{}{}",
                        cell.fgcolor(),
                        cell.bgcolor(),
                        cell.bold(),
                        cell.underline(),
                        cell.inverse()
                    )
                })
                .collect()
        };
        for row in rows {
            let m = model_after(&[row], 60, 3);
            let line = render_line(&m.term.screen().visible_lines().next().unwrap().clone());
            assert_eq!(
                cells(line.as_bytes()),
                cells(row),
                "{:?} rendered as {line:?}",
                String::from_utf8_lossy(row)
            );
        }
    }

    #[test]
    fn a_model_from_its_snapshot_draws_the_same_screen() {
        let m = model_after(
            &[
                b"\x1b[1;31mred\x1b[0m line\r\n",
                b"\x1b[?1049h\x1b[4;5Halt",
                b"\x1b[2;2H",
            ],
            40,
            10,
        );
        let snap = m.snapshot(0, "");
        let back = ScreenModel::from_snapshot(40, 10, m.seq(), 0, snap.as_bytes());
        assert_eq!(back.seq(), m.seq());
        assert_eq!(
            back.snapshot(0, ""),
            snap,
            "the same screen, cursor and buffers"
        );
    }

    #[test]
    fn resizes_apply_in_stream_order() {
        let mut ring = Ring::new(1 << 20, 1000);
        let f1 = ring.push(Bytes::from_static(b"abc"));
        let f2 = ring.push(Bytes::from_static(b"\r\ndef"));
        let marks = [ResizeMark {
            id: 1,
            after_seq: 1,
            cols: 10,
            rows: 3,
        }];
        let mut m = ScreenModel::new(80, 24, 0, 0);
        m.advance([&f1], &marks);
        assert_eq!(m.size(), (10, 3), "a mark after the last fed frame applies");
        m.advance([&f2], &marks);
        assert_eq!(m.text()[1], "def");
    }

    proptest! {
        /// Any output, written as a snapshot into a fresh terminal, shows the
        /// same visible text and cursor (avt's prop_dump, at our level).
        #[test]
        fn snapshot_round_trip(chunks in proptest::collection::vec(proptest::collection::vec(prop_oneof![
            Just(b"\x1b[".to_vec()), Just(b"\r\n".to_vec()), Just(b"\x1b[?1049h".to_vec()), Just(b"\x1b[?1049l".to_vec()),
            Just(b"\x1b[2J".to_vec()), Just(b"\x1b[3;4H".to_vec()), Just(b"\x1b[1;33m".to_vec()), Just(b"\x1b[?25l".to_vec()),
            Just("é€".as_bytes().to_vec()), proptest::collection::vec(0x20u8..0x7f, 1..30)], 0..8), 0..12)) {
            let flat: Vec<Vec<u8>> = chunks.into_iter().map(|c| c.concat()).collect();
            let refs: Vec<&[u8]> = flat.iter().map(|c| c.as_slice()).collect();
            let m = model_after(&refs, 30, 8);
            let t = replay(&m.snapshot(0, ""), 30, 8);
            let visible = |t: &Terminal| t.screen().visible_lines().map(|l| l.text()).collect::<Vec<_>>();
            prop_assert_eq!(visible(&t), visible(&m.term));
            prop_assert_eq!(t.cursor(), m.term.cursor());
            prop_assert_eq!(t.active_screen_kind(), m.term.active_screen_kind());
        }
    }
}
