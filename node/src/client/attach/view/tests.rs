//! The renderer's frames, played into an emulator standing for the
//! outer terminal.

use super::*;
use crate::client::attach::display::Scrolled;

/// What the outer terminal shows after everything the view wrote.
fn outer_rows(outer: &mut avt::Terminal, view: &mut View) -> Vec<String> {
    view.render();
    outer.feed(String::from_utf8_lossy(&std::mem::take(&mut view.out)).as_ref());
    outer
        .screen()
        .visible_lines()
        .map(|l| l.text().trim_end().to_string())
        .collect()
}

fn view(term: (u16, u16)) -> (View, avt::Terminal) {
    let outer = avt::Terminal::new(term.0.into(), term.1.into()).unwrap();
    (
        View::new(
            term,
            "big".into(),
            "^]".into(),
            ViewOptions {
                predict: true,
                mouse: false,
            },
        ),
        outer,
    )
}

#[test]
fn a_smaller_session_sits_top_left_with_its_edges_marked_and_never_wraps() {
    let (mut v, mut outer) = view((30, 8));
    let long = "x".repeat(25);
    v.snapshot(
        20,
        4,
        format!("{long}\r\n\x1b[44mab\x1b[K\x1b[0m").as_bytes(),
        true,
    );
    let rows = outer_rows(&mut outer, &mut v);
    assert_eq!(rows[0], format!("{}│", "x".repeat(20)));
    assert_eq!(rows[1], "xxxxx               │");
    assert_eq!(rows[2], format!("ab{}│", " ".repeat(18)));
    assert_eq!(rows[4], format!("{}┘", "─".repeat(20)));
    assert_eq!(rows[5], "");
    // The erase's background stops at the session's edge.
    let line = outer
        .screen()
        .visible_lines()
        .nth(2)
        .unwrap()
        .cells()
        .to_vec();
    assert!(line[19].pen().background().is_some());
    assert!(line[21].pen().background().is_none());
}

#[test]
fn a_larger_session_shows_a_viewport_at_its_cursor_with_a_notice() {
    let (mut v, mut outer) = view((20, 6));
    let mut data = String::new();
    for i in 0..10 {
        data.push_str(&format!("row {i} {}\r\n", "y".repeat(30)));
    }
    data.push_str("$ ");
    v.snapshot(40, 12, data.as_bytes(), true);
    let rows = outer_rows(&mut outer, &mut v);
    assert_eq!(rows[0], "row 6 yyyyyyyyyyyyyy");
    assert_eq!(rows[4], "$");
    assert!(rows[5].starts_with("[termesh] ^] s takes"), "{rows:?}");
    // The session takes this terminal's size: drawn whole.
    v.session_resized(20, 6);
    v.output(b"\x1b[H\x1b[2Jfits");
    let rows = outer_rows(&mut outer, &mut v);
    assert_eq!(rows, ["fits", "", "", "", "", ""]);
}

#[test]
fn typing_redraws_a_few_cells_only() {
    let (mut v, mut outer) = view((80, 24));
    v.snapshot(80, 24, b"$ ", true);
    outer_rows(&mut outer, &mut v);
    v.output(b"e");
    v.render();
    let out = String::from_utf8_lossy(&v.out).into_owned();
    assert!(out.len() < 60, "{out:?}");
    assert!(!out.contains("\x1b[2J"));
    assert!(!out.contains('\x07'));
    // The program's bell rings the terminal's.
    v.output(b"\x07");
    v.render();
    assert!(String::from_utf8_lossy(&v.out).contains('\x07'));
}

#[test]
fn the_status_row_overlays_and_gives_back_what_it_covered() {
    let (mut v, mut outer) = view((20, 4));
    v.snapshot(20, 4, b"a\r\nb\r\nc\r\nbottom", true);
    v.set_status(Some("[termesh] link down".into()));
    let rows = outer_rows(&mut outer, &mut v);
    assert_eq!(rows[3], "[termesh] link down");
    assert_eq!(rows[..2], ["b", "c"], "the view follows the cursor");
    v.set_status(None);
    let rows = outer_rows(&mut outer, &mut v);
    assert_eq!(rows, ["a", "b", "c", "bottom"]);
}

#[test]
fn modes_title_and_restore() {
    let (mut v, mut outer) = view((20, 4));
    v.snapshot(
        20,
        4,
        b"\x1b[?1049h\x1b[?1000h\x1b]2;edit\x07\x1b[6 qvim",
        true,
    );
    v.render();
    let on = String::from_utf8_lossy(&v.out).into_owned();
    assert!(
        on.contains("\x1b[22;0t") && on.contains("\x1b[?1000h"),
        "{on:?}"
    );
    assert!(
        on.contains("\x1b]2;big: edit\x07") && on.contains("\x1b[6 q"),
        "{on:?}"
    );
    outer_rows(&mut outer, &mut v);
    v.keep_screen();
    v.restore("[termesh: detached]");
    let off = String::from_utf8_lossy(&v.out).into_owned();
    let leave = off
        .find("\x1b[?1049l")
        .expect("leaves the alternate screen");
    let note = off.find("[termesh: detached]").unwrap();
    assert!(leave < note && off.contains("\x1b[?1000l") && off.contains("\x1b[0 q"));
    assert!(
        off.contains("\x1b[23;0t") && off[leave..].contains("vim"),
        "{off:?}"
    );
}

#[test]
fn the_scroll_mode_draws_over_the_screen_and_gives_it_back() {
    let (mut v, mut outer) = view((20, 4));
    v.snapshot(20, 4, b"live", true);
    outer_rows(&mut outer, &mut v);
    assert!(v.open_scroll((0..50).map(|i| format!("old {i}")).collect(), None));
    let rows = outer_rows(&mut outer, &mut v);
    assert_eq!(rows[..3], ["old 47", "old 48", "old 49"]);
    assert_eq!(v.scroll_keys(b"k"), Scrolled::Stay);
    let rows = outer_rows(&mut outer, &mut v);
    assert_eq!(rows[2], "old 48");
    assert_eq!(v.scroll_keys(b"q"), Scrolled::Quit);
    let rows = outer_rows(&mut outer, &mut v);
    assert_eq!(rows[0], "live");
}
