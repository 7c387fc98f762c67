//! `termesh cluster init`: everything the nodes of a new cluster need, in
//! one folder: the cluster CA (`ca.pem`, `ca.key`), one admin token
//! (`admin.token`, its hash in every config), and per node `NAME/termesh.toml`
//! (complete: name, listeners, data dir, every node, the token hash, its
//! certificate files), `NAME/node.pem` and `NAME/node.key`. Every config
//! written is read back and checked, certificates included.

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use termesh_config::{check_name, hash_token, Config};
use termesh_transport::peer::certs::Ca;
use termesh_transport::peer::tls::{key_sha256_of_pem, Identity, NameForm};

/// The new CA signed by the old one, in the cluster folder while a
/// rotation is under way.
pub(crate) const CROSS: &str = "ca.cross.pem";

/// One `--node NAME,quic=ADDR,http=ADDR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub quic: SocketAddr,
    pub http: SocketAddr,
}

impl std::str::FromStr for NodeSpec {
    type Err = String;

    fn from_str(spec: &str) -> Result<NodeSpec, String> {
        let usage = "use NAME,quic=ADDR:PORT,http=ADDR:PORT, e.g. a,quic=127.0.0.1:7521,http=127.0.0.1:7520";
        let mut parts = spec.split(',');
        let name = parts.next().unwrap_or_default().trim().to_string();
        check_name(&name).map_err(|e| format!("node name {name:?}: {e}"))?;
        let (mut quic, mut http) = (None, None);
        for part in parts {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: {usage}"))?;
            let addr: SocketAddr = value
                .trim()
                .parse()
                .map_err(|_| format!("{key}={value:?}: not an address:port"))?;
            match key.trim() {
                "quic" => quic = Some(addr),
                "http" => http = Some(addr),
                other => return Err(format!("unknown key {other:?}: {usage}")),
            }
        }
        match (quic, http) {
            (Some(quic), Some(http)) => Ok(NodeSpec { name, quic, http }),
            _ => Err(format!("{spec:?} needs both quic= and http=: {usage}")),
        }
    }
}

/// What `init` wrote.
#[derive(Debug)]
pub struct Written {
    pub id: String,
    pub token: String,
    pub configs: Vec<PathBuf>,
}

/// How `init` writes.
#[derive(Debug, Clone, Default)]
pub struct InitOptions {
    /// Write into a folder that is not empty.
    pub force: bool,
    /// Each node also gets an HTTPS certificate (`NAME/http.pem`,
    /// `http.key`) for its HTTP address and name, from the same CA, and
    /// its config serves HTTPS.
    pub http_tls: bool,
    /// Every node's `data_dir` (default `data`, beside its config).
    pub data_dir: Option<String>,
}

/// Writes the cluster: the CA and admin token at the top, and one
/// self-contained folder per node (config, certificates, a copy of the
/// CA certificate), to be copied as it is to that node's machine.
pub fn init(out: &Path, nodes: &[NodeSpec], options: &InitOptions) -> anyhow::Result<Written> {
    let InitOptions {
        force,
        http_tls,
        data_dir,
    } = options;
    let data_dir = data_dir.as_deref().unwrap_or("data");
    if data_dir.is_empty() || data_dir.chars().any(|c| c.is_control()) {
        bail!("--nodes-data-dir {data_dir:?}: a path without control characters");
    }
    if nodes.is_empty() {
        bail!("name the cluster's nodes with --node NAME,quic=ADDR,http=ADDR (one per node)");
    }
    for (i, a) in nodes.iter().enumerate() {
        for b in &nodes[..i] {
            if a.name == b.name || a.quic == b.quic || a.http == b.http {
                bail!(
                    "--node {} and --node {} share a name or an address",
                    a.name,
                    b.name
                );
            }
        }
    }
    let non_empty = std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some());
    if non_empty && !*force {
        bail!(
            "{} is not empty: choose another folder, or pass --force to write over it",
            out.display()
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let ca = Ca::new(&id).context("cannot make the cluster CA")?;
    let ca_pem = ca.pem();
    write(&out.join("ca.pem"), &ca_pem.cert_pem, false)?;
    write(&out.join("ca.key"), &ca_pem.key_pem, true)?;
    let token = crate::token::generate();
    write(&out.join("admin.token"), &format!("{token}\n"), true)?;
    let files = NodeFiles {
        id: &id,
        all: nodes,
        token: &token,
        http_tls: *http_tls,
        data_dir,
    };
    // Every node's key first: each config pins all of them.
    for node in nodes {
        write_node_certs(out, &ca, &files, node)?;
    }
    let mut configs = Vec::new();
    for node in nodes {
        configs.push(write_node_config(out, &files, node)?);
    }
    Ok(Written { id, token, configs })
}

/// What every node's folder is written from.
pub(crate) struct NodeFiles<'a> {
    pub id: &'a str,
    /// Every node of the cluster, the one written included.
    pub all: &'a [NodeSpec],
    pub token: &'a str,
    pub http_tls: bool,
    pub data_dir: &'a str,
}

/// Writes `out/NAME/`: the node's certificate and key from `ca`, the CA's
/// certificate, its HTTPS certificate when asked, and its config (read back
/// and checked). Answers the config's path.
pub(crate) fn write_node(
    out: &Path,
    ca: &Ca,
    files: &NodeFiles,
    node: &NodeSpec,
) -> anyhow::Result<PathBuf> {
    write_node_certs(out, ca, files, node)?;
    write_node_config(out, files, node)
}

/// The SHA-256 of the key of the node `name` of the folder `out` (from its
/// `node.pem`), as `cluster.nodes[].key_sha256` pins it.
pub(crate) fn pin_of(out: &Path, name: &str) -> anyhow::Result<String> {
    let path = out.join(name).join("node.pem");
    let pem = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    key_sha256_of_pem(&pem).with_context(|| format!("{} holds no certificate", path.display()))
}

/// Writes `out/NAME/`'s certificates: the node's certificate and key from
/// `ca`, the CA's certificate, its HTTPS certificate when asked.
fn write_node_certs(out: &Path, ca: &Ca, files: &NodeFiles, node: &NodeSpec) -> anyhow::Result<()> {
    let dir = out.join(&node.name);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let issued = ca
        .issue(&node.name)
        .with_context(|| format!("cannot issue the certificate of {}", node.name))?;
    // During a CA rotation the node sends the new CA cross-signed by the
    // old one too, so nodes not yet rotated accept it (`cluster_rotate`).
    let cross = std::fs::read_to_string(out.join(CROSS)).unwrap_or_default();
    write(
        &dir.join("node.pem"),
        &format!("{}{cross}", issued.cert_pem),
        false,
    )?;
    write(&dir.join("node.key"), &issued.key_pem, true)?;
    std::fs::copy(out.join("ca.pem"), dir.join("ca.pem"))
        .with_context(|| format!("cannot copy ca.pem into {}", dir.display()))?;
    if files.http_tls {
        let mut names = vec![node.name.clone(), "localhost".to_string()];
        if !node.http.ip().is_unspecified() {
            names.insert(0, node.http.ip().to_string());
        }
        let http = ca
            .issue_http(&names)
            .with_context(|| format!("cannot issue the HTTPS certificate of {}", node.name))?;
        write(&dir.join("http.pem"), &http.cert_pem, false)?;
        write(&dir.join("http.key"), &http.key_pem, true)?;
    }
    Ok(())
}

/// Writes `out/NAME/termesh.toml` (every node's key pinned from its
/// folder), read back and checked. Answers its path.
fn write_node_config(out: &Path, files: &NodeFiles, node: &NodeSpec) -> anyhow::Result<PathBuf> {
    let pins = files
        .all
        .iter()
        .map(|n| pin_of(out, &n.name))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let path = out.join(&node.name).join("termesh.toml");
    let text = config_text(
        files.id,
        node,
        files.all,
        &pins,
        files.token,
        files.http_tls,
        files.data_dir,
    );
    write(&path, &text, false)?;
    check(&path).with_context(|| format!("{} was written wrong", path.display()))?;
    Ok(path)
}

/// Reads a node's config and checks its certificate: signed by the
/// cluster CA, for serving and dialing, naming this node.
pub fn check(path: &Path) -> anyhow::Result<Config> {
    let config = Config::load(path)?;
    if let Some(cluster) = &config.cluster {
        let identity = Identity::load(&cluster.ca, &cluster.cert, &cluster.key)?;
        let form = identity.check_names(&config.node.name).map_err(|reason| {
            anyhow::anyhow!(
                "{}: `cluster.cert` = {:?}: {reason}",
                path.display(),
                cluster.cert.display().to_string()
            )
        })?;
        let pinned = cluster.this(&config.node.name).key_sha256.as_deref();
        if let (Some(pinned), Some(mine)) = (pinned, identity.key_sha256()) {
            anyhow::ensure!(
                pinned == mine,
                "{}: this node's key (sha256 {mine}) is not the one its `cluster.nodes` entry \
                 pins ({pinned}): its peers would refuse it",
                path.display()
            );
        }
        if form == NameForm::Legacy {
            tracing::warn!(
                cert = %cluster.cert.display(),
                "this node's certificate predates mesh names (SAN {}): it still links, \
                 but re-issue the cluster's certificates with `termesh cluster rotate-ca` \
                 (docs/operations.md, \"Rotate the cluster CA\")",
                termesh_transport::peer::tls::mesh_name(&config.node.name)
            );
        }
    }
    Ok(config)
}

fn config_text(
    id: &str,
    node: &NodeSpec,
    all: &[NodeSpec],
    pins: &[String],
    token: &str,
    tls: bool,
    data_dir: &str,
) -> String {
    let https = if tls {
        "# HTTPS with a certificate from the cluster CA (clients: --ca ca.pem).\n\
         tls_cert = \"http.pem\"\ntls_key = \"http.key\"\n"
    } else {
        ""
    };
    let mut text = format!(
        "# Node `{name}` of cluster `{id}`, written by `termesh cluster init`.\n\
         # Copy this folder to the node's machine (e.g. as /etc/termesh) and start it with:\n\
         # termesh node --config {name}/termesh.toml (or deploy/termesh.service).\n\
         # Relative paths are relative to this file.\n\n\
         [node]\nname = \"{name}\"\ndata_dir = {data_dir}\n\n\
         [http]\nlisten = \"{http}\"\n{https}\n\
         # The cluster admin token (the folder's admin.token); add more with `termesh token add`.\n\
         [[auth.tokens]]\nname = \"cluster admin\"\nhash = \"{hash}\"\nrole = \"admin\"\n\n\
         [cluster]\nid = \"{id}\"\nca = \"ca.pem\"\ncert = \"node.pem\"\nkey = \"node.key\"\n",
        name = node.name,
        http = node.http,
        hash = hash_token(token),
        data_dir = toml_edit::Value::from(data_dir),
    );
    for (n, pin) in all.iter().zip(pins) {
        text.push_str(&format!(
            "\n[[cluster.nodes]]\nname = \"{}\"\nquic = \"{}\"\nhttp = \"{}\"\nkey_sha256 = \"{pin}\"\n",
            n.name, n.quic, n.http
        ));
    }
    text
}

/// Writes a file; secrets are readable by their owner only, also when the
/// file was there before (`--force`) with a wider mode: `mode` applies only
/// to files created, so the mode is set on the open file before the secret
/// is written into it.
pub(crate) fn write(path: &Path, text: &str, secret: bool) -> anyhow::Result<()> {
    // A new file renamed over the old: a crash or a full disk leaves the
    // old file or the new one, never half of one (a CA key among them).
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".new");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options
        .write(true)
        .create_new(true)
        .mode(if secret { 0o600 } else { 0o644 });
    let written = options.open(&tmp).and_then(|mut file| {
        if secret {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        file.write_all(text.as_bytes())?;
        file.sync_all()
    });
    let written = written.and_then(|_| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_specs_parse_with_clear_errors() {
        let spec: NodeSpec = "a,quic=127.0.0.1:7521,http=127.0.0.1:7520".parse().unwrap();
        assert_eq!(spec.name, "a");
        assert_eq!(spec.quic.to_string(), "127.0.0.1:7521");
        for (bad, want) in [
            ("a,quic=127.0.0.1:7521", "needs both"),
            ("a,quic=x,http=127.0.0.1:1", "not an address"),
            ("a b,quic=127.0.0.1:1,http=127.0.0.1:2", "node name"),
            ("a,port=1", "not an address"),
            ("a,tcp=127.0.0.1:1,http=127.0.0.1:2", "unknown key"),
        ] {
            let err = bad.parse::<NodeSpec>().unwrap_err();
            assert!(err.contains(want), "{bad}: {err}");
        }
    }
}
