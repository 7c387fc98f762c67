//! The scroll mode's behaviour, key by key: paging, searches in loaded
//! lines and through raw pages, placeholders, refusals.

use super::*;

fn rows(frame: &Frame) -> Vec<String> {
    frame
        .rows
        .iter()
        .map(|r| {
            r.iter()
                .filter(|g| g.width > 0)
                .map(|g| g.ch)
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect()
}

fn history(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("\x1b[32mline {i}\x1b[0m")).collect()
}

#[test]
fn starts_at_the_bottom_and_pages() {
    let mut s = Scroll::new(history(100), 20, None);
    let mut f = Frame::blank(20, 5);
    s.draw(&mut f);
    assert_eq!(rows(&f)[..4], ["line 96", "line 97", "line 98", "line 99"]);
    assert!(rows(&f)[4].starts_with("[scroll] q back"));
    s.keys(b"\x1b[5~", 4);
    s.draw(&mut f);
    assert_eq!(rows(&f)[3], "line 96");
    s.keys(b"g", 4);
    s.draw(&mut f);
    assert_eq!(rows(&f)[0], "line 0");
    s.keys(b"\x1b[<65;3;3M", 4);
    s.draw(&mut f);
    assert_eq!(rows(&f)[0], "line 3");
    assert_eq!(s.keys(b"q", 4), Scrolled::Quit);
}

#[test]
fn search_finds_older_lines_then_newer() {
    let mut s = Scroll::new(history(6000), 30, None);
    let mut f = Frame::blank(30, 11);
    s.keys(b"/", 10);
    s.keys(b"line 12", 10);
    s.draw(&mut f);
    assert_eq!(rows(&f)[10], "search (older): line 12");
    s.keys(b"\r", 10);
    s.draw(&mut f);
    // The nearest older match, 4,700 lines up.
    assert!(rows(&f).iter().any(|r| r == "line 1299"), "{:?}", rows(&f));
    assert!(
        f.rows.iter().any(|r| r[0].pen.is_inverse()),
        "the match is marked"
    );
    s.keys(b"n", 10);
    s.draw(&mut f);
    assert!(rows(&f).iter().any(|r| r == "line 1298"));
    s.keys(b"N", 10);
    s.draw(&mut f);
    assert!(rows(&f).iter().any(|r| r == "line 1299"));
    s.keys(b"/", 10);
    s.keys(b"nowhere\r", 10);
    s.draw(&mut f);
    assert!(rows(&f)[10].contains("not found"));
}

#[test]
fn several_keys_in_one_read_each_count() {
    let mut s = Scroll::new(history(100), 20, None);
    s.keys(b"kkk\x1b[A\x1b[A", 4);
    let mut f = Frame::blank(20, 5);
    s.draw(&mut f);
    assert_eq!(rows(&f)[3], "line 94");
    s.keys(b"\x1b[<64;1;1M\x1b[<64;1;1M", 4);
    s.draw(&mut f);
    assert_eq!(rows(&f)[3], "line 88");
    assert_eq!(s.keys(b"jq", 4), Scrolled::Quit);
}

#[test]
fn search_is_by_character() {
    let mut lines = history(10);
    lines.insert(3, "needle-日本 here".into());
    let mut s = Scroll::new(lines, 30, None);
    s.keys("/needle-日本x\x7f\r".as_bytes(), 5);
    let mut f = Frame::blank(30, 6);
    s.draw(&mut f);
    assert!(
        rows(&f).iter().any(|r| r.starts_with("needle-日")),
        "{:?}",
        rows(&f)
    );
}

#[test]
fn strips_escapes() {
    assert_eq!(strip("\x1b[1;31mred\x1b[0m plain"), "red plain");
}

#[test]
fn the_top_asks_once_for_the_page_before_it() {
    // Lines 500..600 loaded; older output from seq 40 down.
    let mut s = Scroll::new(page(500, 600), 20, Some(40));
    let height = 10;
    let mut asked = Vec::new();
    for _ in 0..20 {
        if let Scrolled::Older(before) = s.keys(b"\x1b[5~", height) {
            asked.push(before);
        }
    }
    assert_eq!(asked, [40], "asked once until it comes");
    // It comes: the view stays on the same lines, above them is more.
    let top_before = s.bottom + 1 - height;
    assert_eq!(s.older_page(page(0, 500), None, height), None);
    assert_eq!(s.bottom + 1 - height, top_before + 500);
    assert_eq!(s.keys(b"\x1b[5~", height), Scrolled::Stay);
}

fn page(from: usize, to: usize) -> Vec<String> {
    (from..to).map(|i| format!("line {i}")).collect()
}

/// Raw output of lines `from..to`, as the frames `first..=end`.
fn raw(from: usize, to: usize, first: u64, end: u64, more: bool) -> RawPage {
    let data: String = (from..to).map(|i| format!("line {i}\r\n")).collect();
    RawPage {
        data: data.into_bytes(),
        first_seq: first,
        end_seq: end,
        more,
    }
}

fn want(before: u64, limit: u64, fill: bool) -> Option<Scrolled> {
    Some(Scrolled::Raw {
        before,
        limit,
        fill,
    })
}

#[test]
fn a_refused_page_stops_the_search_and_a_placeholder_says_it_is_gone() {
    let height = 10;
    let mut s = Scroll::new(page(500, 600), 20, Some(40)).sized(5);
    assert_eq!(
        s.keys(b"/line 27\r", height),
        want(40, SCAN_PAGE, false).unwrap()
    );
    // Another search while it walks waits for it.
    assert_eq!(s.keys(b"n", height), Scrolled::Stay);
    s.failed(Failed::Scan, "unavailable");
    assert!(s.note.as_deref().unwrap().contains("unavailable"));
    assert_eq!(s.found, None, "no line marked");
    // A new search starts again.
    assert_eq!(
        s.keys(b"/line 27\r", height),
        want(40, SCAN_PAGE, false).unwrap()
    );
    s.scanned(raw(400, 500, 30, 39, true), height);
    s.scanned(raw(200, 400, 10, 29, true), height);
    // The placeholder's frames are gone when asked for.
    let asked = (0..200).find_map(|_| match s.keys(b"j", height) {
        w @ Scrolled::Raw { .. } => Some(w),
        _ => None,
    });
    assert!(matches!(asked, Some(Scrolled::Raw { fill: true, .. })));
    let gone = RawPage {
        data: Vec::new(),
        ..raw(0, 0, 0, 0, false)
    };
    s.filled(gone, height);
    assert!(s.lines.iter().any(|l| l.contains("no longer retained")));
    assert!(s.gaps.is_empty());
}

#[test]
fn no_older_page_is_asked_for_while_a_search_walks_back() {
    let height = 10;
    let mut s = Scroll::new(page(500, 600), 20, Some(40)).sized(5);
    let first = s.keys(b"/nowhere\rg", height);
    assert_eq!(first, want(40, SCAN_PAGE, false).unwrap());
    assert!(
        s.take_more().is_empty(),
        "no older page while a search walks back"
    );
}

#[test]
fn a_search_past_the_loaded_lines_reads_raw_pages_then_fills_the_ones_between() {
    // Lines 500..600 loaded (seqs 40..); before them, raw pages of
    // 100 lines each: seqs 30..=39 hold lines 400..500, 20..=29 lines
    // 300..400, 10..=19 lines 200..300.
    let height = 10;
    let mut s = Scroll::new(page(500, 600), 20, Some(40)).sized(5);
    assert_eq!(
        s.keys(b"/line 27\r", height),
        want(40, SCAN_PAGE, false).unwrap()
    );
    let older = raw(400, 500, 30, 39, true);
    let len_30 = older.data.len() as u64;
    assert_eq!(s.scanned(older, height), want(30, SCAN_PAGE, false));
    let older = raw(300, 400, 20, 29, true);
    let len_20 = older.data.len() as u64;
    assert_eq!(s.scanned(older, height), want(20, SCAN_PAGE, false));
    // The hit: its page is rendered above two placeholders, the view
    // on the newest line with the query (line 279).
    let fill = s.scanned(raw(200, 300, 10, 19, true), height);
    let found = s.found.unwrap();
    assert_eq!(strip(&s.lines[found]), "line 279");
    assert_eq!(s.older, Some(10));
    assert_eq!(s.gaps.len(), 2);
    // The rendered page ends with its last line then a blank line (the
    // cursor's row): the placeholder for seqs 20..=29 is just below.
    let first_gap = s.gaps[0].clone();
    assert_eq!((first_gap.first_seq, first_gap.end_seq), (20, 29));
    assert!(s.lines[first_gap.line].contains("KiB of output"));
    assert_eq!(fill, None, "the placeholder is not in view yet");
    // Scrolling down brings it into view: its frames are asked for,
    // once, and rendered in its place.
    let asked = (0..40).find_map(|_| match s.keys(b"j", height) {
        w @ Scrolled::Raw { .. } => Some(w),
        _ => None,
    });
    assert_eq!(asked, want(30, len_20, true));
    assert_eq!(s.keys(b"k", height), Scrolled::Stay, "asked once");
    assert_eq!(s.filled(raw(300, 400, 20, 29, true), height), None);
    assert!(s.plain.iter().any(|l| l == "line 399"));
    // `n` goes on to older hits; `N` back to newer ones.
    s.keys(b"n", height);
    assert_eq!(strip(&s.lines[s.found.unwrap()]), "line 278");
    s.keys(b"N", height);
    assert_eq!(strip(&s.lines[s.found.unwrap()]), "line 279");
    // A search towards older from below an unfilled placeholder fills
    // it first, then goes on in it.
    s.keys(b"G", height);
    assert_eq!(
        s.keys(b"/line 45\r", height),
        want(40, len_30, true).unwrap()
    );
    assert_eq!(s.filled(raw(400, 500, 30, 39, true), height), None);
    assert_eq!(strip(&s.lines[s.found.unwrap()]), "line 459");
    // Towards newer lines, through the placeholders between.
    let mut s = Scroll::new(page(500, 600), 20, Some(40)).sized(5);
    s.keys(b"/line 27\r", height);
    s.scanned(raw(400, 500, 30, 39, true), height);
    s.scanned(raw(300, 400, 20, 29, true), height);
    s.scanned(raw(200, 300, 10, 19, true), height);
    assert_eq!(
        s.keys(b"/line 45\rN", height),
        want(10, SCAN_PAGE, false).unwrap()
    );
    let oldest = RawPage {
        data: b"the oldest\r\n".to_vec(),
        ..raw(0, 0, 1, 9, false)
    };
    assert_eq!(s.scanned(oldest, height), None);
    assert!(s.note.as_deref().unwrap().contains("not found"));
    assert_eq!(s.keys(b"N", height), want(30, len_20, true).unwrap());
    assert_eq!(
        s.filled(raw(300, 400, 20, 29, true), height),
        want(40, len_30, true)
    );
    assert_eq!(s.filled(raw(400, 500, 30, 39, true), height), None);
    assert_eq!(strip(&s.lines[s.found.unwrap()]), "line 450");
    // Nothing anywhere: not found once the oldest page is read.
    s.keys(b"/nowhere\r", height);
    assert_eq!(s.scanned(raw(0, 200, 1, 9, false), height), None);
    assert!(s.note.as_deref().unwrap().contains("not found"));
}
