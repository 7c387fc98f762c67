//! `<data dir>/node.url`: where a running node serves, so that clients
//! given only `--data-dir` (or the default one) find it. Written once the
//! node serves, removed when it stops (if it is still this node's).

use std::path::{Path, PathBuf};
use termesh_actors::private_fs;

pub const URL_FILE: &str = "node.url";

pub struct UrlFile {
    path: PathBuf,
    text: String,
}

/// Records the URL; a failure is logged, not fatal (clients can be told
/// the URL instead).
pub fn write(data_dir: &Path, url: &str) -> Option<UrlFile> {
    let path = data_dir.join(URL_FILE);
    let text = format!("{url}\n");
    let written =
        private_fs::create_dir(data_dir).and_then(|_| private_fs::write(&path, text.as_bytes()));
    match written {
        Ok(()) => Some(UrlFile { path, text }),
        Err(e) => {
            tracing::warn!("cannot record the node's URL in {}: {e}", path.display());
            None
        }
    }
}

/// The URL a node recorded in `data_dir`, if one did.
pub fn read(data_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(data_dir.join(URL_FILE)).ok()?;
    let url = text.trim();
    let known = url.starts_with("http://") || url.starts_with("https://");
    (known && url.len() < 256).then(|| url.to_string())
}

impl UrlFile {
    /// Removes the file unless another node has since written its own.
    pub fn remove(self) {
        if std::fs::read_to_string(&self.path).is_ok_and(|t| t == self.text) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
