//! `termesh cluster add-node` and `remove-node`: membership changes on the
//! folder `cluster init` wrote, for a running cluster. `add-node` signs the
//! new node with the folder's CA (no new CA: the running nodes trust it
//! already), writes its folder as `init` does, and adds it to every other
//! node's config; `remove-node` takes it out of every other config and
//! marks its folder removed (a `REMOVED` file: the node may still run from
//! it, as when the folder is the nodes' own config dirs). The configs are edited, not
//! written anew: every other key and comment stays. Then each node's
//! `termesh config reload` (SIGHUP) applies the new peer list
//! (docs/operations.md, "Add a node").

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use termesh_config::Config;
use termesh_transport::peer::certs::Ca;

use super::init::{check, write, write_node, NodeFiles, NodeSpec};

/// A node's folder in the cluster folder.
pub(crate) struct Member {
    pub name: String,
    pub config: PathBuf,
    pub loaded: Config,
}

/// What a membership change wrote.
#[derive(Debug)]
pub struct Changed {
    /// Configs of the nodes that stay, edited: each node reloads its own.
    pub edited: Vec<PathBuf>,
    /// The new node's config (`add-node`), or the removed node's folder
    /// (`remove-node`).
    pub node: PathBuf,
}

/// Adds `node` to the cluster whose folder is `dir`.
pub fn add_node(dir: &Path, node: &NodeSpec) -> anyhow::Result<Changed> {
    let members = members(dir)?;
    let first = &members[0];
    let cluster = first
        .loaded
        .cluster
        .as_ref()
        .expect("members have [cluster]");
    let mut all: Vec<NodeSpec> = cluster
        .nodes
        .iter()
        .map(|n| NodeSpec {
            name: n.name.clone(),
            quic: n.quic,
            http: n.http,
        })
        .collect();
    if let Some(taken) = all
        .iter()
        .find(|n| n.name == node.name || n.quic == node.quic || n.http == node.http)
    {
        bail!(
            "node `{}` of the cluster already has that name or address ({}, quic {}, http {})",
            taken.name,
            taken.name,
            taken.quic,
            taken.http
        );
    }
    if dir.join(&node.name).join(REMOVED).exists() {
        bail!(
            "node `{}` was removed: its name is refused until its old certificate is \
             trusted nowhere, after `termesh cluster rotate-ca --dir {}` and `--finish` \
             (or choose another name)",
            node.name,
            dir.display()
        );
    }
    if dir.join(&node.name).exists() {
        bail!(
            "{} exists: delete it, or choose another name",
            dir.join(&node.name).display()
        );
    }
    all.push(node.clone());
    let ca = load_ca(dir)?;
    let token = std::fs::read_to_string(dir.join("admin.token"))
        .with_context(|| format!("cannot read {}", dir.join("admin.token").display()))?;
    let data_dir = raw_data_dir(&first.config)?;
    let written = write_node(
        dir,
        &ca,
        &NodeFiles {
            id: &cluster.id,
            all: &all,
            token: token.trim(),
            http_tls: first.loaded.http.tls.is_some(),
            data_dir: &data_dir,
        },
        node,
    )?;
    let pin = super::init::pin_of(dir, &node.name)?;
    let mut edited = Vec::new();
    for member in &members {
        edit(&member.config, |nodes| {
            let mut entry = toml_edit::Table::new();
            entry["name"] = toml_edit::value(node.name.as_str());
            entry["quic"] = toml_edit::value(node.quic.to_string());
            entry["http"] = toml_edit::value(node.http.to_string());
            entry["key_sha256"] = toml_edit::value(pin.as_str());
            nodes.push(entry);
        })?;
        edited.push(member.config.clone());
    }
    Ok(Changed {
        edited,
        node: written,
    })
}

/// Takes `name` out of the cluster whose folder is `dir`.
pub fn remove_node(dir: &Path, name: &str) -> anyhow::Result<Changed> {
    let members = members(dir)?;
    if !members.iter().any(|m| m.name == name) {
        let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        bail!(
            "no node `{name}` in {} (its nodes: {})",
            dir.display(),
            names.join(", ")
        );
    }
    if members.len() == 1 {
        bail!("`{name}` is the cluster's only node: there is nothing to remove it from");
    }
    let mut edited = Vec::new();
    for member in members.iter().filter(|m| m.name != name) {
        edit(&member.config, |nodes| {
            nodes.retain(|t| t.get("name").and_then(|v| v.as_str()) != Some(name));
        })?;
        edited.push(member.config.clone());
    }
    let folder = dir.join(name);
    write(
        &folder.join(REMOVED),
        &format!(
            "`{name}` was removed from the cluster by `termesh cluster remove-node`.\n\
             Stop the node. This folder keeps its name refused (its certificate is\n\
             still of the cluster's CA) until `termesh cluster rotate-ca --finish`,\n\
             which deletes it.\n"
        ),
        false,
    )?;
    Ok(Changed {
        edited,
        node: folder,
    })
}

/// The CA `cluster init` wrote in `dir`.
pub(crate) fn load_ca(dir: &Path) -> anyhow::Result<Ca> {
    let read = |file: &str| {
        std::fs::read_to_string(dir.join(file)).with_context(|| {
            format!(
                "cannot read {}: add-node signs with the CA `cluster init` wrote there",
                dir.join(file).display()
            )
        })
    };
    Ca::load(&read("ca.pem")?, &read("ca.key")?)
        .with_context(|| format!("{}: not a CA certificate and key", dir.display()))
}

/// Marks a node folder `remove-node` took out of the cluster.
const REMOVED: &str = "REMOVED";

/// Deletes the folders of removed nodes (after a CA rotation): their names
/// may be given again.
pub(crate) fn forget_removed(dir: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        if path.join(REMOVED).exists() {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("cannot delete {}", path.display()))?;
        }
    }
    Ok(())
}

/// Every node folder of the cluster folder `dir` (`NAME/termesh.toml`
/// naming node NAME, in a cluster), by name; folders `remove-node` marked
/// are not members.
pub(crate) fn members(dir: &Path) -> anyhow::Result<Vec<Member>> {
    let entries = std::fs::read_dir(dir).with_context(|| {
        format!(
            "cannot read {} (the folder `cluster init --out` wrote)",
            dir.display()
        )
    })?;
    let mut members = Vec::new();
    for entry in entries.flatten() {
        let folder = entry.file_name().to_string_lossy().into_owned();
        let config = entry.path().join("termesh.toml");
        if entry.path().join(REMOVED).exists() || !config.is_file() {
            continue;
        }
        let loaded = check(&config)?;
        if loaded.node.name != folder || loaded.cluster.is_none() {
            continue;
        }
        members.push(Member {
            name: folder,
            config,
            loaded,
        });
    }
    members.sort_by(|a, b| a.name.cmp(&b.name));
    let Some(first) = members.first() else {
        bail!(
            "{} holds no node folders (NAME/termesh.toml): give the folder `cluster init --out` wrote",
            dir.display()
        );
    };
    let id = &first.loaded.cluster.as_ref().expect("checked").id;
    if let Some(other) = members
        .iter()
        .find(|m| m.loaded.cluster.as_ref().is_some_and(|c| c.id != *id))
    {
        bail!(
            "{} is of another cluster than {}: one cluster per folder",
            other.config.display(),
            first.config.display()
        );
    }
    Ok(members)
}

/// The `data_dir` as a config's file writes it (relative paths stay so).
fn raw_data_dir(config: &Path) -> anyhow::Result<String> {
    let doc = read_doc(config)?;
    Ok(doc["node"]["data_dir"]
        .as_str()
        .unwrap_or("data")
        .to_string())
}

fn read_doc(config: &Path) -> anyhow::Result<toml_edit::DocumentMut> {
    let text = std::fs::read_to_string(config)
        .with_context(|| format!("cannot read {}", config.display()))?;
    text.parse()
        .with_context(|| format!("{}: not TOML", config.display()))
}

/// Applies `change` to the `[[cluster.nodes]]` of the config at `path`,
/// keeping everything else as written; the file is replaced whole (a
/// rename), with its mode, and checked.
pub(crate) fn edit(
    path: &Path,
    change: impl FnOnce(&mut toml_edit::ArrayOfTables),
) -> anyhow::Result<()> {
    let mut doc = read_doc(path)?;
    let nodes = doc["cluster"]["nodes"]
        .as_array_of_tables_mut()
        .with_context(|| {
            format!(
                "{}: `cluster.nodes` is not a list of [[cluster.nodes]] tables",
                path.display()
            )
        })?;
    change(nodes);
    let mode = std::fs::metadata(path)?.permissions();
    let next = path.with_extension("toml.next");
    write(&next, &doc.to_string(), false)?;
    std::fs::set_permissions(&next, mode)?;
    std::fs::rename(&next, path).with_context(|| format!("cannot replace {}", path.display()))?;
    check(path).with_context(|| format!("{} was edited wrong", path.display()))?;
    Ok(())
}
