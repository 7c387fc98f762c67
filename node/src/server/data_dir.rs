//! The node's data dir and its store dir: created owner-only (0700), since
//! they hold every session's output; an existing data dir open to group or
//! others is left as the operator made it, with a warning (it may be shared
//! on purpose, e.g. with a backup group), but one that another user owns
//! or that group or others may write to is refused (they could plant
//! files or links in it); the store dir, the node's alone, is tightened to
//! 0700.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use anyhow::Context;

/// Creates `dir` (and missing parents) 0700, or warns if it exists with
/// group or other access.
pub fn prepare(dir: &Path) -> anyhow::Result<()> {
    let open = create(dir)?;
    refuse_foreign(dir)?;
    if let Some(mode) = open {
        tracing::warn!(
            path = %dir.display(),
            "the data dir has mode {mode:o}: other local users may read session output; \
             restrict it with `chmod 700 {}`",
            dir.display()
        );
    }
    Ok(())
}

/// Creates `dir` 0700, or tightens it to 0700 if it exists wider.
pub fn prepare_private(dir: &Path) -> anyhow::Result<()> {
    if create(dir)?.is_some() {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot restrict {} to mode 0700", dir.display()))?;
        tracing::info!(path = %dir.display(), "restricted to mode 0700");
    }
    Ok(())
}

/// Refuses a data dir another user owns, or that group or others may
/// write to.
fn refuse_foreign(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let me = rustix::process::geteuid().as_raw();
    anyhow::ensure!(
        meta.uid() == me,
        "the data dir {} belongs to uid {}, not to this user (uid {me}): \
         a node keeps its output only in a folder of its own user",
        dir.display(),
        meta.uid()
    );
    let mode = meta.mode() & 0o777;
    anyhow::ensure!(
        mode & 0o022 == 0,
        "the data dir {} has mode {mode:o}: group or others may write to it, and \
         could plant files or links in it; restrict it with `chmod 700 {}`",
        dir.display(),
        dir.display()
    );
    Ok(())
}

/// Creates `dir` 0700 if it is missing; if it was there, its mode when it
/// grants group or other any access.
fn create(dir: &Path) -> anyhow::Result<Option<u32>> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let mode = std::fs::metadata(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .permissions()
        .mode()
        & 0o777;
    Ok((mode & 0o077 != 0).then_some(mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(dir: &Path) -> u32 {
        std::fs::metadata(dir).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn new_dirs_are_owner_only_whatever_the_umask() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("x/data");
        prepare(&data).unwrap();
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&tmp.path().join("x")), 0o700);
        prepare_private(&data.join("store")).unwrap();
        assert_eq!(mode(&data.join("store")), 0o700);
    }

    #[test]
    fn a_data_dir_others_may_write_to_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = format!("{:#}", prepare(&data).unwrap_err());
        assert!(
            err.contains("mode 777") && err.contains("chmod 700"),
            "{err}"
        );
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o750)).unwrap();
        prepare(&data).unwrap();
    }

    #[test]
    fn an_open_data_dir_is_kept_and_an_open_store_dir_tightened() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        std::fs::create_dir_all(data.join("store")).unwrap();
        for dir in [&data, &data.join("store")] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        assert_eq!(create(&data).unwrap(), Some(0o755));
        prepare(&data).unwrap();
        assert_eq!(mode(&data), 0o755, "the operator's choice, warned about");
        prepare_private(&data.join("store")).unwrap();
        assert_eq!(mode(&data.join("store")), 0o700);
    }
}
