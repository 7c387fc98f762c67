//! Mouse reports from the outer terminal, moved to the session's cells:
//! when the renderer shows a window of a larger session (or the session
//! sits top-left in a larger terminal), a click at terminal cell (x, y) is
//! session cell (x + left, y + top); a report outside the session's cells
//! (its edge marks, the notice row) is dropped. SGR (`ESC [ < b ; x ; y
//! M/m`) and the X10 form (`ESC [ M b x y`, coordinates + 32) are mapped;
//! everything else passes as it is. With `attach --mouse` and a program
//! that did not ask for the mouse, the reports are the attach's own:
//! taken out of the input, a wheel up opening the scroll mode.

/// Where the session's cells are on the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The session's first row and column shown.
    pub top: usize,
    pub left: usize,
    /// How many of its rows and columns are shown.
    pub rows: usize,
    pub cols: usize,
}

impl Window {
    /// The session cell (1-based) for terminal cell (1-based) `x`, `y`.
    fn map(&self, x: usize, y: usize) -> Option<(usize, usize)> {
        (x >= 1 && y >= 1 && x <= self.cols && y <= self.rows)
            .then(|| (x + self.left, y + self.top))
    }
}

/// `keys` without mouse reports, and whether one was the wheel going up.
pub fn take(keys: &[u8]) -> (Vec<u8>, bool) {
    let mut wheel_up = false;
    let kept = rewrite(keys, |b, _, _| {
        wheel_up |= b == 64;
        None
    });
    (kept, wheel_up)
}

pub fn translate(keys: &[u8], window: Window) -> Vec<u8> {
    rewrite(keys, |_, x, y| window.map(x, y))
}

/// `keys` with each mouse report's cell (1-based x, y) replaced by what
/// `map` gives for its button and cell, or dropped for `None`.
fn rewrite(
    keys: &[u8],
    mut map: impl FnMut(u32, usize, usize) -> Option<(usize, usize)>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(keys.len());
    let mut i = 0;
    while i < keys.len() {
        let rest = &keys[i..];
        if let Some(body) = rest.strip_prefix(b"\x1b[<") {
            if let Some((len, b, x, y, end)) = sgr(body) {
                if let Some((x, y)) = map(b, x, y) {
                    out.extend_from_slice(format!("\x1b[<{b};{x};{y}{}", end as char).as_bytes());
                }
                i += 3 + len;
                continue;
            }
        } else if rest.len() >= 6 && rest.starts_with(b"\x1b[M") {
            let (b, x, y) = (rest[3], usize::from(rest[4]), usize::from(rest[5]));
            if x >= 33 && y >= 33 {
                if let Some((x, y)) = map(u32::from(b.saturating_sub(32)), x - 32, y - 32) {
                    if x + 32 <= 255 && y + 32 <= 255 {
                        out.extend_from_slice(&[
                            0x1b,
                            b'[',
                            b'M',
                            b,
                            (x + 32) as u8,
                            (y + 32) as u8,
                        ]);
                    }
                }
                i += 6;
                continue;
            }
        }
        out.push(keys[i]);
        i += 1;
    }
    out
}

/// `b;x;yM` or `b;x;ym`: its length, the numbers and the final byte.
fn sgr(body: &[u8]) -> Option<(usize, u32, usize, usize, u8)> {
    let end = body.iter().position(|c| matches!(c, b'M' | b'm'))?;
    if end > 24 {
        return None;
    }
    let text = std::str::from_utf8(&body[..end]).ok()?;
    let mut parts = text.split(';');
    let b = parts.next()?.parse().ok()?;
    let x = parts.next()?.parse().ok()?;
    let y = parts.next()?.parse().ok()?;
    parts
        .next()
        .is_none()
        .then_some((end + 1, b, x, y, body[end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Window = Window {
        top: 10,
        left: 5,
        rows: 20,
        cols: 70,
    };

    #[test]
    fn sgr_reports_move_by_the_window_and_outside_ones_go() {
        assert_eq!(translate(b"\x1b[<0;3;4M", W), b"\x1b[<0;8;14M");
        assert_eq!(translate(b"a\x1b[<0;3;4mb", W), b"a\x1b[<0;8;14mb");
        // On the edge mark or the notice row: dropped.
        assert_eq!(translate(b"\x1b[<0;71;4M", W), b"");
        assert_eq!(translate(b"\x1b[<64;3;21M", W), b"");
        // Not a report: as it is.
        assert_eq!(translate(b"\x1b[A\x1b[<x", W), b"\x1b[A\x1b[<x");
    }

    #[test]
    fn the_attach_s_own_reports_are_taken_out() {
        assert_eq!(take(b"a\x1b[<64;3;4Mb"), (b"ab".to_vec(), true));
        assert_eq!(take(b"\x1b[<0;3;4M\x1b[<0;3;4m"), (Vec::new(), false));
        assert_eq!(take(b"\x1b[A"), (b"\x1b[A".to_vec(), false));
    }

    #[test]
    fn x10_reports_move_too() {
        assert_eq!(
            translate(&[0x1b, b'[', b'M', 32, 33 + 2, 33 + 3], W),
            [0x1b, b'[', b'M', 32, 33 + 7, 33 + 13]
        );
    }
}
