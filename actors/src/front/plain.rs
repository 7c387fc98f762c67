//! Terminal output as plain text (`read`, PROTOCOL.md section 15): escape
//! sequences removed, carriage-return redraws collapsed to what the line
//! showed last (a spinner's hundred frames become its last one), lines
//! joined with `\n`. A line model, not a screen: cursor moves within a
//! line (`\r`, backspace, `CSI C/D/G`, erase `CSI K`) are followed, moves
//! between lines are not (a full-screen program's text comes out in the
//! order it was drawn). The parsing is `escapes`.

/// Tab stops every this many columns.
const TAB: usize = 8;
/// A line longer than this is cut (a program printing megabytes without a
/// newline does not make one huge line of cells).
const MAX_LINE: usize = 64 * 1024;

/// The text of `bytes`.
pub fn text(bytes: &[u8]) -> String {
    let mut plain = Plain::default();
    plain.feed(bytes);
    let mut out = String::new();
    for line in plain.take_lines() {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(&plain.partial());
    out
}

/// Plain text fed in pieces (a frame at a time: a sequence or a character
/// may be split between them); complete lines are taken as they end.
#[derive(Default)]
pub struct Plain {
    parser: super::escapes::Parser,
    lines: Lines,
}

impl Plain {
    pub fn feed(&mut self, bytes: &[u8]) {
        self.parser.feed(&mut self.lines, bytes);
    }

    /// The lines ended since the last call, trailing blanks trimmed.
    pub fn take_lines(&mut self) -> Vec<String> {
        std::mem::take(&mut self.lines.done)
    }

    /// Lines done with, their allocations used again for the next lines
    /// (a search reads gigabytes a line at a time).
    pub fn recycle(&mut self, lines: impl IntoIterator<Item = String>) {
        let pool = &mut self.lines.pool;
        pool.extend(lines.into_iter().take(POOL.saturating_sub(pool.len())));
    }

    /// The line not ended yet.
    pub fn partial(&self) -> String {
        self.lines.line.trim_end_matches(' ').to_string()
    }
}

/// The line being drawn: appended to as a `String` while the cursor is at
/// its end (nearly always), edited as characters when a redraw moves it
/// back.
/// Line buffers kept for reuse, at most.
const POOL: usize = 64;

#[derive(Default)]
struct Lines {
    done: Vec<String>,
    pool: Vec<String>,
    line: String,
    /// Characters in `line`.
    len: usize,
    /// The cursor, in characters.
    col: usize,
}

impl Lines {
    fn end_line(&mut self) {
        let mut next = self.pool.pop().unwrap_or_default();
        next.clear();
        let mut line = std::mem::replace(&mut self.line, next);
        let trimmed = line.trim_end_matches(' ').len();
        line.truncate(trimmed);
        self.done.push(line);
        self.len = 0;
        self.col = 0;
    }

    fn put(&mut self, c: char) {
        if self.col == self.len && self.col < MAX_LINE {
            self.line.push(c);
            self.len += 1;
            self.col += 1;
            return;
        }
        if self.col >= MAX_LINE {
            return;
        }
        self.edit(|chars, col| {
            while chars.len() < col {
                chars.push(' ');
            }
            if col < chars.len() {
                chars[col] = c;
            } else {
                chars.push(c);
            }
        });
        self.col += 1;
    }

    /// `f` on the line as characters, with the cursor.
    fn edit(&mut self, f: impl FnOnce(&mut Vec<char>, usize)) {
        let mut chars: Vec<char> = self.line.chars().collect();
        f(&mut chars, self.col);
        self.len = chars.len();
        self.line = chars.into_iter().collect();
    }

    /// Erase in line (`CSI K`): to the end, to the cursor, or all.
    fn erase(&mut self, how: usize) {
        match how {
            0 => self.edit(|chars, col| chars.truncate(col)),
            1 => self.edit(|chars, col| {
                for c in chars.iter_mut().take(col + 1) {
                    *c = ' ';
                }
            }),
            _ => {
                self.line.clear();
                self.len = 0;
            }
        }
    }
}

impl super::escapes::Out for Lines {
    fn ascii(&mut self, run: &str) {
        if self.col == self.len && self.col + run.len() <= MAX_LINE {
            self.line.push_str(run);
            self.len += run.len();
            self.col += run.len();
        } else {
            for c in run.chars() {
                self.put(c);
            }
        }
    }

    fn char(&mut self, c: char) {
        self.put(c);
    }

    fn control(&mut self, byte: u8) {
        match byte {
            b'\n' | 0x0b | 0x0c => self.end_line(),
            b'\r' => self.col = 0,
            0x08 => self.col = self.col.saturating_sub(1),
            b'\t' => self.col = ((self.col / TAB + 1) * TAB).min(MAX_LINE),
            _ => {}
        }
    }

    fn csi(&mut self, action: u8, first: u32) {
        let first = first as usize;
        let n = first.max(1);
        match action {
            b'C' => self.col = (self.col + n).min(MAX_LINE),
            b'D' => self.col = self.col.saturating_sub(n),
            b'G' => self.col = (n - 1).min(MAX_LINE),
            b'K' => self.erase(first),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::text;

    #[test]
    fn escapes_go_and_lines_join_with_newlines() {
        assert_eq!(
            text(b"\x1b[1;32mgreen\x1b[0m plain\r\nnext\x1b]0;title\x07 line\n"),
            "green plain\nnext line\n"
        );
    }

    #[test]
    fn redraws_collapse_to_what_the_line_showed_last() {
        let spinner = b"\r| working\r/ working\r- working\r\x1b[Kdone.\r\n";
        assert_eq!(text(spinner), "done.\n");
        assert_eq!(text(b"50%\r100%\n"), "100%\n");
        assert_eq!(text(b"abc\x08\x08X\n"), "aXc\n");
        assert_eq!(text(b"a\tb\n"), "a       b\n");
    }

    #[test]
    fn utf8_split_anywhere_and_an_unended_line_are_kept() {
        let s = "héllo → wörld".as_bytes();
        assert_eq!(text(s), "héllo → wörld");
    }
}
