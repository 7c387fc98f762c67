//! `termesh token add | revoke | list --config FILE`: edits the
//! `[[auth.tokens]]` of a config file in place (comments and layout kept,
//! toml_edit), checks that the result is still a valid config before it
//! replaces the file (a new file renamed over the old, same owner and
//! permissions), and never writes a token itself: only its hash.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use toml_edit::{ArrayOfTables, DocumentMut, Item, Table};

fn read(path: &Path) -> anyhow::Result<DocumentMut> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.parse::<DocumentMut>()
        .with_context(|| format!("{} is not TOML", path.display()))
}

/// Checks the edited text as a config (nothing is written when it fails).
fn check(path: &Path, doc: &DocumentMut) -> anyhow::Result<String> {
    let text = doc.to_string();
    termesh_config::Config::parse(&text, &path.display().to_string())
        .context("the edited config would not be valid; nothing was changed")?;
    Ok(text)
}

/// Writes the new text of `path` beside it, with the old file's owner,
/// group and permissions (root editing `/etc/termesh/termesh.toml`,
/// `root:termesh` 0640, must leave it readable by the node's user);
/// answers the new file, which `edit_all` renames over the old.
fn stage(path: &Path, text: &str) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let tmp = path.with_extension("toml.tmp");
    if let Err(e) = std::fs::write(&tmp, text) {
        let _ = std::fs::remove_file(&tmp);
        bail!("cannot write {} ({e}); nothing was changed", tmp.display());
    }
    if let Ok(meta) = std::fs::metadata(path) {
        let kept = std::os::unix::fs::chown(&tmp, Some(meta.uid()), Some(meta.gid()))
            .and_then(|()| std::fs::set_permissions(&tmp, meta.permissions()));
        if let Err(e) = kept {
            let _ = std::fs::remove_file(&tmp);
            bail!(
                "cannot give the new {} the old one's owner {}:{} and mode {:o} ({e}): \
                 run this as root; nothing was changed",
                path.display(),
                meta.uid(),
                meta.gid(),
                meta.mode() & 0o7777
            );
        }
    }
    Ok(tmp)
}

fn tokens(doc: &mut DocumentMut) -> anyhow::Result<&mut ArrayOfTables> {
    let auth = doc
        .entry("auth")
        .or_insert_with(|| Item::Table(Table::new()))
        .as_table_mut()
        .context("`auth` is not a table")?;
    auth.entry("tokens")
        .or_insert_with(|| Item::ArrayOfTables(ArrayOfTables::new()))
        .as_array_of_tables_mut()
        .context("`auth.tokens` is not an array of tables ([[auth.tokens]])")
}

fn name_of(t: &Table) -> Option<&str> {
    t.get("name").and_then(|v| v.as_str())
}

/// Applies `edit` to the token list of every file in `paths` (each named
/// once), checks every result as a config, and only then writes them all:
/// an error in any file changes none.
fn edit_all(
    paths: &[PathBuf],
    mut edit: impl FnMut(&Path, &mut ArrayOfTables) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut edited: Vec<(&Path, String)> = Vec::new();
    for path in paths {
        if edited.iter().any(|(p, _)| *p == path.as_path()) {
            continue;
        }
        let mut doc = read(path)?;
        edit(path, tokens(&mut doc)?)?;
        edited.push((path, check(path, &doc)?));
    }
    // Every new file is made before any replaces its old one.
    let mut staged = Vec::new();
    for (path, text) in &edited {
        match stage(path, text) {
            Ok(tmp) => staged.push((tmp, *path)),
            Err(e) => {
                for (tmp, _) in &staged {
                    let _ = std::fs::remove_file(tmp);
                }
                return Err(e);
            }
        }
    }
    for (tmp, path) in staged {
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot replace {}", path.display()))?;
    }
    Ok(())
}

/// Adds one new token named `name` with `role` to every file in `paths`
/// (a cluster's nodes each read their own); returns the token (shown once:
/// the files keep only its hash).
pub fn add(paths: &[PathBuf], role: &str, name: &str) -> anyhow::Result<String> {
    if name.is_empty() || name.len() > 64 || name.chars().any(|c| c.is_control()) {
        bail!("--name {name:?}: 1 to 64 printable characters");
    }
    let token = crate::token::generate();
    let hash = termesh_config::hash_token(&token);
    edit_all(paths, |path, list| {
        if list.iter().any(|t| name_of(t) == Some(name)) {
            bail!(
                "{} already has a token named {name:?}: revoke it first or pick another name; \
                 nothing was changed",
                path.display()
            );
        }
        let mut entry = Table::new();
        entry.insert("name", toml_edit::value(name));
        entry.insert("hash", toml_edit::value(hash.as_str()));
        entry.insert("role", toml_edit::value(role));
        list.push(entry);
        Ok(())
    })?;
    Ok(token)
}

/// Removes every token named `name` from every file in `paths`; how many
/// went. A file without it is an error.
pub fn revoke(paths: &[PathBuf], name: &str) -> anyhow::Result<usize> {
    let mut gone = 0;
    edit_all(paths, |path, list| {
        let before = list.len();
        list.retain(|t| name_of(t) != Some(name));
        if before == list.len() {
            bail!(
                "{} has no token named {name:?}; nothing was changed",
                path.display()
            );
        }
        gone += before - list.len();
        Ok(())
    })?;
    Ok(gone)
}

/// Every token's name (`-` when unnamed) and role.
pub fn list(path: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let mut doc = read(path)?;
    Ok(tokens(&mut doc)?
        .iter()
        .map(|t| {
            let role = t.get("role").and_then(|v| v.as_str()).unwrap_or("?");
            (name_of(t).unwrap_or("-").to_string(), role.to_string())
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_added_listed_and_revoked_keeping_the_rest_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("termesh.toml");
        let one = [path.clone()];
        let original = "# my node\n[node]\nname = \"n1\" # keep me\n";
        std::fs::write(&path, original).unwrap();
        let alice = add(&one, "operator", "alice").unwrap();
        let bob = add(&one, "viewer", "bob").unwrap();
        assert!(add(&one, "admin", "alice").is_err(), "names are unique");
        assert!(add(&one, "root", "carol").is_err(), "roles are checked");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(original), "{text}");
        assert!(
            !text.contains(&alice) && !text.contains(&bob),
            "no token in the file"
        );
        let config = termesh_config::Config::parse(&text, "t").unwrap();
        let verify = |t: &str| termesh_config::verify(&config.auth.tokens, t);
        assert_eq!(verify(&alice), Some(termesh_config::Role::Operator));
        assert_eq!(verify(&bob), Some(termesh_config::Role::Viewer));
        assert_eq!(
            list(&path).unwrap(),
            [
                ("alice".into(), "operator".into()),
                ("bob".into(), "viewer".into())
            ]
        );
        assert_eq!(revoke(&one, "alice").unwrap(), 1);
        assert!(revoke(&one, "alice").is_err());
        let text = std::fs::read_to_string(&path).unwrap();
        let config = termesh_config::Config::parse(&text, "t").unwrap();
        assert_eq!(termesh_config::verify(&config.auth.tokens, &alice), None);
        assert!(text.contains("# keep me"));
    }

    #[test]
    fn the_edited_file_keeps_its_owner_group_and_mode() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("termesh.toml");
        std::fs::write(&path, "[node]\nname = \"a\"\n").unwrap();
        // As root (the suite's user), another owner and group, as
        // /etc/termesh/termesh.toml's root:termesh.
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let before = std::fs::metadata(&path).unwrap();
        add(std::slice::from_ref(&path), "viewer", "v").unwrap();
        let after = std::fs::metadata(&path).unwrap();
        assert_eq!(
            (after.uid(), after.gid(), after.mode() & 0o7777),
            (before.uid(), before.gid(), 0o640)
        );
        assert!(std::fs::read_to_string(&path)
            .unwrap()
            .contains("name = \"v\""));
    }

    /// A minimal config named `n` in `dir` for each of `names`.
    fn configs(dir: &Path, names: &[&str]) -> Vec<PathBuf> {
        names
            .iter()
            .map(|n| {
                let path = dir.join(format!("{n}.toml"));
                std::fs::write(&path, format!("[node]\nname = \"{n}\"\n")).unwrap();
                path
            })
            .collect()
    }

    #[test]
    fn a_file_that_cannot_be_replaced_leaves_every_file_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let files = configs(dir.path(), &["a", "b"]);
        // b's new file cannot be made: a, edited first, stays as it was.
        std::fs::create_dir(dir.path().join("b.toml.tmp")).unwrap();
        let err = format!("{:#}", add(&files, "viewer", "v").unwrap_err());
        assert!(err.contains("nothing was changed"), "{err}");
        let a = std::fs::read_to_string(&files[0]).unwrap();
        assert_eq!(a, "[node]\nname = \"a\"\n");
        assert!(!dir.path().join("a.toml.tmp").exists());
    }

    #[test]
    fn one_token_goes_into_every_file_or_into_none() {
        let dir = tempfile::tempdir().unwrap();
        let files = configs(dir.path(), &["a", "b", "c"]);
        let token = add(&files, "operator", "alice").unwrap();
        for path in &files {
            let text = std::fs::read_to_string(path).unwrap();
            let config = termesh_config::Config::parse(&text, "t").unwrap();
            let role = termesh_config::verify(&config.auth.tokens, &token);
            assert_eq!(role, Some(termesh_config::Role::Operator), "{text}");
        }
        // c already has "bob": neither a nor b gets one.
        add(&files[2..], "viewer", "bob").unwrap();
        let before: Vec<String> = files
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect();
        let err = add(&files, "viewer", "bob").unwrap_err().to_string();
        assert!(
            err.contains("c.toml") && err.contains("nothing was changed"),
            "{err}"
        );
        let err = revoke(&files, "bob").unwrap_err().to_string();
        assert!(err.contains("a.toml"), "{err}");
        let after: Vec<String> = files
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect();
        assert_eq!(before, after);
        assert_eq!(revoke(&files, "alice").unwrap(), 3);
        // A file named twice is edited once.
        let twice = [files[0].clone(), files[0].clone()];
        add(&twice, "viewer", "dave").unwrap();
        assert_eq!(revoke(&twice, "dave").unwrap(), 1);
    }
}
