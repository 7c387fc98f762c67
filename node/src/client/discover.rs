//! Finding the node a client command talks to, and saying where it looked
//! when none answers: `--url`, else the data dir's `node.url`, else the
//! one local node the runtime dir records, else the default address.

use std::path::PathBuf;

use anyhow::bail;

use super::normalize_url;
use crate::server::{runtime_file, url_file};

/// Where the node is, whose data dir holds its token, and the places
/// looked in on the way (empty when `--url` named it).
#[derive(Debug, Clone)]
pub struct Found {
    pub url: String,
    pub data_dir: PathBuf,
    pub looked: Vec<String>,
}

/// The node for `--url` (or `TERMESH_URL`) and `--data-dir` (or
/// `TERMESH_DATA_DIR`), each `None` when not given.
pub fn find(url: Option<String>, data_dir: Option<PathBuf>) -> anyhow::Result<Found> {
    let given = data_dir.is_some();
    let data_dir = data_dir.unwrap_or_else(termesh_config::default_data_dir);
    if let Some(url) = url {
        let url = normalize_url(&url)?;
        return Ok(Found {
            url,
            data_dir,
            looked: Vec::new(),
        });
    }
    let url_path = data_dir.join(url_file::URL_FILE);
    if let Some(url) = url_file::read(&data_dir) {
        let looked = vec![format!("{} (it names {url})", url_path.display())];
        return Ok(Found {
            url,
            data_dir,
            looked,
        });
    }
    let mut looked = vec![format!("{} (absent)", url_path.display())];
    // A data dir given says which node: the runtime records are for
    // finding one that was not named.
    if !given {
        let run = runtime_file::dir();
        match runtime_file::live(&run).as_slice() {
            [] => looked.push(format!("{} (no running node recorded)", run.display())),
            [one] => {
                return Ok(Found {
                    url: one.url.clone(),
                    data_dir: one.data_dir.clone(),
                    looked: vec![format!("{} (node `{}`)", run.display(), one.name)],
                })
            }
            many => {
                let list: Vec<String> = many
                    .iter()
                    .map(|r| {
                        format!(
                            "`{}` at {} (--data-dir {})",
                            r.name,
                            r.url,
                            r.data_dir.display()
                        )
                    })
                    .collect();
                bail!(
                    "{} local nodes run ({}): say which with --data-dir DIR (or TERMESH_DATA_DIR) or --url (or TERMESH_URL)",
                    many.len(),
                    list.join(", ")
                );
            }
        }
    }
    let url = format!("http://{}", termesh_config::defaults::HTTP_LISTEN);
    looked.push(format!("the default address {url}"));
    Ok(Found {
        url,
        data_dir,
        looked,
    })
}

/// What to add to "no termesh node at URL" so a person can act on it.
pub fn hint(looked: &[String]) -> String {
    if looked.is_empty() {
        return ": start one with `termesh node`, or pass another --url".into();
    }
    format!(
        "; looked in: {}. Start one with `termesh node`; for a node started with \
         --data-dir DIR, pass --data-dir DIR (or set TERMESH_DATA_DIR); or pass --url \
         (or set TERMESH_URL)",
        looked.join("; ")
    )
}
