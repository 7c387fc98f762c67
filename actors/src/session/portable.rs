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

/// Rewrites `dump` (avt's output) into the portable subset.
pub fn portable(dump: &str) -> String {
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

    #[test]
    fn runs_are_spelled_out() {
        assert_eq!(portable("+-\x1b[23b+"), format!("+{}+", "-".repeat(24)));
        assert_eq!(portable("界\x1b[2b"), "界界界");
        assert_eq!(portable("x\x1b[b"), "xx", "no parameter means one");
        assert_eq!(portable("x\x1b[1;31m\x1b[3b"), "x\x1b[1;31mxxx");
    }

    #[test]
    fn colours_use_semicolons() {
        assert_eq!(
            portable("\x1b[0;38:5:208;48:2:1:2:3mhi"),
            "\x1b[0;38;5;208;48;2;1;2;3mhi"
        );
        // Other sequences are left alone.
        assert_eq!(portable("\x1b[?1049h\x1b[3;4H"), "\x1b[?1049h\x1b[3;4H");
    }

    #[test]
    fn the_alternate_screen_is_mode_1049() {
        assert_eq!(portable("\x1b[?1047h"), "\x1b[?1049h");
        assert_eq!(portable("\x1b[?25;1047l"), "\x1b[?25;1049l");
        assert!(!is_portable("\x1b[?1047h"));
    }

    #[test]
    fn c1_controls_become_seven_bit() {
        assert_eq!(portable("ab\u{9b}1;3"), "ab\x1b[1;3");
        assert_eq!(portable("\u{9d}0;title"), "\x1b]0;title");
        assert!(is_portable(&portable("\u{90}q")));
    }

    #[test]
    fn the_check_finds_what_it_should() {
        assert!(!is_portable("a\x1b[5b"));
        assert!(!is_portable("\x1b[38:5:1m"));
        assert!(!is_portable("\u{9b}1m"));
        assert!(is_portable("\x1b[38;5;1mab\x1b[2J\x1b[?25l"));
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
            let port = portable(&dump);
            prop_assert!(is_portable(&port), "{:?}", port);
            let a = screen_of(&dump, 30, 8);
            let b = screen_of(&port, 30, 8);
            let lines = |t: &Terminal| t.screen().visible_lines().map(|l| l.text()).collect::<Vec<_>>();
            prop_assert_eq!(lines(&a), lines(&b));
            prop_assert_eq!(a.cursor(), b.cursor());
        }
    }
}
