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
use keys::{key_len, strip, wheel, Wheel};

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

mod keys;
#[cfg(test)]
mod tests;
