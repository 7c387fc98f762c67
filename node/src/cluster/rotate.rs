//! `termesh cluster rotate-ca`: a new cluster CA without a split. The first
//! step issues a new CA and every node a new certificate from it, sent with
//! the new CA cross-signed by the old one, and makes every `ca.pem` a trust
//! bundle of both: a node that took the new files (a reload) verifies the
//! others whatever they present, and a node that did not yet still
//! verifies it (through the cross-signed CA), so nodes are rolled one at a
//! time and every link stays up, also across a reconnect. `--finish`,
//! once every node has the new files, drops the old CA: `ca.pem` holds the
//! new one only and certificates are sent without the cross-signed one.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use termesh_transport::peer::certs::Ca;

use super::init::{write, CROSS};
use super::members::{load_ca, members, Member};

/// The PEM blocks of a file, each with its armour.
fn pem_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if line.starts_with("-----BEGIN") {
            current.clear();
        }
        current.push_str(line);
        current.push('\n');
        if line.starts_with("-----END") {
            blocks.push(std::mem::take(&mut current));
        }
    }
    blocks
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Issues the new CA and certificates (step 1); answers the node folders
/// written.
pub fn rotate(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let members = members(dir)?;
    // The old CA as the nodes have it (its file's bytes).
    let old_pem = read(&dir.join("ca.pem"))?;
    if pem_blocks(&old_pem).len() > 1 {
        bail!(
            "{} is already a trust bundle: a rotation is under way; finish it with `termesh cluster rotate-ca --dir {} --finish`",
            dir.join("ca.pem").display(),
            dir.display()
        );
    }
    let old = load_ca(dir)?;
    let id = &members[0]
        .loaded
        .cluster
        .as_ref()
        .expect("members are of a cluster")
        .id;
    let next = Ca::new(id).context("cannot make the new CA")?;
    let cross = old
        .cross_sign(&next)
        .context("cannot cross-sign the new CA")?;
    let next_pem = next.pem();
    let bundle = format!("{}{}", next_pem.cert_pem, old_pem);
    // Everything is issued before anything is written: a failure leaves
    // the folder as it was.
    let old_key = read(&dir.join("ca.key"))?;
    let mut files: Vec<(PathBuf, String, bool)> = vec![
        // The old CA is kept aside until `--finish`; the cross-signed CA
        // too, for a node `add-node` writes meanwhile.
        (dir.join("ca.old.pem"), old_pem.clone(), false),
        (dir.join("ca.old.key"), old_key, true),
        (dir.join(CROSS), cross.clone(), false),
        (dir.join("ca.key"), next_pem.key_pem.clone(), true),
    ];
    for member in &members {
        files.extend(member_files(member, &next, &cross, &bundle)?);
    }
    // The bundle last: a folder whose ca.pem is one CA is not yet rotated.
    files.push((dir.join("ca.pem"), bundle, false));
    for (path, text, secret) in &files {
        write(path, text, *secret)?;
    }
    pin_keys(&members)?;
    let mut written = Vec::new();
    for member in &members {
        super::init::check(&member.config)
            .with_context(|| format!("{} was written wrong", member.config.display()))?;
        written.push(member.config.clone());
    }
    Ok(written)
}

/// A node's files from the new CA: its certificate (for the key it has,
/// which the configs pin), its HTTPS certificate when it serves HTTPS,
/// and the trust bundle; each with whether it is secret.
fn member_files(
    member: &Member,
    next: &Ca,
    cross: &str,
    bundle: &str,
) -> anyhow::Result<Vec<(PathBuf, String, bool)>> {
    let folder = member.config.parent().expect("a config is in its folder");
    let key = read(&folder.join("node.key"))?;
    let issued = next
        .issue_for_key(&member.name, &key)
        .with_context(|| format!("cannot issue the certificate of {}", member.name))?;
    let mut files = vec![
        (
            folder.join("node.pem"),
            format!("{}{cross}", issued.cert_pem),
            false,
        ),
        (folder.join("node.key"), issued.key_pem, true),
    ];
    if member.loaded.http.tls.is_some() {
        let node = &member
            .loaded
            .cluster
            .as_ref()
            .expect("checked")
            .this(&member.name);
        let mut names = vec![member.name.clone(), "localhost".to_string()];
        if !node.http.ip().is_unspecified() {
            names.insert(0, node.http.ip().to_string());
        }
        let http = next.issue_http(&names)?;
        files.push((
            folder.join("http.pem"),
            format!("{}{cross}", http.cert_pem),
            false,
        ));
        files.push((folder.join("http.key"), http.key_pem, true));
    }
    files.push((folder.join("ca.pem"), bundle.to_string(), false));
    Ok(files)
}

/// Every config pins every node's key: the same keys as before, and a
/// config written before pins gets them now.
fn pin_keys(members: &[Member]) -> anyhow::Result<()> {
    let mut pins = std::collections::HashMap::new();
    for member in members {
        let folder = member.config.parent().expect("a config is in its folder");
        let pem = read(&folder.join("node.pem"))?;
        let pin = termesh_transport::peer::tls::key_sha256_of_pem(&pem)
            .with_context(|| format!("{} holds no certificate", folder.display()))?;
        pins.insert(member.name.clone(), pin);
    }
    for member in members {
        super::members::edit(&member.config, |nodes| {
            for entry in nodes.iter_mut() {
                let name = entry
                    .get("name")
                    .and_then(|v| v.as_str())
                    .map(str::to_string);
                if let Some(pin) = name.and_then(|n| pins.get(&n)) {
                    entry["key_sha256"] = toml_edit::value(pin.as_str());
                }
            }
        })?;
    }
    Ok(())
}

/// Drops the old CA (step 2); answers the node folders written.
pub fn finish(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let members = members(dir)?;
    let blocks = pem_blocks(&read(&dir.join("ca.pem"))?);
    if blocks.len() < 2 {
        bail!(
            "{} holds one CA: no rotation is under way (start one with `termesh cluster rotate-ca --dir {}`)",
            dir.join("ca.pem").display(),
            dir.display()
        );
    }
    let next = &blocks[0];
    write(&dir.join("ca.pem"), next, false)?;
    for old in ["ca.old.pem", "ca.old.key", CROSS] {
        let _ = std::fs::remove_file(dir.join(old));
    }
    // Removed nodes' certificates are of the old CA, which nobody trusts
    // now: their names may be given again.
    super::members::forget_removed(dir)?;
    let mut written = Vec::new();
    for member in &members {
        let folder = member.config.parent().expect("a config is in its folder");
        for file in ["node.pem", "http.pem"] {
            let path = folder.join(file);
            if path.exists() {
                // The certificate alone: the cross-signed CA goes.
                let own = pem_blocks(&read(&path)?)
                    .into_iter()
                    .next()
                    .with_context(|| format!("{} holds no certificate", path.display()))?;
                write(&path, &own, false)?;
            }
        }
        write(&folder.join("ca.pem"), next, false)?;
        super::init::check(&member.config)
            .with_context(|| format!("{} was written wrong", member.config.display()))?;
        written.push(member.config.clone());
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_blocks_are_split_with_their_armour() {
        let text =
            "-----BEGIN A-----\nxx\n-----END A-----\n-----BEGIN B-----\nyy\n-----END B-----\n";
        let blocks = pem_blocks(text);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[1], "-----BEGIN B-----\nyy\n-----END B-----\n");
    }
}
