//! The escape-sequence parser under `plain`: a small state machine after
//! ECMA-48 (as vte's), with the ground state taken a run at a time, so a
//! line of printable ASCII costs one scan and one copy rather than a call
//! per character (`grep` reads gigabytes this way). Sequences are skipped;
//! what a line model needs comes out as `Out`: text, C0 controls, and a
//! CSI's final byte with its first parameter.

/// What the parser hands on.
pub trait Out {
    /// A run of printable ASCII.
    fn ascii(&mut self, run: &str);
    /// One other printable character.
    fn char(&mut self, c: char);
    /// A C0 control (`\n`, `\r`, backspace, tab, ...).
    fn control(&mut self, byte: u8);
    /// A CSI sequence with no intermediates or private marker: its final
    /// byte and first parameter (0 when none).
    fn csi(&mut self, action: u8, first: u32);
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Ground,
    Esc,
    /// `ESC` then intermediates (` ` to `/`).
    EscInter,
    Csi,
    /// OSC, DCS, SOS, PM, APC: skipped to BEL or ST.
    Str,
    /// `ESC` inside a string: `\` ends it.
    StrEsc,
}

/// How many bytes at the start of `bytes` are printable ASCII (`0x20` to
/// `0x7e`), eight at a time.
fn ascii_run(bytes: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut at = 0;
    for word in bytes.chunks_exact(8) {
        let w = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        // A byte below 0x20, at or above 0x80, or 0x7f sets its high bit.
        let below = w.wrapping_sub(ONES * 0x20) & !w;
        let del = (w ^ (ONES * 0x7f)).wrapping_sub(ONES) & !(w ^ (ONES * 0x7f));
        if (below | w | del) & HIGH != 0 {
            break;
        }
        at += 8;
    }
    at + bytes[at..]
        .iter()
        .position(|&b| !(0x20..0x7f).contains(&b))
        .unwrap_or(bytes.len() - at)
}

/// Parser state carried from one piece of output to the next.
#[derive(Debug, Default)]
pub struct Parser {
    state: State,
    /// The CSI's first parameter so far.
    first: u32,
    /// Past the first parameter, or a private marker or intermediate seen.
    more: bool,
    private: bool,
    /// A UTF-8 character split between pieces.
    partial: Vec<u8>,
}

impl Parser {
    pub fn feed(&mut self, out: &mut impl Out, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            bytes = match self.state {
                State::Ground => self.ground(out, bytes),
                _ => {
                    self.step(out, bytes[0]);
                    &bytes[1..]
                }
            };
        }
    }

    fn ground<'a>(&mut self, out: &mut impl Out, bytes: &'a [u8]) -> &'a [u8] {
        if !self.partial.is_empty() {
            return self.utf8(out, bytes);
        }
        let run = ascii_run(bytes);
        if run > 0 {
            // Printable ASCII: valid UTF-8.
            out.ascii(std::str::from_utf8(&bytes[..run]).unwrap_or_default());
            return &bytes[run..];
        }
        match bytes[0] {
            0x1b => {
                self.state = State::Esc;
                &bytes[1..]
            }
            0x7f => &bytes[1..],
            b if b < 0x20 => {
                out.control(b);
                &bytes[1..]
            }
            _ => self.utf8(out, bytes),
        }
    }

    /// One multi-byte character (completing one split before); one that
    /// does not decode is U+FFFD.
    fn utf8<'a>(&mut self, out: &mut impl Out, bytes: &'a [u8]) -> &'a [u8] {
        let mut i = 0;
        if self.partial.is_empty() {
            self.partial.push(bytes[0]);
            i = 1;
        }
        let len = match self.partial[0] {
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => 1,
        };
        while self.partial.len() < len && i < bytes.len() && (0x80..0xc0).contains(&bytes[i]) {
            self.partial.push(bytes[i]);
            i += 1;
        }
        if self.partial.len() < len && i == bytes.len() {
            // Split between pieces: the rest comes with the next one.
            return &bytes[i..];
        }
        let c = std::str::from_utf8(&self.partial)
            .ok()
            .and_then(|s| s.chars().next())
            .unwrap_or('\u{fffd}');
        self.partial.clear();
        // C1 controls are not text.
        if !('\u{80}'..='\u{9f}').contains(&c) {
            out.char(c);
        }
        &bytes[i..]
    }

    fn step(&mut self, out: &mut impl Out, b: u8) {
        match self.state {
            State::Ground => {}
            State::Esc => {
                self.state = match b {
                    b'[' => {
                        self.first = 0;
                        self.more = false;
                        self.private = false;
                        State::Csi
                    }
                    b']' | b'P' | b'X' | b'^' | b'_' => State::Str,
                    0x20..=0x2f => State::EscInter,
                    0x18 | 0x1a => State::Ground,
                    b if b < 0x20 => {
                        out.control(b);
                        State::Esc
                    }
                    _ => State::Ground,
                }
            }
            State::EscInter => {
                if !(0x20..=0x2f).contains(&b) {
                    self.state = State::Ground;
                }
            }
            State::Csi => match b {
                b'0'..=b'9' if !self.more => {
                    self.first = self
                        .first
                        .saturating_mul(10)
                        .saturating_add(u32::from(b - b'0'));
                }
                b'0'..=b'9' => {}
                b';' | b':' => self.more = true,
                0x3c..=0x3f | 0x20..=0x2f => self.private = true,
                0x40..=0x7e => {
                    if !self.private {
                        out.csi(b, self.first);
                    }
                    self.state = State::Ground;
                }
                0x18 | 0x1a => self.state = State::Ground,
                0x1b => self.state = State::Esc,
                b if b < 0x20 => out.control(b),
                _ => {}
            },
            State::Str => match b {
                0x07 | 0x18 | 0x1a => self.state = State::Ground,
                0x1b => self.state = State::StrEsc,
                _ => {}
            },
            State::StrEsc => {
                if b == b'\\' {
                    self.state = State::Ground;
                } else {
                    // A new sequence ends the string.
                    self.state = State::Esc;
                    self.step(out, b);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default, Debug, PartialEq)]
    struct Seen(Vec<String>);

    impl Out for Seen {
        fn ascii(&mut self, run: &str) {
            self.0.push(format!("a:{run}"));
        }
        fn char(&mut self, c: char) {
            self.0.push(format!("c:{c}"));
        }
        fn control(&mut self, byte: u8) {
            self.0.push(format!("x:{byte}"));
        }
        fn csi(&mut self, action: u8, first: u32) {
            self.0.push(format!("csi:{}{first}", action as char));
        }
    }

    fn parse(pieces: &[&[u8]]) -> Vec<String> {
        let (mut p, mut seen) = (Parser::default(), Seen::default());
        for piece in pieces {
            p.feed(&mut seen, piece);
        }
        seen.0
    }

    #[test]
    fn runs_controls_and_sequences_split_anywhere() {
        let whole = "ab\x1b[1;31mé\x1b]0;t\x07\x1b[2K\x1b[?25l\x1bP1$r\x1b\\c\r\n".as_bytes();
        let want = ["a:ab", "csi:m1", "c:é", "csi:K2", "a:c", "x:13", "x:10"];
        assert_eq!(parse(&[whole]), want);
        // Every split into two pieces gives the same (a run split in two
        // comes as two runs).
        for at in 0..whole.len() {
            let got: Vec<String> = parse(&[&whole[..at], &whole[at..]]);
            let joined: Vec<String> = {
                let mut v: Vec<String> = Vec::new();
                for g in got {
                    match (v.last_mut(), g.strip_prefix("a:")) {
                        (Some(last), Some(more)) if last.starts_with("a:") => last.push_str(more),
                        _ => v.push(g),
                    }
                }
                v
            };
            assert_eq!(joined, want, "split at {at}");
        }
    }

    #[test]
    fn ascii_runs_end_at_the_first_other_byte() {
        for len in 0..40 {
            for other in [0x00u8, 0x0a, 0x1b, 0x1f, 0x7f, 0x80, 0xc3, 0xff] {
                let mut bytes = vec![b'a'; len];
                bytes.extend([other, b'b', b'c']);
                assert_eq!(ascii_run(&bytes), len, "{len} then {other:#x}");
            }
            assert_eq!(ascii_run(&vec![b' '; len]), len);
        }
        assert_eq!(ascii_run(b"~~~~~~~~~~\x7f"), 10);
    }

    #[test]
    fn bad_utf8_is_a_replacement_character() {
        assert_eq!(
            parse(&[b"\xffx\xc3("]),
            ["c:\u{fffd}", "a:x", "c:\u{fffd}", "a:("]
        );
    }
}
