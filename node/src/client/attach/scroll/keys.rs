//! What the scroll mode reads: the length of one key in a read, the mouse
//! wheel's reports, and a rendered line's plain text.

pub(super) enum Wheel {
    Up,
    Down,
}

/// The length of the first key in `bytes`: an escape sequence (CSI up to
/// its final byte, SS3 and one byte, a lone ESC), or one UTF-8 character.
pub(super) fn key_len(bytes: &[u8]) -> usize {
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
pub(super) fn wheel(bytes: &[u8]) -> Option<Wheel> {
    let rest = bytes.strip_prefix(b"\x1b[<")?;
    let button = rest.split(|b| *b == b';').next()?;
    match button {
        b"64" => Some(Wheel::Up),
        b"65" => Some(Wheel::Down),
        _ => None,
    }
}

/// A rendered line's text without its escape sequences.
pub(super) fn strip(line: &str) -> String {
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
