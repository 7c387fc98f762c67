//! The session each node's `termesh attach` last showed this user, kept in
//! `$XDG_STATE_HOME/termesh/last-attached` (else
//! `~/.local/state/termesh/last-attached`) as `URL ID` lines, so a bare
//! `termesh attach` returns to it.

use std::path::{Path, PathBuf};
use termesh_actors::private_fs;

/// Lines the file keeps at most (one per node URL used).
const MAX_LINES: usize = 64;

/// Where the file is, if a home is known.
pub fn path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state")))?;
    Some(base.join("termesh").join("last-attached"))
}

/// The session last attached through `url`.
pub fn read(path: &Path, url: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().rev().find_map(|line| {
        let (u, id) = line.split_once(' ')?;
        (u == url).then(|| id.trim().to_string())
    })
}

/// Remembers `id` as the session last attached through `url`; failing to
/// is not worth an error (the bare attach falls back to the most recent).
pub fn write(path: &Path, url: &str, id: &str) {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines: Vec<&str> = old
        .lines()
        .filter(|l| l.split_once(' ').is_some_and(|(u, _)| u != url))
        .collect();
    let new = format!("{url} {id}");
    lines.push(&new);
    let keep = lines.len().saturating_sub(MAX_LINES);
    let text = lines[keep..].join("\n") + "\n";
    if let Some(dir) = path.parent() {
        let _ = private_fs::create_dir(dir);
    }
    let _ = private_fs::write(path, text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_session_per_url_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/termesh/last-attached");
        assert_eq!(read(&path, "http://a"), None);
        write(&path, "http://a", "s1");
        write(&path, "http://b", "s2");
        write(&path, "http://a", "s3");
        assert_eq!(read(&path, "http://a").as_deref(), Some("s3"));
        assert_eq!(read(&path, "http://b").as_deref(), Some("s2"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
    }
}
