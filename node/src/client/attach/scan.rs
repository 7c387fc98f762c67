//! The scroll mode's search through output older than what is loaded: raw
//! pages of the stored output (PROTOCOL.md section 14, `history` with
//! `limit` and `before_seq`), read newest first and looked through as
//! text, far faster than rendering them; only a page with a hit is
//! rendered (here, as the node renders pages), and the pages between it
//! and the loaded lines become placeholders, rendered when they come into
//! view.

use termesh_actors::session::page;

/// Raw output one scan request reads.
pub const SCAN_PAGE: u64 = 1 << 20;

/// A raw page of stored output: whole frames `first_seq..=end_seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawPage {
    pub data: Vec<u8>,
    pub first_seq: u64,
    pub end_seq: u64,
    /// Older output is retained.
    pub more: bool,
}

/// Output not loaded between loaded lines: the frames `first_seq..=end_seq`
/// (`len` bytes), shown as one placeholder line until rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    pub first_seq: u64,
    pub end_seq: u64,
    pub len: u64,
    /// Its placeholder's index among the lines.
    pub line: usize,
    pub asked: bool,
}

impl Gap {
    pub fn of(page: &RawPage) -> Gap {
        Gap {
            first_seq: page.first_seq,
            end_seq: page.end_seq,
            len: page.data.len() as u64,
            line: 0,
            asked: false,
        }
    }

    pub fn placeholder(&self) -> String {
        format!(
            "\x1b[2m··· {} KiB of output, loading ···\x1b[0m",
            self.len.div_ceil(1024)
        )
    }
}

/// Whether `query` may be in `data` as printed: escape sequences left out,
/// line ends split lines, and any run of blanks (spaces, tabs, cursor
/// moves right) one space, in the text and in the query alike. A filter,
/// never the answer: a hit is rendered and looked for again. Missed: text
/// the screen composes out of order (cursor addressing), and a line split
/// between two raw pages.
pub fn may_contain(data: &[u8], query: &str) -> bool {
    let query = collapse(query.as_bytes());
    !query.is_empty() && memchr::memmem::find(&collapse(&text(data)), &query).is_some()
}

/// Whether a line's plain text holds `query`, runs of blanks counting as
/// one space in both (as `may_contain` looks).
pub fn matches(line: &str, query: &str) -> bool {
    let query = collapse(query.as_bytes());
    !query.is_empty() && memchr::memmem::find(&collapse(line.as_bytes()), &query).is_some()
}

/// Runs of blanks as one space.
fn collapse(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for &b in text {
        let blank = b == b' ' || b == b'\t';
        if !(blank && out.last() == Some(&b' ')) {
            out.push(if blank { b' ' } else { b });
        }
    }
    out
}

/// The text of raw output: lines split at CR and LF, escape sequences out.
fn text(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut i = 0;
    while i < data.len() {
        let b = data[i];
        i += 1;
        match b {
            0x1b => i = skip_escape(data, i, &mut out),
            b'\r' | b'\n' => out.push(b'\n'),
            b'\t' => out.push(b' '),
            b if b < 0x20 || b == 0x7f => {}
            b => out.push(b),
        }
    }
    out
}

/// Past the escape sequence whose ESC was just before `i`; a cursor move
/// right (`CSI n C`) leaves a space.
fn skip_escape(data: &[u8], mut i: usize, out: &mut Vec<u8>) -> usize {
    match data.get(i) {
        Some(b'[') => {
            i += 1;
            while let Some(&b) = data.get(i) {
                i += 1;
                if (0x40..=0x7e).contains(&b) {
                    if b == b'C' {
                        out.push(b' ');
                    }
                    break;
                }
            }
            i
        }
        // OSC, DCS, APC, PM, SOS: up to BEL or ST.
        Some(b']' | b'P' | b'_' | b'^' | b'X') => {
            i += 1;
            while let Some(&b) = data.get(i) {
                i += 1;
                if b == 0x07 || (b == 0x1b && data.get(i) == Some(&b'\\')) {
                    return i + usize::from(b == 0x1b);
                }
            }
            i
        }
        _ => {
            // Intermediates, then one final byte.
            while data.get(i).is_some_and(|b| (0x20..=0x2f).contains(b)) {
                i += 1;
            }
            i + 1
        }
    }
}

/// A raw page's lines as the node renders a page (SGR kept), at the
/// session's size.
pub fn render(page: &RawPage, cols: u16, rows: u16) -> Vec<String> {
    page::render_bytes(&page.data, cols, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_leaves_escapes_out_and_splits_lines() {
        let raw =
            b"\x1b[1;31mred\x1b[0m\x1b[3Cplain\r\n\x1b]0;title\x07next\tx\x1b(Bend\x1b]8;;u\x1b\\z";
        assert_eq!(
            String::from_utf8(text(raw)).unwrap(),
            "red plain\n\nnext xendz"
        );
        assert!(may_contain(raw, "red plain"));
        assert!(may_contain(b"a\t\tb", "a  b"), "blanks collapse alike");
        assert!(may_contain(b"a\x1b[8Cb", "a        b"));
        assert!(may_contain(raw, "next x"));
        assert!(!may_contain(raw, "plainnext"), "lines are apart");
        assert!(!may_contain(raw, "title"), "a title is not output");
    }
}
