//! Files and folders only the node's user can read (PROTOCOL.md section
//! 2: the data dir holds every session's output and the node's secrets):
//! files are created 0600 and folders 0700 whatever the umask, a file is
//! never opened through a symlink planted in its place (`O_NOFOLLOW`), and
//! a whole file is written to a temporary name and renamed over the old.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Options that create a file 0600 and refuse a symlink at its path.
pub fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    options
}

/// `e` from opening `path`, saying so plainly when `path` is a symlink
/// (`O_NOFOLLOW` answers ELOOP, "too many levels of symbolic links").
pub fn explain(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        return io::Error::new(
            e.kind(),
            format!(
                "{} is a symbolic link, which termesh does not follow in its data dir \
                 (remove it)",
                path.display()
            ),
        );
    }
    e
}

/// Creates `dir` and its missing parents 0700.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Opens `path` for appending, created 0600 if missing.
pub fn append(path: &Path) -> io::Result<File> {
    options()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| explain(path, e))
}

/// Writes `data` as the whole of `path` (0600): to `path.tmp`, then
/// renamed over it, so a reader never sees half. Not synced: for files a
/// crash may lose (`cluster_init::write` syncs the cluster's secrets).
pub fn write(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = Path::new(&tmp);
    let _ = std::fs::remove_file(tmp);
    let written = options()
        .write(true)
        .create_new(true)
        .open(tmp)
        .and_then(|mut f| f.write_all(data))
        .and_then(|_| std::fs::rename(tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    written.map_err(|e| explain(tmp, e))
}

/// Takes group and other access away from everything under `dir` (files
/// a library made with the umask's mode, or an older release): files
/// 0600-ish (the owner's bits kept), folders 0700. Symlinks are left.
pub fn restrict_tree(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            continue;
        }
        let path = entry.path();
        if kind.is_dir() {
            restrict_tree(&path)?;
        }
        restrict(&path)?;
    }
    restrict(dir)
}

/// Takes group and other access away from `path` (not following a link).
pub fn restrict(path: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    let mode = meta.permissions().mode() & 0o7777;
    if meta.file_type().is_symlink() || mode & 0o077 == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o700))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn files_and_folders_are_the_owners_alone_and_symlinks_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        create_dir(&dir).unwrap();
        assert_eq!((mode(&dir), mode(&tmp.path().join("a"))), (0o700, 0o700));
        let file = dir.join("f");
        write(&file, b"one").unwrap();
        write(&file, b"two").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        assert_eq!(mode(&file), 0o600);
        append(&dir.join("log")).unwrap();
        assert_eq!(mode(&dir.join("log")), 0o600);
        // A symlink planted where a file goes is not followed.
        let target = tmp.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, dir.join("planted")).unwrap();
        assert!(append(&dir.join("planted")).is_err());
        assert!(!target.exists());
        // What a library made with the umask's mode is tightened.
        let open = dir.join("open");
        std::fs::write(&open, b"x").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        restrict_tree(tmp.path()).unwrap();
        assert_eq!((mode(&open), mode(&dir)), (0o600, 0o700));
    }
}
