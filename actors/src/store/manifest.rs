//! A guard against sled losing data without an error: after a damaged
//! file (or an unclean stop it cannot recover from) sled 0.34 can open a
//! store as if it were empty or shorter. Beside the store
//! (`<data dir>/store.manifest`) the node writes how many session records
//! it has put on disk, each time it flushes them; at open, a store that
//! reads back fewer is refused rather than silently served half-empty.

use std::path::{Path, PathBuf};

/// Where the manifest of the store in `dir` lives.
pub fn path_for(dir: &Path) -> PathBuf {
    dir.with_extension("manifest")
}

/// The record count written last; `None` without a readable manifest
/// (a new store, or one from before manifests).
pub fn read(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("sessions "))
        .and_then(|n| n.trim().parse().ok())
}

/// Writes the count (a new file renamed over the old: never half-written).
pub fn write(path: &Path, sessions: u64) -> std::io::Result<()> {
    let text = format!("# termesh store manifest: session records on disk\nsessions {sessions}\n");
    crate::private_fs::write(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_round_trips_and_a_missing_one_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_for(&dir.path().join("store"));
        assert_eq!(path.file_name().unwrap(), "store.manifest");
        assert_eq!(read(&path), None);
        write(&path, 42).unwrap();
        assert_eq!(read(&path), Some(42));
        write(&path, 7).unwrap();
        assert_eq!(read(&path), Some(7));
    }
}
