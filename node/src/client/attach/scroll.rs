//! The scroll mode (prefix then `[`), like tmux's copy mode: the session's
//! rendered history from the node (one line per row, colours kept), paged
//! with the arrow keys, PgUp/PgDn, `g`/`G`, the mouse wheel, and searched
//! with `/` (towards older lines; `n` again, `N` towards newer). `q` or Esc
//! goes back to the live screen. History comes in pages of the node's
//! stored output (PROTOCOL.md section 14): reaching the top asks for the
//! page before it, so the oldest retained line is reachable however long
//! the session is. A search that finds nothing loaded goes on through raw
//! pages (`scan`): the page with the hit is rendered, the pages between it
//! and the loaded lines wait as placeholders, rendered when in view.

use avt::Pen;

use super::frame::{Frame, Glyph};
use super::scan::{self, Gap, RawPage, SCAN_PAGE};

/// Lines the mouse wheel moves.
const WHEEL: usize = 3;
/// Longest search text kept.
const MAX_QUERY: usize = 256;

/// Which request failed (`Scroll::failed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    Older,
    Scan,
    Fill,
}

/// A raw page on its way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InFlight {
    Scan,
    Fill(u64),
}

/// What a key did in the scroll mode.
#[derive(Debug, PartialEq, Eq)]
pub enum Scrolled {
    Stay,
    Quit,
    /// The page of history before this seq is wanted (asked once until
    /// it comes: `older_page`).
    Older(u64),
    /// Raw output before `before`, at most `limit` bytes: a search's next
    /// page (`scanned`), or a placeholder's frames (`filled`, `fill`).
    Raw {
        before: u64,
        limit: u64,
        fill: bool,
    },
}

#[derive(Debug)]
pub struct Scroll {
    /// Rendered lines (SGR kept) and their plain text, oldest first.
    lines: Vec<String>,
    plain: Vec<String>,
    cols: usize,
    /// Index of the line at the bottom of the view.
    bottom: usize,
    /// The search being typed (bytes as typed), and the last one run.
    typing: Option<Vec<u8>>,
    query: Option<String>,
    /// The line the last search found.
    found: Option<usize>,
    note: Option<String>,
    /// Where older history begins (the loaded lines' first seq), while
    /// the node retains older output.
    older: Option<u64>,
    /// The older page was asked for and has not come yet.
    asked: bool,
    /// The older page asked for no longer goes above the loaded lines (a
    /// search's hit went there first).
    drop_older: bool,
    /// A search goes on once a placeholder is filled: towards older
    /// lines (`true`) or newer ones.
    resume_search: Option<bool>,
    /// The raw page asked for and not come yet (one at a time): a
    /// search's, or the placeholder's ending at this seq.
    raw_in_flight: Option<InFlight>,
    /// Wants past the first that one read of keys made (`take_more`).
    more: Vec<Scrolled>,
    /// A search through raw pages: the pages passed without a hit,
    /// newest first.
    scan: Option<Vec<Gap>>,
    /// Placeholders among the lines, in line order.
    gaps: Vec<Gap>,
    /// The session's rows, to render raw pages as the node would.
    screen_rows: u16,
}

impl Scroll {
    /// `lines` as the node's `history` renders them, at `cols` columns;
    /// `older`: the seq they begin at, when older output is retained.
    pub fn new(lines: Vec<String>, cols: usize, older: Option<u64>) -> Scroll {
        let plain: Vec<String> = lines.iter().map(|l| strip(l)).collect();
        let bottom = lines.len().saturating_sub(1);
        Scroll {
            lines,
            plain,
            cols,
            bottom,
            typing: None,
            query: None,
            found: None,
            note: None,
            older,
            asked: false,
            drop_older: false,
            resume_search: None,
            raw_in_flight: None,
            more: Vec::new(),
            scan: None,
            gaps: Vec::new(),
            screen_rows: 24,
        }
    }

    /// Raw pages are rendered at `rows` rows, the session's.
    pub fn sized(mut self, rows: u16) -> Scroll {
        self.screen_rows = rows.max(1);
        self
    }

    /// Replaces `remove` lines at `at` by `lines` (placeholders where
    /// `plain` is none); what is below moves with them, the view too.
    fn splice(&mut self, at: usize, remove: usize, lines: Vec<String>, plain: Vec<Option<String>>) {
        let n = lines.len();
        let moved = |i: usize| {
            if i >= at + remove {
                Some(i + n - remove)
            } else if i >= at {
                None
            } else {
                Some(i)
            }
        };
        self.bottom = moved(self.bottom).unwrap_or(at);
        self.found = self.found.and_then(moved);
        for g in &mut self.gaps {
            g.line = moved(g.line).unwrap_or(g.line);
        }
        self.plain.splice(
            at..at + remove,
            plain.into_iter().map(Option::unwrap_or_default),
        );
        self.lines.splice(at..at + remove, lines);
    }

    /// The line `i` in the middle of the view.
    fn center(&mut self, i: usize, height: usize) {
        self.bottom = (i + height / 2)
            .min(self.last())
            .max(height.saturating_sub(1));
    }

    /// What the view needs next: a placeholder in view rendered, or the
    /// page before the oldest line when that is in view.
    fn next_want(&mut self, height: usize) -> Option<Scrolled> {
        let top = (self.bottom + 1).saturating_sub(height);
        let in_view = self
            .gaps
            .iter()
            .position(|g| !g.asked && (top..=self.bottom).contains(&g.line));
        if let Some(k) = in_view.filter(|_| self.raw_in_flight.is_none()) {
            return Some(self.fill(k));
        }
        let at_top = self.bottom <= height.saturating_sub(1);
        at_top
            .then(|| self.want_older())
            .flatten()
            .map(Scrolled::Older)
    }

    /// Asks for the frames of the placeholder `k`.
    fn fill(&mut self, k: usize) -> Scrolled {
        let g = &mut self.gaps[k];
        g.asked = true;
        self.raw_in_flight = Some(InFlight::Fill(g.end_seq));
        Scrolled::Raw {
            before: g.end_seq + 1,
            limit: g.len,
            fill: true,
        }
    }

    /// What the mode asked for past the first want of one read of keys.
    pub fn take_more(&mut self) -> Vec<Scrolled> {
        std::mem::take(&mut self.more)
    }

    /// A page it asked for was refused (an error reply): a search stops
    /// and says why; a placeholder whose frames cannot come says so in
    /// its place; the top may ask again.
    pub fn failed(&mut self, what: Failed, why: &str) {
        match what {
            Failed::Older => self.asked = false,
            Failed::Scan => {
                self.scan = None;
                self.found = None;
            }
            Failed::Fill => {
                if let Some(InFlight::Fill(end)) = self.raw_in_flight {
                    self.unfillable(end);
                }
            }
        }
        if what != Failed::Older {
            self.raw_in_flight = None;
            self.resume_search = None;
        }
        self.note = Some(format!("no older output: {why}"));
    }

    /// The placeholder ending at `end` cannot be rendered (retention let
    /// its frames go): it says so, and is one no more.
    fn unfillable(&mut self, end: u64) {
        if let Some(k) = self.gaps.iter().position(|g| g.end_seq == end) {
            let gap = self.gaps.remove(k);
            self.lines[gap.line] = "\x1b[2m··· output no longer retained ···\x1b[0m".into();
        }
    }

    /// A raw page a search asked for: rendered and shown when it has the
    /// query (the pages passed before it become placeholders), else the
    /// page before it is asked for.
    pub fn scanned(&mut self, page: RawPage, height: usize) -> Option<Scrolled> {
        if self.raw_in_flight != Some(InFlight::Scan) {
            return None;
        }
        self.raw_in_flight = None;
        let mut passed = self.scan.take()?;
        let query = self.query.clone()?;
        if scan::may_contain(&page.data, &query) {
            let mut lines = scan::render(&page, self.cols as u16, self.screen_rows);
            let mut plain: Vec<Option<String>> = lines.iter().map(|l| Some(strip(l))).collect();
            let hit = plain
                .iter()
                .rposition(|l| l.as_deref().is_some_and(|l| scan::matches(l, &query)));
            if let Some(hit) = hit {
                let mut gaps = Vec::new();
                for mut g in passed.into_iter().rev() {
                    g.line = lines.len();
                    lines.push(g.placeholder());
                    plain.push(None);
                    gaps.push(g);
                }
                self.splice(0, 0, lines, plain);
                self.gaps.splice(0..0, gaps);
                self.older = page.more.then_some(page.first_seq);
                self.found = Some(hit);
                self.note = None;
                self.center(hit, height);
                return self.next_want(height);
            }
        }
        if page.data.is_empty() || !page.more {
            self.note = Some(format!("{query:?} not found"));
            self.found = None;
            return None;
        }
        passed.push(Gap::of(&page));
        self.scan = Some(passed);
        self.raw_in_flight = Some(InFlight::Scan);
        Some(Scrolled::Raw {
            before: page.first_seq,
            limit: SCAN_PAGE,
            fill: false,
        })
    }

    /// A placeholder's frames came: rendered in its place (a search that
    /// waited for them goes on).
    pub fn filled(&mut self, page: RawPage, height: usize) -> Option<Scrolled> {
        let Some(InFlight::Fill(end)) = self.raw_in_flight else {
            return None;
        };
        self.raw_in_flight = None;
        let Some(at) = self
            .gaps
            .iter()
            .position(|g| g.end_seq == end && page.end_seq == end && !page.data.is_empty())
        else {
            // Not the frames asked for: retention let them go meanwhile.
            self.unfillable(end);
            self.resume_search = None;
            return self.next_want(height);
        };
        let gap = self.gaps.remove(at);
        let lines = scan::render(&page, self.cols as u16, self.screen_rows);
        let plain = lines.iter().map(|l| Some(strip(l))).collect();
        self.splice(gap.line, 1, lines, plain);
        if let Some(older) = self.resume_search.take() {
            return self.search(older, height);
        }
        self.next_want(height)
    }

    /// The page before the loaded lines came: it goes above them, the
    /// view stays on the same lines, a search waiting for it goes on
    /// (answering the page before this one when it finds nothing here).
    pub fn older_page(
        &mut self,
        lines: Vec<String>,
        older: Option<u64>,
        height: usize,
    ) -> Option<Scrolled> {
        if std::mem::take(&mut self.drop_older) {
            // Asked for before a search's hit went on top: out of place.
            self.asked = false;
            return None;
        }
        let plain = lines.iter().map(|l| Some(strip(l))).collect();
        self.splice(0, 0, lines, plain);
        self.older = older;
        self.asked = false;
        self.next_want(height)
            .filter(|w| matches!(w, Scrolled::Raw { .. }))
    }

    /// The older page, unless it was asked for already or there is none.
    fn want_older(&mut self) -> Option<u64> {
        // A search walking back decides what goes on top first.
        if self.scan.is_some() {
            return None;
        }
        let before = self.older.filter(|_| !self.asked)?;
        self.asked = true;
        self.note = Some("loading older output".into());
        Some(before)
    }

    /// Keys as read (several may come in one read: a held key, a paste,
    /// a burst of wheel reports): each is applied in turn.
    pub fn keys(&mut self, bytes: &[u8], height: usize) -> Scrolled {
        let mut rest = bytes;
        let mut want = None;
        while !rest.is_empty() {
            let len = key_len(rest);
            match self.key(&rest[..len], height) {
                Scrolled::Quit => return Scrolled::Quit,
                Scrolled::Stay => {}
                other if want.is_none() => want = Some(other),
                other => self.more.push(other),
            }
            rest = &rest[len..];
        }
        // A placeholder or the top in view is asked for by the next keys
        // when a search asks for something now.
        want.or_else(|| self.next_want(height))
            .unwrap_or(Scrolled::Stay)
    }

    fn key(&mut self, key: &[u8], height: usize) -> Scrolled {
        if let Some(text) = self.typing.as_mut() {
            match key {
                b"\r" | b"\n" => {
                    let query = String::from_utf8_lossy(&std::mem::take(text)).into_owned();
                    self.typing = None;
                    if !query.is_empty() {
                        self.query = Some(query);
                    }
                    self.found = None;
                    if let Some(want) = self.search(true, height) {
                        return want;
                    }
                }
                b"\x1b" | b"\x03" => self.typing = None,
                b"\x7f" | b"\x08" => {
                    // A whole character goes, not a byte of one.
                    let keep = String::from_utf8_lossy(text)
                        .chars()
                        .count()
                        .saturating_sub(1);
                    let kept: String = String::from_utf8_lossy(text).chars().take(keep).collect();
                    *text = kept.into_bytes();
                }
                k if k[0] >= 0x20 && k[0] != 0x7f && text.len() + k.len() <= MAX_QUERY => {
                    text.extend_from_slice(k)
                }
                _ => {}
            }
            return Scrolled::Stay;
        }
        let page = height.saturating_sub(1).max(1);
        // A note (not found) lasts until the next key.
        self.note = None;
        match key {
            b"q" | b"\x1b" | b"\x03" => return Scrolled::Quit,
            b"k" | b"\x1b[A" | b"\x1bOA" => self.up(1),
            b"j" | b"\x1b[B" | b"\x1bOB" => self.down(1),
            b"\x1b[5~" | b"\x02" | b"b" => self.up(page),
            b"\x1b[6~" | b"\x06" | b" " => self.down(page),
            b"g" | b"\x1b[H" | b"\x1b[1~" => self.bottom = height.saturating_sub(1),
            b"G" | b"\x1b[F" | b"\x1b[4~" => self.bottom = self.last(),
            b"/" | b"?" => self.typing = Some(Vec::new()),
            b"n" => {
                if let Some(want) = self.search(true, height) {
                    return want;
                }
            }
            b"N" => {
                if let Some(want) = self.search(false, height) {
                    return want;
                }
            }
            _ => match wheel(key) {
                Some(Wheel::Up) => self.up(WHEEL),
                Some(Wheel::Down) => self.down(WHEEL),
                None => {}
            },
        }
        self.bottom = self.bottom.max(height.saturating_sub(1)).min(self.last());
        Scrolled::Stay
    }

    fn last(&self) -> usize {
        self.lines.len().saturating_sub(1)
    }

    fn up(&mut self, n: usize) {
        self.bottom = self.bottom.saturating_sub(n);
    }

    fn down(&mut self, n: usize) {
        self.bottom = (self.bottom + n).min(self.last());
    }

    /// Finds the query from the line above the found one (or the view's
    /// top) towards older lines, or below it towards newer ones. A
    /// placeholder nearer than any hit is filled first; towards older,
    /// when nothing loaded has it, raw pages of older output are searched.
    fn search(&mut self, older: bool, height: usize) -> Option<Scrolled> {
        let Some(query) = self.query.clone() else {
            self.note = Some("no search yet: / starts one".into());
            return None;
        };
        if self.raw_in_flight.is_some() {
            // It goes on when the page on its way came.
            if self.scan.is_none() {
                self.resume_search = Some(older);
            }
            self.note = Some(format!("searching for {query:?}"));
            return None;
        }
        let top = self.bottom.saturating_sub(height.saturating_sub(1));
        let from = self.found.unwrap_or(if older { top } else { self.bottom });
        let hit = if older {
            (0..from)
                .rev()
                .find(|&i| scan::matches(&self.plain[i], &query))
        } else {
            (from + 1..self.lines.len()).find(|&i| scan::matches(&self.plain[i], &query))
        };
        // A placeholder between here and the hit (or the end) first.
        let gap = if older {
            self.gaps
                .iter()
                .rev()
                .find(|g| g.line < from && hit.is_none_or(|h| g.line > h))
        } else {
            self.gaps
                .iter()
                .find(|g| g.line > from && hit.is_none_or(|h| g.line < h))
        };
        if let Some(g) = gap {
            let end = g.end_seq;
            self.resume_search = Some(older);
            let towards = if older { "older" } else { "newer" };
            self.note = Some(format!("searching {towards} output for {query:?}"));
            let k = self.gaps.iter().position(|g| g.end_seq == end)?;
            return Some(self.fill(k));
        }
        match hit {
            Some(i) => {
                self.found = Some(i);
                self.note = None;
                self.center(i, height);
                None
            }
            None if older && self.older.is_some() => {
                self.found = Some(0);
                self.scan = Some(Vec::new());
                self.raw_in_flight = Some(InFlight::Scan);
                // An older page on its way would go above what the
                // search finds: it is dropped when it comes.
                self.drop_older = self.asked;
                self.note = Some(format!("searching older output for {query:?}"));
                Some(Scrolled::Raw {
                    before: self.older?,
                    limit: SCAN_PAGE,
                    fill: false,
                })
            }
            None => {
                self.note = Some(format!("{query:?} not found"));
                None
            }
        }
    }

    /// Draws the view over the whole frame; the last row is the mode's own
    /// status row.
    pub fn draw(&self, frame: &mut Frame) {
        let (cols, rows) = frame.size();
        let height = rows.saturating_sub(1);
        let top = (self.bottom + 1).saturating_sub(height);
        let mut probe =
            avt::Terminal::new(self.cols.max(cols).max(1), 1).expect("a 1-row terminal");
        for r in 0..height {
            frame.fill(r, 0, Pen::default());
            let Some(line) = self.lines.get(top + r) else {
                continue;
            };
            probe.feed("\r\x1b[0m\x1b[2K");
            probe.feed(line.as_str());
            if let Some(cells) = probe.screen().visible_lines().next().map(|l| l.cells()) {
                for (c, cell) in cells.iter().take(cols).enumerate() {
                    frame.rows[r][c] = Glyph::from_cell(cell);
                }
                if let Some(last) = frame.rows[r].last_mut() {
                    if last.width == 2 {
                        *last = Glyph::blank();
                    }
                }
            }
            if Some(top + r) == self.found {
                for g in &mut frame.rows[r] {
                    g.pen.set_inverse();
                }
            }
        }
        let status = match (&self.typing, &self.note) {
            (Some(text), _) => format!("search (older): {}", String::from_utf8_lossy(text)),
            (None, Some(note)) => format!("[scroll] {note}"),
            (None, None) => format!(
                "[scroll] q back · / search · n N next · ↑↓ PgUp PgDn g G wheel · line {} of {}",
                self.bottom + 1,
                self.lines.len()
            ),
        };
        let mut pen = Pen::default();
        pen.set_inverse();
        if rows > 0 {
            let end = frame.put_text(rows - 1, 0, &status, pen);
            frame.fill(rows - 1, end, pen);
        }
        frame.cursor = self.typing.as_ref().map(|t| {
            let t = String::from_utf8_lossy(t);
            (
                rows.saturating_sub(1),
                ("search (older): ".len() + t.chars().count()).min(cols.saturating_sub(1)),
            )
        });
    }
}

enum Wheel {
    Up,
    Down,
}

/// The length of the first key in `bytes`: an escape sequence (CSI up to
/// its final byte, SS3 and one byte, a lone ESC), or one UTF-8 character.
fn key_len(bytes: &[u8]) -> usize {
    match bytes {
        [0x1b, b'[', rest @ ..] => rest
            .iter()
            .position(|b| (0x40..=0x7e).contains(b))
            .map_or(bytes.len(), |at| at + 3),
        [0x1b, b'O', _, ..] => 3,
        [b, ..] if *b >= 0xc0 => {
            let want = if *b >= 0xf0 {
                4
            } else if *b >= 0xe0 {
                3
            } else {
                2
            };
            want.min(bytes.len())
        }
        _ => 1,
    }
}

/// An SGR mouse report of the wheel: `ESC [ < 64 ; x ; y M` (up), 65 down.
fn wheel(bytes: &[u8]) -> Option<Wheel> {
    let rest = bytes.strip_prefix(b"\x1b[<")?;
    let button = rest.split(|b| *b == b';').next()?;
    match button {
        b"64" => Some(Wheel::Up),
        b"65" => Some(Wheel::Down),
        _ => None,
    }
}

/// A rendered line's text without its escape sequences.
fn strip(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('\x40'..='\x7e').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(frame: &Frame) -> Vec<String> {
        frame
            .rows
            .iter()
            .map(|r| {
                r.iter()
                    .filter(|g| g.width > 0)
                    .map(|g| g.ch)
                    .collect::<String>()
                    .trim_end()
                    .to_string()
            })
            .collect()
    }

    fn history(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("\x1b[32mline {i}\x1b[0m")).collect()
    }

    #[test]
    fn starts_at_the_bottom_and_pages() {
        let mut s = Scroll::new(history(100), 20, None);
        let mut f = Frame::blank(20, 5);
        s.draw(&mut f);
        assert_eq!(rows(&f)[..4], ["line 96", "line 97", "line 98", "line 99"]);
        assert!(rows(&f)[4].starts_with("[scroll] q back"));
        s.keys(b"\x1b[5~", 4);
        s.draw(&mut f);
        assert_eq!(rows(&f)[3], "line 96");
        s.keys(b"g", 4);
        s.draw(&mut f);
        assert_eq!(rows(&f)[0], "line 0");
        s.keys(b"\x1b[<65;3;3M", 4);
        s.draw(&mut f);
        assert_eq!(rows(&f)[0], "line 3");
        assert_eq!(s.keys(b"q", 4), Scrolled::Quit);
    }

    #[test]
    fn search_finds_older_lines_then_newer() {
        let mut s = Scroll::new(history(6000), 30, None);
        let mut f = Frame::blank(30, 11);
        s.keys(b"/", 10);
        s.keys(b"line 12", 10);
        s.draw(&mut f);
        assert_eq!(rows(&f)[10], "search (older): line 12");
        s.keys(b"\r", 10);
        s.draw(&mut f);
        // The nearest older match, 4,700 lines up.
        assert!(rows(&f).iter().any(|r| r == "line 1299"), "{:?}", rows(&f));
        assert!(
            f.rows.iter().any(|r| r[0].pen.is_inverse()),
            "the match is marked"
        );
        s.keys(b"n", 10);
        s.draw(&mut f);
        assert!(rows(&f).iter().any(|r| r == "line 1298"));
        s.keys(b"N", 10);
        s.draw(&mut f);
        assert!(rows(&f).iter().any(|r| r == "line 1299"));
        s.keys(b"/", 10);
        s.keys(b"nowhere\r", 10);
        s.draw(&mut f);
        assert!(rows(&f)[10].contains("not found"));
    }

    #[test]
    fn several_keys_in_one_read_each_count() {
        let mut s = Scroll::new(history(100), 20, None);
        s.keys(b"kkk\x1b[A\x1b[A", 4);
        let mut f = Frame::blank(20, 5);
        s.draw(&mut f);
        assert_eq!(rows(&f)[3], "line 94");
        s.keys(b"\x1b[<64;1;1M\x1b[<64;1;1M", 4);
        s.draw(&mut f);
        assert_eq!(rows(&f)[3], "line 88");
        assert_eq!(s.keys(b"jq", 4), Scrolled::Quit);
    }

    #[test]
    fn search_is_by_character() {
        let mut lines = history(10);
        lines.insert(3, "needle-日本 here".into());
        let mut s = Scroll::new(lines, 30, None);
        s.keys("/needle-日本x\x7f\r".as_bytes(), 5);
        let mut f = Frame::blank(30, 6);
        s.draw(&mut f);
        assert!(
            rows(&f).iter().any(|r| r.starts_with("needle-日")),
            "{:?}",
            rows(&f)
        );
    }

    #[test]
    fn strips_escapes() {
        assert_eq!(strip("\x1b[1;31mred\x1b[0m plain"), "red plain");
    }

    #[test]
    fn the_top_asks_once_for_the_page_before_it() {
        // Lines 500..600 loaded; older output from seq 40 down.
        let mut s = Scroll::new(page(500, 600), 20, Some(40));
        let height = 10;
        let mut asked = Vec::new();
        for _ in 0..20 {
            if let Scrolled::Older(before) = s.keys(b"\x1b[5~", height) {
                asked.push(before);
            }
        }
        assert_eq!(asked, [40], "asked once until it comes");
        // It comes: the view stays on the same lines, above them is more.
        let top_before = s.bottom + 1 - height;
        assert_eq!(s.older_page(page(0, 500), None, height), None);
        assert_eq!(s.bottom + 1 - height, top_before + 500);
        assert_eq!(s.keys(b"\x1b[5~", height), Scrolled::Stay);
    }

    fn page(from: usize, to: usize) -> Vec<String> {
        (from..to).map(|i| format!("line {i}")).collect()
    }

    /// Raw output of lines `from..to`, as the frames `first..=end`.
    fn raw(from: usize, to: usize, first: u64, end: u64, more: bool) -> RawPage {
        let data: String = (from..to).map(|i| format!("line {i}\r\n")).collect();
        RawPage {
            data: data.into_bytes(),
            first_seq: first,
            end_seq: end,
            more,
        }
    }

    fn want(before: u64, limit: u64, fill: bool) -> Option<Scrolled> {
        Some(Scrolled::Raw {
            before,
            limit,
            fill,
        })
    }

    #[test]
    fn a_refused_page_stops_the_search_and_a_placeholder_says_it_is_gone() {
        let height = 10;
        let mut s = Scroll::new(page(500, 600), 20, Some(40)).sized(5);
        assert_eq!(
            s.keys(b"/line 27\r", height),
            want(40, SCAN_PAGE, false).unwrap()
        );
        // Another search while it walks waits for it.
        assert_eq!(s.keys(b"n", height), Scrolled::Stay);
        s.failed(Failed::Scan, "unavailable");
        assert!(s.note.as_deref().unwrap().contains("unavailable"));
        assert_eq!(s.found, None, "no line marked");
        // A new search starts again.
        assert_eq!(
            s.keys(b"/line 27\r", height),
            want(40, SCAN_PAGE, false).unwrap()
        );
        s.scanned(raw(400, 500, 30, 39, true), height);
        s.scanned(raw(200, 400, 10, 29, true), height);
        // The placeholder's frames are gone when asked for.
        let asked = (0..200).find_map(|_| match s.keys(b"j", height) {
            w @ Scrolled::Raw { .. } => Some(w),
            _ => None,
        });
        assert!(matches!(asked, Some(Scrolled::Raw { fill: true, .. })));
        let gone = RawPage {
            data: Vec::new(),
            ..raw(0, 0, 0, 0, false)
        };
        s.filled(gone, height);
        assert!(s.lines.iter().any(|l| l.contains("no longer retained")));
        assert!(s.gaps.is_empty());
    }

    #[test]
    fn no_older_page_is_asked_for_while_a_search_walks_back() {
        let height = 10;
        let mut s = Scroll::new(page(500, 600), 20, Some(40)).sized(5);
        let first = s.keys(b"/nowhere\rg", height);
        assert_eq!(first, want(40, SCAN_PAGE, false).unwrap());
        assert!(
            s.take_more().is_empty(),
            "no older page while a search walks back"
        );
    }

    #[test]
    fn a_search_past_the_loaded_lines_reads_raw_pages_then_fills_the_ones_between() {
        // Lines 500..600 loaded (seqs 40..); before them, raw pages of
        // 100 lines each: seqs 30..=39 hold lines 400..500, 20..=29 lines
        // 300..400, 10..=19 lines 200..300.
        let height = 10;
        let mut s = Scroll::new(page(500, 600), 20, Some(40)).sized(5);
        assert_eq!(
            s.keys(b"/line 27\r", height),
            want(40, SCAN_PAGE, false).unwrap()
        );
        let older = raw(400, 500, 30, 39, true);
        let len_30 = older.data.len() as u64;
        assert_eq!(s.scanned(older, height), want(30, SCAN_PAGE, false));
        let older = raw(300, 400, 20, 29, true);
        let len_20 = older.data.len() as u64;
        assert_eq!(s.scanned(older, height), want(20, SCAN_PAGE, false));
        // The hit: its page is rendered above two placeholders, the view
        // on the newest line with the query (line 279).
        let fill = s.scanned(raw(200, 300, 10, 19, true), height);
        let found = s.found.unwrap();
        assert_eq!(strip(&s.lines[found]), "line 279");
        assert_eq!(s.older, Some(10));
        assert_eq!(s.gaps.len(), 2);
        // The rendered page ends with its last line then a blank line (the
        // cursor's row): the placeholder for seqs 20..=29 is just below.
        let first_gap = s.gaps[0].clone();
        assert_eq!((first_gap.first_seq, first_gap.end_seq), (20, 29));
        assert!(s.lines[first_gap.line].contains("KiB of output"));
        assert_eq!(fill, None, "the placeholder is not in view yet");
        // Scrolling down brings it into view: its frames are asked for,
        // once, and rendered in its place.
        let asked = (0..40).find_map(|_| match s.keys(b"j", height) {
            w @ Scrolled::Raw { .. } => Some(w),
            _ => None,
        });
        assert_eq!(asked, want(30, len_20, true));
        assert_eq!(s.keys(b"k", height), Scrolled::Stay, "asked once");
        assert_eq!(s.filled(raw(300, 400, 20, 29, true), height), None);
        assert!(s.plain.iter().any(|l| l == "line 399"));
        // `n` goes on to older hits; `N` back to newer ones.
        s.keys(b"n", height);
        assert_eq!(strip(&s.lines[s.found.unwrap()]), "line 278");
        s.keys(b"N", height);
        assert_eq!(strip(&s.lines[s.found.unwrap()]), "line 279");
        // A search towards older from below an unfilled placeholder fills
        // it first, then goes on in it.
        s.keys(b"G", height);
        assert_eq!(
            s.keys(b"/line 45\r", height),
            want(40, len_30, true).unwrap()
        );
        assert_eq!(s.filled(raw(400, 500, 30, 39, true), height), None);
        assert_eq!(strip(&s.lines[s.found.unwrap()]), "line 459");
        // Towards newer lines, through the placeholders between.
        let mut s = Scroll::new(page(500, 600), 20, Some(40)).sized(5);
        s.keys(b"/line 27\r", height);
        s.scanned(raw(400, 500, 30, 39, true), height);
        s.scanned(raw(300, 400, 20, 29, true), height);
        s.scanned(raw(200, 300, 10, 19, true), height);
        assert_eq!(
            s.keys(b"/line 45\rN", height),
            want(10, SCAN_PAGE, false).unwrap()
        );
        let oldest = RawPage {
            data: b"the oldest\r\n".to_vec(),
            ..raw(0, 0, 1, 9, false)
        };
        assert_eq!(s.scanned(oldest, height), None);
        assert!(s.note.as_deref().unwrap().contains("not found"));
        assert_eq!(s.keys(b"N", height), want(30, len_20, true).unwrap());
        assert_eq!(
            s.filled(raw(300, 400, 20, 29, true), height),
            want(40, len_30, true)
        );
        assert_eq!(s.filled(raw(400, 500, 30, 39, true), height), None);
        assert_eq!(strip(&s.lines[s.found.unwrap()]), "line 450");
        // Nothing anywhere: not found once the oldest page is read.
        s.keys(b"/nowhere\r", height);
        assert_eq!(s.scanned(raw(0, 200, 1, 9, false), height), None);
        assert!(s.note.as_deref().unwrap().contains("not found"));
    }
}
