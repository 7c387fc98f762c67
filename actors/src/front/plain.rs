//! Terminal output as plain text (`read`, PROTOCOL.md section 15): escape
//! sequences removed, carriage-return redraws collapsed to what the line
//! showed last (a spinner's hundred frames become its last one), lines
//! joined with `\n`. A line model, not a screen: cursor moves within a
//! line (`\r`, backspace, `CSI C/D/G`, erase `CSI K`) are followed, moves
//! between lines are not (a full-screen program's text comes out in the
//! order it was drawn).

/// Tab stops every this many columns.
const TAB: usize = 8;
/// A line longer than this is cut (a program printing megabytes without a
/// newline does not make one huge line of cells).
const MAX_LINE: usize = 64 * 1024;

/// The text of `bytes`.
pub fn text(bytes: &[u8]) -> String {
    let mut lines = Lines::default();
    let mut parser = vte::Parser::new();
    parser.advance(&mut lines, bytes);
    lines.finish()
}

#[derive(Default)]
struct Lines {
    out: String,
    line: Vec<char>,
    col: usize,
}

impl Lines {
    fn end_line(&mut self) {
        let line: String = self.line.drain(..).collect();
        self.out.push_str(line.trim_end_matches(' '));
        self.out.push('\n');
        self.col = 0;
    }

    fn put(&mut self, c: char) {
        if self.col >= MAX_LINE {
            return;
        }
        while self.line.len() < self.col {
            self.line.push(' ');
        }
        if self.col < self.line.len() {
            self.line[self.col] = c;
        } else {
            self.line.push(c);
        }
        self.col += 1;
    }

    fn finish(mut self) -> String {
        if !self.line.is_empty() {
            let line: String = self.line.drain(..).collect();
            self.out.push_str(line.trim_end_matches(' '));
        }
        self.out
    }
}

impl vte::Perform for Lines {
    fn print(&mut self, c: char) {
        self.put(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' | 0x0b | 0x0c => self.end_line(),
            b'\r' => self.col = 0,
            0x08 => self.col = self.col.saturating_sub(1),
            b'\t' => self.col = (self.col / TAB + 1) * TAB,
            _ => {}
        }
    }

    fn csi_dispatch(&mut self, params: &vte::Params, _: &[u8], _: bool, action: char) {
        let first = params
            .iter()
            .next()
            .and_then(|p| p.first().copied())
            .unwrap_or(0) as usize;
        let n = first.max(1);
        match action {
            'C' => self.col = (self.col + n).min(MAX_LINE),
            'D' => self.col = self.col.saturating_sub(n),
            'G' => self.col = (n - 1).min(MAX_LINE),
            'K' => match first {
                0 => self.line.truncate(self.col),
                1 => {
                    for c in self.line.iter_mut().take(self.col + 1) {
                        *c = ' ';
                    }
                }
                _ => self.line.clear(),
            },
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
