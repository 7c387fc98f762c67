//! The generated admin token: created when no token is configured, kept in
//! `<data dir>/admin.token` (mode 0600) so local clients find it.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use rand::RngCore;

pub const TOKEN_FILE: &str = "admin.token";

pub fn token_path(data_dir: &Path) -> PathBuf {
    data_dir.join(TOKEN_FILE)
}

/// A new random token: 32 bytes, hex.
pub fn generate() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Reads the admin token file, if there is a well-formed one.
pub fn read(data_dir: &Path) -> anyhow::Result<Option<String>> {
    let path = token_path(data_dir);
    // Not through a symlink: a planted one would make any file's text the
    // admin token (and the mode fix below would follow it).
    let opened = termesh_actors::private_fs::options()
        .read(true)
        .open(&path)
        .map_err(|e| termesh_actors::private_fs::explain(&path, e));
    match opened.and_then(|mut f| {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut f, &mut text).map(|_| text)
    }) {
        Ok(text) => {
            let token = text.trim().to_string();
            if token.len() < 16 || token.len() > 256 || !token.chars().all(|c| c.is_ascii_graphic())
            {
                bail!(
                    "{}: not a token (delete it to have a new one generated)",
                    path.display()
                );
            }
            Ok(Some(token))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The existing admin token, or a new one written with mode 0600.
pub fn load_or_create(data_dir: &Path) -> anyhow::Result<(String, bool)> {
    if let Some(token) = read(data_dir)? {
        let path = token_path(data_dir);
        let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("cannot restrict {} to mode 0600", path.display()))?;
        }
        return Ok((token, false));
    }
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create data dir {}", data_dir.display()))?;
    let token = generate();
    let path = token_path(data_dir);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    writeln!(file, "{token}")?;
    Ok((token, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_is_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let (a, created) = load_or_create(dir.path()).unwrap();
        assert!(created && a.len() == 64);
        let mode = std::fs::metadata(token_path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let (b, created) = load_or_create(dir.path()).unwrap();
        assert!(!created);
        assert_eq!(a, b);
    }

    #[test]
    fn garbage_token_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(token_path(dir.path()), "x\n").unwrap();
        assert!(load_or_create(dir.path())
            .unwrap_err()
            .to_string()
            .contains("not a token"));
    }
}
