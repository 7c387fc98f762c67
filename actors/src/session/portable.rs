//! Snapshots every common terminal draws the same (PROTOCOL.md section 7).
//! avt's `dump()` is exact for avt but uses sequences that macOS Terminal,
//! GNU screen, pyte and some xterm.js builds do not: REP (`CSI n b`) for
//! runs of one character, the colon form of extended colours (`38:5:208`),
//! the alternate screen as mode 1047 (the `vt100` crate and pyte know only
//! 1049), and 8-bit C1 controls for a sequence the program left unfinished.
//! This rewrites a dump into the portable subset with the same meaning:
//! runs spelled out, `;` separators, mode 1049, 7-bit escapes. Pure logic.
//!
//! On 1049 for 1047: 1049 also saves the cursor (as DECSC) on entry and
//! restores it on exit. avt's dump enters the alternate screen with the
//! cursor at the primary screen's cursor, which is what the program's own
//! 1049 saved, so the state after the snapshot is the same.

/// Rewrites `dump` (avt's output) into the portable subset, each row's
/// trailing blanks erased rather than written (`row_ends`).
pub fn portable(dump: &str, cols: usize) -> String {
    row_ends(&spelled_out(dump), cols.max(1))
}

fn spelled_out(dump: &str) -> String {
    let mut out = String::with_capacity(dump.len() + dump.len() / 8);
    let mut last_graphic: Option<char> = None;
    let mut chars = dump.chars().peekable();
    while let Some(c) = chars.next() {
        let csi = match c {
            '\x1b' if chars.peek() == Some(&'[') => {
                chars.next();
                true
            }
            // C1 CSI, as avt writes an unfinished sequence.
            '\u{9b}' => true,
            // Other C1 controls: the 7-bit form, ESC and the byte - 0x40.
            '\u{80}'..='\u{9f}' => {
                out.push('\x1b');
                out.push(char::from(c as u8 - 0x40));
                continue;
            }
            _ => false,
        };
        if !csi {
            if !c.is_control() {
                last_graphic = Some(c);
            }
            out.push(c);
            continue;
        }
        // Parameters (0x30-0x3F), intermediates (0x20-0x2F), final byte.
        let mut body = String::new();
        let mut last = None;
        for b in chars.by_ref() {
            if ('\x40'..='\x7e').contains(&b) {
                last = Some(b);
                break;
            }
            body.push(b);
        }
        match last {
            Some('b') if body.bytes().all(|b| b.is_ascii_digit()) => {
                let n: usize = body.parse().unwrap_or(1).max(1);
                if let Some(ch) = last_graphic {
                    out.extend(std::iter::repeat_n(ch, n));
                }
            }
            Some('m') => {
                out.push_str("\x1b[");
                out.push_str(&body.replace(':', ";"));
                out.push('m');
            }
            Some(f @ ('h' | 'l')) if body.starts_with('?') => {
                let modes: Vec<&str> = body[1..]
                    .split(';')
                    .map(|m| if m == "1047" || m == "47" { "1049" } else { m })
                    .collect();
                out.push_str("\x1b[?");
                out.push_str(&modes.join(";"));
                out.push(f);
            }
            Some(f) => {
                out.push_str("\x1b[");
                out.push_str(&body);
                out.push(f);
            }
            // Unfinished (the program's output stops mid-sequence): keep
            // it, so the live output that follows completes it.
            None => {
                out.push_str("\x1b[");
                out.push_str(&body);
            }
        }
    }
    out
}

/// avt's dump writes every cell of a row, its trailing blanks as spaces.
/// A terminal keeps a written space as content: xterm.js, narrowed,
/// rewraps a padded row into the row and a wrapped row of spaces (the
/// console's double-spaced screens). This erases such a run instead
/// (`CSI K`, which leaves the cursor where it was): where the run ends the
/// row (a CR, or a sequence other than SGR, or the end, with only SGRs
/// between), stays on one row (the column is followed; where it is not
/// known, nothing is erased) and its pen shows nothing on a blank (no
/// background, inverse, underline, strike-through or overline). The
/// screen drawn is the same; a fresh terminal's blanks are what the erase
/// leaves.
fn row_ends(text: &str, cols: usize) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pen = BlankPen::default();
    let mut run = Blanks::default();
    // Nothing printed since the cursor was placed: a blank printed there is
    // avt restoring a pending wrap (its last column), not a row's end.
    let mut placed = false;
    // The cursor's column (`cols`: past the last, a wrap pending).
    let mut col = Some(0usize);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            let width = match c {
                '\r' => {
                    run.flush(&mut out, End::Row);
                    col = Some(0);
                    out.push(c);
                    continue;
                }
                '\n' => Some(0),
                _ => unicode_width::UnicodeWidthChar::width(c).filter(|w| *w > 0),
            };
            let wraps = col.zip(width).is_some_and(|(at, w)| at + w > cols);
            col = col.zip(width).map(|(at, w)| if wraps { w } else { at + w });
            // A blank on the same row as the run, in a pen that shows nothing.
            let joins = c == ' '
                && pen.shows_nothing()
                && run.after.is_empty()
                && col.is_some_and(|at| at > run.count);
            if joins {
                if run.count == 0 {
                    run.placed = placed;
                    run.wrapped = wraps;
                }
                run.count += 1;
                continue;
            }
            run.flush(&mut out, End::Not);
            placed = false;
            if c == ' ' && pen.shows_nothing() && col.is_some() {
                run = Blanks {
                    count: 1,
                    placed,
                    wrapped: wraps,
                    after: String::new(),
                };
            } else {
                out.push(c);
            }
            continue;
        }
        let mut seq = String::from(c);
        let end = match chars.next() {
            Some('[') => {
                seq.push('[');
                let mut last = None;
                for b in chars.by_ref() {
                    seq.push(b);
                    if ('\x40'..='\x7e').contains(&b) {
                        last = Some(b);
                        break;
                    }
                }
                let params = &seq[2..seq.len() - usize::from(last.is_some())];
                match last {
                    Some('m') => {
                        pen.apply(params);
                        if run.count > 0 {
                            run.after.push_str(&seq);
                            continue;
                        }
                        End::Not
                    }
                    // Unfinished: the row is not known to end.
                    None | Some('b') => {
                        col = None;
                        End::Not
                    }
                    Some(f) => {
                        col = match f {
                            'H' | 'f' => Some(nth_param(params, 1).min(cols) - 1),
                            'G' => Some(nth_param(params, 0).min(cols) - 1),
                            'r' => Some(0),
                            'K' | 'J' | 'h' | 'l' | 'g' => col,
                            _ => None,
                        };
                        End::Move
                    }
                }
            }
            Some(n) => {
                seq.push(n);
                // Designations (`ESC ( B`) take one more character.
                if matches!(n, '(' | ')' | '*' | '+') {
                    seq.extend(chars.next());
                } else if n != '7' {
                    col = None;
                }
                End::Move
            }
            None => End::Not,
        };
        run.flush(&mut out, end);
        if end == End::Move {
            placed = true;
        }
        out.push_str(&seq);
    }
    run.flush(&mut out, End::Move);
    out
}

/// The `i`th (from 0) of a CSI's `;`-separated parameters, 1 when absent
/// or 0.
fn nth_param(params: &str, i: usize) -> usize {
    params
        .split(';')
        .nth(i)
        .and_then(|p| p.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

/// What follows a run of blanks.
#[derive(Clone, Copy, PartialEq)]
enum End {
    /// A CR: the row ends.
    Row,
    /// A sequence other than SGR (or the end): the row ends, unless the run
    /// was printed where the cursor had just been placed.
    Move,
    /// More of the row.
    Not,
}

/// A run of blanks that may end its row, and the SGRs seen after it.
#[derive(Default)]
struct Blanks {
    count: usize,
    placed: bool,
    /// Its first blank wrapped onto the row: that one is printed, so the
    /// wrap happens.
    wrapped: bool,
    after: String,
}

impl Blanks {
    fn flush(&mut self, out: &mut String, end: End) {
        if self.count > 0 {
            let erase = end == End::Row || (end == End::Move && !self.placed);
            if erase {
                if self.wrapped {
                    out.push(' ');
                }
                if self.count > usize::from(self.wrapped) {
                    out.push_str("\x1b[K");
                }
            } else {
                out.extend(std::iter::repeat_n(' ', self.count));
            }
        }
        out.push_str(&self.after);
        *self = Blanks::default();
    }
}

/// What of the pen shows on a blank cell.
#[derive(Default)]
struct BlankPen {
    background: bool,
    inverse: bool,
    underline: bool,
    strike: bool,
    overline: bool,
}

impl BlankPen {
    fn shows_nothing(&self) -> bool {
        !(self.background || self.inverse || self.underline || self.strike || self.overline)
    }

    /// Applies an SGR's parameters (`;`-separated, as `portable` writes).
    fn apply(&mut self, params: &str) {
        let mut ps = params.split(';').map(|p| p.parse::<u16>().unwrap_or(0));
        while let Some(p) = ps.next() {
            match p {
                0 => *self = BlankPen::default(),
                4 | 21 => self.underline = true,
                24 => self.underline = false,
                7 => self.inverse = true,
                27 => self.inverse = false,
                9 => self.strike = true,
                29 => self.strike = false,
                53 => self.overline = true,
                55 => self.overline = false,
                40..=47 | 100..=107 => self.background = true,
                49 => self.background = false,
                38 | 48 | 58 => {
                    let skip = match ps.next() {
                        Some(5) => 1,
                        Some(2) => 3,
                        _ => 0,
                    };
                    for _ in 0..skip {
                        ps.next();
                    }
                    if p == 48 {
                        self.background = true;
                    }
                }
                _ => {}
            }
        }
    }
}

/// Whether `text` uses only the portable subset (for tests and asserts):
/// no REP, no colon in SGR, no C1 controls.
pub fn is_portable(text: &str) -> bool {
    let mut rest = text;
    if text.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)) {
        return false;
    }
    while let Some(at) = rest.find("\x1b[") {
        rest = &rest[at + 2..];
        let end = rest
            .find(|c: char| ('\x40'..='\x7e').contains(&c))
            .unwrap_or(rest.len());
        let (body, tail) = rest.split_at(end);
        match tail.chars().next() {
            Some('b') if body.bytes().all(|b| b.is_ascii_digit()) => return false,
            Some('m') if body.contains(':') => return false,
            Some('h' | 'l')
                if body.starts_with('?')
                    && body[1..].split(';').any(|m| m == "1047" || m == "47") =>
            {
                return false
            }
            _ => {}
        }
        rest = tail;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use avt::Terminal;
    use proptest::prelude::*;

    fn p(dump: &str) -> String {
        portable(dump, 80)
    }

    #[test]
    fn runs_are_spelled_out() {
        assert_eq!(p("+-\x1b[23b+"), format!("+{}+", "-".repeat(24)));
        assert_eq!(p("界\x1b[2b"), "界界界");
        assert_eq!(p("x\x1b[b"), "xx", "no parameter means one");
        assert_eq!(p("x\x1b[1;31m\x1b[3b"), "x\x1b[1;31mxxx");
    }

    #[test]
    fn colours_use_semicolons() {
        assert_eq!(
            p("\x1b[0;38:5:208;48:2:1:2:3mhi"),
            "\x1b[0;38;5;208;48;2;1;2;3mhi"
        );
        // Other sequences are left alone.
        assert_eq!(p("\x1b[?1049h\x1b[3;4H"), "\x1b[?1049h\x1b[3;4H");
    }

    #[test]
    fn the_alternate_screen_is_mode_1049() {
        assert_eq!(p("\x1b[?1047h"), "\x1b[?1049h");
        assert_eq!(p("\x1b[?25;1047l"), "\x1b[?25;1049l");
        assert!(!is_portable("\x1b[?1047h"));
    }

    #[test]
    fn c1_controls_become_seven_bit() {
        assert_eq!(p("ab\u{9b}1;3"), "ab\x1b[1;3");
        assert_eq!(p("\u{9d}0;title"), "\x1b]0;title");
        assert!(is_portable(&p("\u{90}q")));
    }

    #[test]
    fn the_check_finds_what_it_should() {
        assert!(!is_portable("a\x1b[5b"));
        assert!(!is_portable("\x1b[38:5:1m"));
        assert!(!is_portable("\u{9b}1m"));
        assert!(is_portable("\x1b[38;5;1mab\x1b[2J\x1b[?25l"));
    }

    #[test]
    fn blanks_that_end_a_row_are_erased_not_written() {
        assert_eq!(p("ab   \r\ncd"), "ab\x1b[K\r\ncd");
        // The last row: SGRs and a cursor move follow it.
        assert_eq!(p("$    \x1b[0m\x1b[3;3H"), "$\x1b[K\x1b[0m\x1b[3;3H");
        assert_eq!(p("$ \x1b[5b"), "$\x1b[K", "a run spelled out, then erased");
        // Blanks inside a row stay, before text or a pen change and text.
        assert_eq!(p("a   b"), "a   b");
        assert_eq!(p("a  \x1b[1mb  \r\n"), "a  \x1b[1mb\x1b[K\r\n");
        // Blanks that show their pen stay.
        assert_eq!(p("\x1b[44m   \r\n"), "\x1b[44m   \r\n");
        assert_eq!(p("\x1b[7m  \x1b[27m  \r\n"), "\x1b[7m  \x1b[27m\x1b[K\r\n");
        assert_eq!(
            p("\x1b[48;5;1m \x1b[0m \r\n"),
            "\x1b[48;5;1m \x1b[0m\x1b[K\r\n"
        );
        assert_eq!(p("\x1b[38;2;1;2;3m \r\n"), "\x1b[38;2;1;2;3m\x1b[K\r\n");
        // A run that a wrap splits: only its last row's part goes.
        assert_eq!(portable("ab    \r\n", 4), "ab   \x1b[K\r\n");
        assert_eq!(portable("abcd  \r\n", 4), "abcd \x1b[K\r\n");
        assert_eq!(portable("abcd \r\n", 4), "abcd \r\n");
        // After a character of unknown width, nothing is erased.
        assert_eq!(portable("e\u{301}  \r\n", 4), "e\u{301}  \r\n");
        // A blank reprinted where the cursor was placed (a pending wrap).
        assert_eq!(p("\x1b[1;80H \x1b[0m"), "\x1b[1;80H \x1b[0m");
        // An unfinished sequence does not end the row.
        assert_eq!(p("a  \x1b[3"), "a  \x1b[3");
    }

    /// Every cell's character and pen, row by row.
    fn cells(t: &Terminal) -> Vec<Vec<(char, avt::Pen)>> {
        t.screen()
            .visible_lines()
            .map(|l| l.cells().iter().map(|c| (c.char(), *c.pen())).collect())
            .collect()
    }

    fn screen_of(text: &str, cols: usize, rows: usize) -> Terminal {
        let mut t = Terminal::new(cols, rows).unwrap();
        t.feed(text);
        t
    }

    proptest! {
        /// The portable form draws exactly what the dump draws (in avt),
        /// and uses only the portable subset.
        #[test]
        fn same_screen_portable_form(chunks in proptest::collection::vec(prop_oneof![
            Just("\r\n".to_string()), Just("\x1b[38;5;208m".to_string()),
            Just("\x1b[48;2;10;20;30m".to_string()), Just("\x1b[1;4m".to_string()),
            Just("\x1b[0m".to_string()), Just("\x1b[?1049h".to_string()),
            Just("\x1b[?1049l".to_string()), Just("\x1b[2;5H".to_string()),
            Just("\x1b[?25l".to_string()), Just("\x1b(0qqqq\x1b(B".to_string()),
            Just("界界界界界界界".to_string()), Just("-".repeat(17)),
            Just("\x1b[3".to_string()),
            "[a-z ]{1,12}"], 0..40)) {
            let input: String = chunks.concat();
            let live = screen_of(&input, 30, 8);
            let dump = live.dump();
            let port = portable(&dump, 30);
            prop_assert!(is_portable(&port), "{:?}", port);
            let a = screen_of(&dump, 30, 8);
            let b = screen_of(&port, 30, 8);
            let lines = |t: &Terminal| t.screen().visible_lines().map(|l| l.text()).collect::<Vec<_>>();
            prop_assert_eq!(lines(&a), lines(&b));
            prop_assert_eq!(cells(&a), cells(&b));
            prop_assert_eq!(a.cursor(), b.cursor());
        }
    }
}
