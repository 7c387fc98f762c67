//! `termesh token add | revoke | list --config FILE`: edits the
//! `[[auth.tokens]]` of a config file in place (comments and layout kept,
//! toml_edit), checks that the result is still a valid config before it
//! replaces the file (a new file renamed over the old, same permissions),
//! and never writes a token itself: only its hash.

use std::path::Path;

use anyhow::{bail, Context};
use toml_edit::{ArrayOfTables, DocumentMut, Item, Table};

fn read(path: &Path) -> anyhow::Result<DocumentMut> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.parse::<DocumentMut>()
        .with_context(|| format!("{} is not TOML", path.display()))
}

/// Checks the edited text as a config, then replaces the file.
fn write(path: &Path, doc: &DocumentMut) -> anyhow::Result<()> {
    let text = doc.to_string();
    termesh_config::Config::parse(&text, &path.display().to_string())
        .context("the edited config would not be valid; the file is unchanged")?;
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, &text).with_context(|| format!("cannot write {}", tmp.display()))?;
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&tmp, meta.permissions());
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))
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

/// Adds a new token named `name` with `role`; returns the token (shown
/// once: the file keeps only its hash).
pub fn add(path: &Path, role: &str, name: &str) -> anyhow::Result<String> {
    if name.is_empty() || name.len() > 64 || name.chars().any(|c| c.is_control()) {
        bail!("--name {name:?}: 1 to 64 printable characters");
    }
    let mut doc = read(path)?;
    let list = tokens(&mut doc)?;
    if list.iter().any(|t| name_of(t) == Some(name)) {
        bail!(
            "{} already has a token named {name:?}: revoke it first or pick another name",
            path.display()
        );
    }
    let token = crate::token::generate();
    let mut entry = Table::new();
    entry.insert("name", toml_edit::value(name));
    entry.insert("hash", toml_edit::value(termesh_config::hash_token(&token)));
    entry.insert("role", toml_edit::value(role));
    list.push(entry);
    write(path, &doc)?;
    Ok(token)
}

/// Removes every token named `name`; how many went.
pub fn revoke(path: &Path, name: &str) -> anyhow::Result<usize> {
    let mut doc = read(path)?;
    let list = tokens(&mut doc)?;
    let before = list.len();
    list.retain(|t| name_of(t) != Some(name));
    let gone = before - list.len();
    if gone == 0 {
        bail!("{} has no token named {name:?}", path.display());
    }
    write(path, &doc)?;
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
        let original = "# my node\n[node]\nname = \"n1\" # keep me\n";
        std::fs::write(&path, original).unwrap();
        let alice = add(&path, "operator", "alice").unwrap();
        let bob = add(&path, "viewer", "bob").unwrap();
        assert!(add(&path, "admin", "alice").is_err(), "names are unique");
        assert!(add(&path, "root", "carol").is_err(), "roles are checked");
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
        assert_eq!(revoke(&path, "alice").unwrap(), 1);
        assert!(revoke(&path, "alice").is_err());
        let text = std::fs::read_to_string(&path).unwrap();
        let config = termesh_config::Config::parse(&text, "t").unwrap();
        assert_eq!(termesh_config::verify(&config.auth.tokens, &alice), None);
        assert!(text.contains("# keep me"));
    }
}
