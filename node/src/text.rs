//! A terminal snapshot as plain text rows (`termesh screen` and REST
//! `screen?format=text` alike).

/// Plain text rows of a snapshot, trailing blank rows dropped.
pub fn render_text(snapshot: &[u8], cols: u16, rows: u16) -> Vec<String> {
    let Ok(mut term) = avt::Terminal::new(cols.max(1).into(), rows.max(1).into()) else {
        return Vec::new();
    };
    term.feed(String::from_utf8_lossy(snapshot).as_ref());
    let mut lines: Vec<String> = term
        .screen()
        .visible_lines()
        .map(|l| l.text().trim_end().to_string())
        .collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}
