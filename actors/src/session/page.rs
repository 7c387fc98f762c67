//! History pages (PROTOCOL.md section 14), without I/O: stored frames
//! rendered into lines at the session's width, a page holding the newest
//! whole frames whose lines fit, so that the next page (asked with
//! `before_seq` = this one's `first_seq`) starts where this one began and
//! every retained line is on exactly one page.

use crate::store::log::Frame;

use super::screen::ScreenModel;

/// Rows a page holds by default, and at most.
pub const DEFAULT_ROWS: usize = 1_000;
pub const MAX_ROWS: usize = 10_000;
/// A page's rendered lines, in bytes, at most (under the reply bound
/// with room for the fields around them).
pub const MAX_PAGE_BYTES: usize = 4 << 20;

/// One page, rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedPage {
    pub lines: Vec<String>,
    /// The seq of its first frame (0: an empty page).
    pub first_seq: u64,
    /// The seq of its last frame (0: an empty page).
    pub last_seq: u64,
    /// Older frames exist before `first_seq`.
    pub more: bool,
    /// Every frame given fit and older ones exist: the caller may read
    /// more of them and render again to fill the page.
    pub wants_more: bool,
}

/// Renders the newest of `frames` (oldest first: the stored output before
/// the page's end) into at most `rows` lines of `cols` columns; `older`
/// says whether frames older than the first given exist. A page holds at
/// least one frame: a single frame of more than `rows` lines (a flood's
/// 64 KiB read of short lines) is a page on its own, all of its lines
/// (cut only past `MAX_PAGE_BYTES`).
pub fn render(
    frames: &[Frame],
    cols: u16,
    screen_rows: u16,
    rows: usize,
    older: bool,
) -> RenderedPage {
    let rows = rows.clamp(1, MAX_ROWS);
    if frames.is_empty() {
        return RenderedPage {
            lines: Vec::new(),
            first_seq: 0,
            last_seq: 0,
            more: older,
            wants_more: false,
        };
    }
    // The newest frames whose rows (by `estimate_rows`) leave room for
    // `rows` lines. A frame that starts mid-line may wrap once more than
    // counted alone: a row each.
    let mut start = frames.len() - 1;
    let mut estimated = estimate_rows(&frames[start].data, cols) + 1;
    while start > 0 {
        let n = estimate_rows(&frames[start - 1].data, cols) + 1;
        if estimated + n >= rows {
            break;
        }
        estimated += n;
        start -= 1;
    }
    let all_fit = start == 0 && estimated + 1 < rows;
    // Wrapped rows may still make it too many: the fewest oldest frames
    // to drop, found in a few renders (fewer frames, fewer rows).
    let too_many = |lines: &[String]| lines.len() > rows || bytes(lines) > MAX_PAGE_BYTES;
    let mut lines = render_lines(&frames[start..], cols, screen_rows);
    if too_many(&lines) && start + 1 < frames.len() {
        let (mut lo, mut hi) = (start + 1, frames.len() - 1);
        let mut found = None;
        while lo <= hi {
            let mid = lo + (hi - lo) / 2;
            let rendered = render_lines(&frames[mid..], cols, screen_rows);
            if too_many(&rendered) {
                lo = mid + 1;
            } else {
                found = Some((mid, rendered));
                hi = mid - 1;
            }
        }
        (start, lines) = found.unwrap_or_else(|| {
            let last = frames.len() - 1;
            (last, render_lines(&frames[last..], cols, screen_rows))
        });
    }
    // One frame alone over the byte bound (a 64 KiB read whose every cell
    // changes colour): its newest lines.
    let mut over = bytes(&lines).saturating_sub(MAX_PAGE_BYTES);
    let mut cut = 0;
    while over > 0 && cut + 1 < lines.len() {
        over = over.saturating_sub(lines[cut].len() + 1);
        cut += 1;
    }
    lines.drain(..cut);
    RenderedPage {
        lines,
        first_seq: frames[start].seq,
        last_seq: frames[frames.len() - 1].seq,
        more: start > 0 || older,
        wants_more: all_fit && older,
    }
}

/// The rows `data` moves down at `cols` columns, estimated without a
/// terminal: a cursor that only prints, wraps past the last column, goes
/// down a row at a line feed (keeping its column: under `stty raw` a bare
/// line feed does) and back to the first column at a carriage return;
/// escape sequences and UTF-8 continuation bytes take no column, a tab
/// runs to the next multiple of 8. It starts at the first column, so a
/// frame that starts mid-line may wrap once more than counted here. For
/// printed text it is the count a render gives, so a page of wrapped lines
/// is rendered once, not in a search over its frames (each step a
/// render); where it is short (wide characters, cursor moves), the search
/// still finds the page.
fn estimate_rows(data: &[u8], cols: u16) -> usize {
    let cols = usize::from(cols.max(1));
    let (mut rows, mut col) = (0, 0);
    let mut escape = Escape::None;
    for &b in data {
        escape = match (escape, b) {
            (Escape::None, 0x1b) => Escape::Start,
            (Escape::None, b'\n') => {
                rows += 1;
                Escape::None
            }
            (Escape::None, b'\r') => {
                col = 0;
                Escape::None
            }
            (Escape::None, b'\t') => {
                col = ((col / 8 + 1) * 8).min(cols);
                Escape::None
            }
            (Escape::None, 0x20..=0x7e | 0xc0..=0xff) => {
                // The wrap waits for a glyph past the last column.
                if col == cols {
                    rows += 1;
                    col = 0;
                }
                col += 1;
                Escape::None
            }
            (Escape::None, _) => Escape::None,
            (Escape::Start, b'[') => Escape::Csi,
            (Escape::Start, b']') => Escape::Osc,
            (Escape::Start, _) => Escape::None,
            (Escape::Csi, 0x40..=0x7e) => Escape::None,
            (Escape::Osc, 0x07) => Escape::None,
            (Escape::Osc, 0x1b) => Escape::Start,
            (state, _) => state,
        };
    }
    rows
}

/// Where `estimate_rows` is in an escape sequence.
#[derive(Clone, Copy)]
enum Escape {
    None,
    /// After ESC.
    Start,
    /// A control sequence, up to its final byte.
    Csi,
    /// An operating system command, up to BEL or ESC \.
    Osc,
}

fn bytes(lines: &[String]) -> usize {
    lines.iter().map(|l| l.len() + 1).sum()
}

/// Fed at most this much at a time (ending at a newline where there is
/// one), so the model's scrollback (10,000 rows) never overflows before
/// its history is taken out.
const PIECE: usize = 8 << 10;
/// History rows taken out of the model once it holds this many.
const HARVEST: usize = 2_000;

/// Every line of `data` (output as it was printed), rendered as a page's
/// are: a client that read raw pages renders them so.
pub fn render_bytes(data: &[u8], cols: u16, screen_rows: u16) -> Vec<String> {
    let frame = Frame {
        seq: 0,
        at_ms: 0,
        data: bytes::Bytes::copy_from_slice(data),
    };
    render_lines(std::slice::from_ref(&frame), cols, screen_rows)
}

#[cfg(test)]
thread_local! {
    /// `render_lines` calls on this thread (a page's renders, in tests).
    static RENDERS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn render_lines(frames: &[Frame], cols: u16, screen_rows: u16) -> Vec<String> {
    #[cfg(test)]
    RENDERS.with(|r| r.set(r.get() + 1));
    let mut model = ScreenModel::new(cols, screen_rows, 0, 0);
    let mut out = Vec::new();
    for frame in frames {
        let mut rest = &frame.data[..];
        while !rest.is_empty() {
            let mut end = rest.len().min(PIECE);
            if end < rest.len() {
                if let Some(nl) = memchr::memrchr(b'\n', &rest[..end]) {
                    end = nl + 1;
                }
            }
            model.feed(&rest[..end]);
            rest = &rest[end..];
            if model.history_rows() >= HARVEST {
                out.extend(model.take_history());
            }
        }
    }
    out.extend(model.lines(usize::MAX));
    while out.last().is_some_and(|l| l.is_empty()) {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(lines_per_frame: &[usize]) -> Vec<Frame> {
        let mut n = 0;
        lines_per_frame
            .iter()
            .enumerate()
            .map(|(i, count)| {
                let mut data = String::new();
                for _ in 0..*count {
                    n += 1;
                    data.push_str(&format!("line {n}\r\n"));
                }
                Frame {
                    seq: i as u64 + 1,
                    at_ms: 0,
                    data: data.into_bytes().into(),
                }
            })
            .collect()
    }

    /// Walks back page by page as a client does; answers every line once.
    fn walk(all: &[Frame], rows: usize) -> Vec<String> {
        let mut before = u64::MAX;
        let mut out: Vec<String> = Vec::new();
        for _ in 0..1000 {
            let given: Vec<Frame> = all.iter().filter(|f| f.seq < before).cloned().collect();
            let page = render(&given, 80, 24, rows, false);
            assert!(page.lines.len() <= rows.max(1) || page.first_seq == page.last_seq);
            out.splice(0..0, page.lines);
            if !page.more {
                return out;
            }
            before = page.first_seq;
        }
        panic!("never reached the oldest page");
    }

    #[test]
    fn pages_walk_back_through_every_line_once() {
        let all = frames(&[3, 40, 7, 1, 0, 25, 60, 2, 9]);
        let want: Vec<String> = (1..=147).map(|n| format!("line {n}")).collect();
        for rows in [1, 10, 50, 100, 1000] {
            assert_eq!(walk(&all, rows), want, "pages of {rows}");
        }
    }

    #[test]
    fn a_page_fills_up_to_its_rows_with_whole_frames() {
        let all = frames(&[10, 10, 10, 10]);
        let page = render(&all, 80, 24, 25, false);
        assert_eq!(
            page.first_seq, 3,
            "two frames: 20 lines, a third is too many"
        );
        assert_eq!(page.lines.len(), 20);
        assert!(page.more && !page.wants_more);
        // All of it fits, and older frames exist: read more first.
        let page = render(&all, 80, 24, 100, true);
        assert!(page.wants_more && page.more);
        assert_eq!(page.lines.len(), 40);
    }

    #[test]
    fn wrapped_rows_count_and_a_huge_frame_is_a_page_alone() {
        // 10 lines of 200 columns: 30 rows at 80 columns.
        let long = "x".repeat(200);
        let wide = Frame {
            seq: 2,
            at_ms: 0,
            data: format!("{long}\r\n").repeat(10).into_bytes().into(),
        };
        let small = frames(&[5]);
        let page = render(&[small[0].clone(), wide.clone()], 80, 24, 20, false);
        assert_eq!(page.first_seq, 2);
        assert_eq!(page.lines.len(), 30, "one frame alone, all its rows");
        assert!(page.more);
        let page = render(&[small[0].clone(), wide], 80, 24, 40, false);
        assert_eq!((page.first_seq, page.lines.len()), (1, 35));
    }
}

#[cfg(test)]
mod flood_tests {
    use super::*;

    /// `text` as a PTY reader's frames of `size` bytes (lines split
    /// between them), seqs from 1.
    fn read_in(text: &str, size: usize) -> Vec<Frame> {
        let frames = text.as_bytes().chunks(size).enumerate();
        frames
            .map(|(i, c)| Frame {
                seq: i as u64 + 1,
                at_ms: 0,
                data: c.to_vec().into(),
            })
            .collect()
    }

    /// Every page of `all` at `cols` columns, walked back from the newest
    /// as a client does, its lines oldest first.
    fn walk_back(all: &[Frame], cols: u16, rows: usize) -> Vec<String> {
        let (mut before, mut lines) = (u64::MAX, Vec::new());
        loop {
            let given: Vec<Frame> = all.iter().filter(|f| f.seq < before).cloned().collect();
            let page = render(&given, cols, 30, rows, false);
            lines.splice(0..0, page.lines);
            if !page.more {
                return lines;
            }
            before = page.first_seq;
        }
    }

    #[test]
    fn rows_are_estimated_as_a_terminal_wraps_plain_text() {
        let long = "x".repeat(200);
        assert_eq!(estimate_rows(format!("{long}\r\n").as_bytes(), 80), 3);
        assert_eq!(estimate_rows(b"short\r\n\r\n", 80), 2);
        // Exactly the width: one row (the wrap waits for the next glyph).
        let full = "y".repeat(80);
        assert_eq!(estimate_rows(format!("{full}\r\n").as_bytes(), 80), 1);
        // Colours, a title and UTF-8 take no column; a tab runs to 8.
        let styled = format!("\x1b]0;title\x07\x1b[1;31m{}\x1b[0m\r\n", "é".repeat(81));
        assert_eq!(estimate_rows(styled.as_bytes(), 80), 2);
        assert_eq!(
            estimate_rows(format!("{}\tz\n", "a".repeat(75)).as_bytes(), 80),
            2
        );
        // A spinner's redraws over one line: the widest, not their sum.
        let spinner = format!(
            "{}\r{}\r{}\n",
            "a".repeat(60),
            "b".repeat(60),
            "c".repeat(10)
        );
        assert_eq!(estimate_rows(spinner.as_bytes(), 80), 1);
        // A line not ended yet: its wrapped rows, not its first.
        assert_eq!(estimate_rows(long.as_bytes(), 80), 2);
        // Bare line feeds keep the column: 82-column lines run on.
        let raw = format!("{}\n", "r".repeat(82)).repeat(4);
        assert_eq!(estimate_rows(raw.as_bytes(), 80), 4 + 328 / 80);
        // As a render counts them.
        for text in [raw, styled, spinner, format!("{long}\r\n{full}\r\n")] {
            let rendered = render_bytes(text.as_bytes(), 80, 24).len();
            assert_eq!(estimate_rows(text.as_bytes(), 80), rendered, "{text:?}");
        }
    }

    #[test]
    fn a_page_of_wrapped_lines_in_small_frames_is_rendered_once() {
        // A log's 82-column lines at 80 columns, in the 7 KiB frames a
        // PTY reader's wake-ups give, lines split between frames.
        let line = format!("{}\r\n", "z".repeat(82));
        let text = line.repeat(3_000);
        let all = read_in(&text, 7_000);
        RENDERS.with(|r| r.set(0));
        let page = render(&all, 80, 24, 1_000, false);
        assert_eq!(RENDERS.with(|r| r.get()), 1, "one render, no search");
        assert!(page.lines.len() <= 1_000);
        // Whole frames: short of full by at most one more frame's rows
        // and the reserve of a row per frame.
        let frames = all.len() - page.first_seq as usize + 1;
        let next_frame = estimate_rows(&all[0].data, 80) + 1;
        assert!(
            page.lines.len() + next_frame + frames >= 1_000,
            "{} lines in {frames} frames",
            page.lines.len()
        );
        // Walked back, every row once.
        let rows = walk_back(&all, 80, 1_000);
        assert_eq!(rows.len(), 6_000);
        assert_eq!(rows.concat(), "z".repeat(82 * 3_000));
    }

    #[test]
    fn pages_of_a_flood_in_large_frames_hold_every_line() {
        // What `seq 1 30000` gives a PTY reader: CRLF lines in 64 KiB
        // frames that split lines.
        let text: String = (1..=30_000).map(|i| format!("{i}\r\n")).collect();
        let all = read_in(&text, 64 << 10);
        let lines = walk_back(&all, 120, 10_000);
        let want: String = (1..=30_000).map(|i| i.to_string()).collect();
        assert_eq!(lines.concat(), want);
    }
}
