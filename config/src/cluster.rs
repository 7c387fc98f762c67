//! The `[cluster]` part of a node's config: the cluster id, the CA and this
//! node's certificate files, and every node of the cluster (name, QUIC and
//! HTTP addresses, and the SHA-256 of its key that its certificate must
//! carry). Membership comes from here; `cluster init` writes it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{check_name, ConfigError};

/// The checked cluster section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Names the cluster; peers of another cluster are refused.
    pub id: String,
    /// The cluster CA's certificate (PEM), and this node's certificate and
    /// key; relative paths are relative to the config file.
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Every node, this one included, in the file's order.
    pub nodes: Vec<NodeEntry>,
    /// How long a mirror of another node's session stays without a
    /// subscriber (`mirror_linger_secs`, default 60, at most 86400).
    pub mirror_linger: std::time::Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEntry {
    pub name: String,
    pub quic: SocketAddr,
    pub http: SocketAddr,
    /// The SHA-256 of the node's public key (its certificate's
    /// SubjectPublicKeyInfo), lowercase hex: a certificate of the cluster's
    /// CA for this name with another key is refused. `None` in configs
    /// written before pins (any key the CA signed is taken).
    pub key_sha256: Option<String>,
}

impl ClusterConfig {
    /// This node's entry (checked to exist when the config was read).
    pub fn this(&self, name: &str) -> &NodeEntry {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .expect("the node is listed (checked at load)")
    }

    /// Every other node.
    pub fn peers<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a NodeEntry> + 'a {
        self.nodes.iter().filter(move |n| n.name != name)
    }

    pub fn node(&self, name: &str) -> Option<&NodeEntry> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Makes the file paths relative to `base` (the config file's folder).
    pub(crate) fn resolve_paths(&mut self, base: &Path) {
        for path in [&mut self.ca, &mut self.cert, &mut self.key] {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        }
    }

    /// The certificate files exist and can be read.
    pub(crate) fn check_files(&self, file: &str) -> Result<(), ConfigError> {
        for (key, path) in [
            ("cluster.ca", &self.ca),
            ("cluster.cert", &self.cert),
            ("cluster.key", &self.key),
        ] {
            if let Err(e) = std::fs::File::open(path) {
                return Err(ConfigError::Value {
                    file: file.to_string(),
                    key: key.into(),
                    value: format!("{:?}", path.display().to_string()),
                    reason: format!("cannot read it: {e}"),
                });
            }
        }
        Ok(())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCluster {
    id: Option<String>,
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    mirror_linger_secs: Option<u64>,
    #[serde(default)]
    nodes: Vec<RawNodeEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNodeEntry {
    name: Option<String>,
    quic: Option<String>,
    http: Option<String>,
    key_sha256: Option<String>,
}

/// The errors of the cluster section, naming the file.
struct Bad<'a>(&'a str);

impl Bad<'_> {
    fn value(&self, key: &str, value: String, reason: &str) -> ConfigError {
        ConfigError::Value {
            file: self.0.to_string(),
            key: key.to_string(),
            value,
            reason: reason.to_string(),
        }
    }

    fn missing(&self, key: &str) -> ConfigError {
        self.value(key, "(missing)".into(), "is required in a cluster")
    }

    /// A path that must be given and not be empty.
    fn path(&self, key: &str, value: Option<PathBuf>) -> Result<PathBuf, ConfigError> {
        match value {
            None => Err(self.missing(key)),
            Some(p) if p.as_os_str().is_empty() => {
                Err(self.value(key, "\"\"".into(), "must not be empty"))
            }
            Some(p) => Ok(p),
        }
    }
}

/// Checks the section for the node named `this`.
pub(crate) fn parse(raw: RawCluster, this: &str, file: &str) -> Result<ClusterConfig, ConfigError> {
    let bad = Bad(file);
    let id = raw.id.ok_or_else(|| bad.missing("cluster.id"))?;
    if id.is_empty() || id.len() > 64 || id.chars().any(|c| c.is_control()) {
        return Err(bad.value(
            "cluster.id",
            format!("{id:?}"),
            "must be 1 to 64 printable characters",
        ));
    }
    let ca = bad.path("cluster.ca", raw.ca)?;
    let cert = bad.path("cluster.cert", raw.cert)?;
    let key = bad.path("cluster.key", raw.key)?;
    if raw.nodes.is_empty() {
        return Err(bad.missing("cluster.nodes"));
    }
    let mut nodes: Vec<NodeEntry> = Vec::new();
    for (i, n) in raw.nodes.into_iter().enumerate() {
        let entry = node_entry(&bad, i, n, &nodes)?;
        nodes.push(entry);
    }
    if !nodes.iter().any(|n| n.name == this) {
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        return Err(bad.value(
            "node.name",
            format!("{this:?}"),
            &format!("is not one of cluster.nodes ({})", names.join(", ")),
        ));
    }
    let linger = raw.mirror_linger_secs.unwrap_or(60);
    if linger > 86_400 {
        return Err(bad.value(
            "cluster.mirror_linger_secs",
            linger.to_string(),
            "must be at most 86400 (a day)",
        ));
    }
    Ok(ClusterConfig {
        id,
        ca,
        cert,
        key,
        nodes,
        mirror_linger: std::time::Duration::from_secs(linger),
    })
}

/// `cluster.nodes[i]`, checked against the entries `before` it (a name or
/// address given twice is refused).
fn node_entry(
    bad: &Bad,
    i: usize,
    n: RawNodeEntry,
    before: &[NodeEntry],
) -> Result<NodeEntry, ConfigError> {
    let key = |field: &str| format!("cluster.nodes[{i}].{field}");
    let name = n.name.ok_or_else(|| bad.missing(&key("name")))?;
    check_name(&name).map_err(|r| bad.value(&key("name"), format!("{name:?}"), &r))?;
    let addr = |field: &str, value: Option<String>| -> Result<SocketAddr, ConfigError> {
        let text = value.ok_or_else(|| bad.missing(&key(field)))?;
        text.parse().map_err(|_| {
            bad.value(
                &key(field),
                format!("{text:?}"),
                "not an address:port such as \"127.0.0.1:7521\"",
            )
        })
    };
    let key_sha256 = match n.key_sha256 {
        None => None,
        Some(pin) if pin.len() == 64 && pin.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Some(pin.to_ascii_lowercase())
        }
        Some(pin) => return Err(bad.value(
            &key("key_sha256"),
            format!("{pin:?}"),
            "must be 64 hex digits (the SHA-256 of the node's key, as `cluster init` writes it)",
        )),
    };
    let entry = NodeEntry {
        quic: addr("quic", n.quic)?,
        http: addr("http", n.http)?,
        name,
        key_sha256,
    };
    for other in before {
        let clash = if other.name == entry.name {
            Some(("name", format!("{:?}", entry.name)))
        } else if other.quic == entry.quic {
            Some(("quic", format!("{:?}", entry.quic.to_string())))
        } else if other.http == entry.http {
            Some(("http", format!("{:?}", entry.http.to_string())))
        } else {
            None
        };
        if let Some((field, value)) = clash {
            return Err(bad.value(
                &key(field),
                value,
                &format!("node `{}` has it already", other.name),
            ));
        }
    }
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use crate::Config;

    const GOOD: &str = r#"
[node]
name = "b"
[cluster]
id = "c1"
ca = "../ca.pem"
cert = "node.pem"
key = "node.key"
[[cluster.nodes]]
name = "a"
quic = "127.0.0.1:7521"
http = "127.0.0.1:7520"
[[cluster.nodes]]
name = "b"
quic = "127.0.0.2:7521"
http = "127.0.0.2:7520"
"#;

    #[test]
    fn a_cluster_section_is_read_and_checked() {
        let c = Config::parse(GOOD, "b.toml").unwrap();
        let cluster = c.cluster.unwrap();
        assert_eq!(cluster.this("b").quic.to_string(), "127.0.0.2:7521");
        assert_eq!(
            cluster
                .peers("b")
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>(),
            ["a"]
        );
        assert!(Config::parse("", "t.toml").unwrap().cluster.is_none());
        // A pin is kept in lowercase.
        let pin = "AB".repeat(32);
        let pinned = GOOD.replace(
            "http = \"127.0.0.1:7520\"",
            &format!("http = \"127.0.0.1:7520\"\nkey_sha256 = \"{pin}\""),
        );
        let c = Config::parse(&pinned, "b.toml").unwrap().cluster.unwrap();
        assert_eq!(c.node("a").unwrap().key_sha256, Some("ab".repeat(32)));
        assert_eq!(c.node("b").unwrap().key_sha256, None);
    }

    #[test]
    fn errors_name_the_key_and_value() {
        let cases = [
            (
                GOOD.replace("name = \"b\"\n[cluster]", "name = \"z\"\n[cluster]"),
                "`node.name` = \"z\": is not one of cluster.nodes (a, b)",
            ),
            (
                GOOD.replace("127.0.0.2:7521", "127.0.0.1:7521"),
                "`cluster.nodes[1].quic` = \"127.0.0.1:7521\": node `a` has it already",
            ),
            (
                GOOD.replace("127.0.0.2:7520", "127.0.0.1:7520"),
                "`cluster.nodes[1].http` = \"127.0.0.1:7520\": node `a` has it already",
            ),
            (
                GOOD.replace("name = \"a\"", "name = \"b\""),
                "`cluster.nodes[1].name` = \"b\": node `b` has it already",
            ),
            (
                GOOD.replace("id = \"c1\"\n", ""),
                "`cluster.id` = (missing)",
            ),
            (
                GOOD.replace("127.0.0.2:7520", "nowhere"),
                "`cluster.nodes[1].http` = \"nowhere\": not an address:port",
            ),
            (
                GOOD.replace("cert = \"node.pem\"", "cert = \"\""),
                "`cluster.cert` = \"\": must not be empty",
            ),
            (
                GOOD.replace(
                    "http = \"127.0.0.2:7520\"",
                    "http = \"127.0.0.2:7520\"\nkey_sha256 = \"abc\"",
                ),
                "`cluster.nodes[1].key_sha256` = \"abc\": must be 64 hex digits",
            ),
        ];
        for (text, want) in cases {
            let err = Config::parse(&text, "b.toml").unwrap_err().to_string();
            assert!(err.starts_with("b.toml: "), "{err}");
            assert!(err.contains(want), "{err}\nwanted {want}");
        }
    }

    #[test]
    fn paths_are_relative_to_the_config_file_and_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("b");
        std::fs::create_dir(&sub).unwrap();
        let file = sub.join("termesh.toml");
        std::fs::write(&file, GOOD).unwrap();
        let err = Config::load(&file).unwrap_err().to_string();
        assert!(
            err.contains("`cluster.ca`") && err.contains("cannot read it"),
            "{err}"
        );
        std::fs::write(dir.path().join("ca.pem"), "x").unwrap();
        std::fs::write(sub.join("node.pem"), "x").unwrap();
        std::fs::write(sub.join("node.key"), "x").unwrap();
        let c = Config::load(&file).unwrap();
        let cluster = c.cluster.unwrap();
        assert_eq!(cluster.ca, sub.join("../ca.pem"));
        assert_eq!(cluster.key, sub.join("node.key"));
        // The data dir is relative to the config file too.
        std::fs::write(&file, with_data_dir()).unwrap();
        assert_eq!(Config::load(&file).unwrap().node.data_dir, sub.join("data"));
    }

    /// `GOOD` with `data_dir = "data"`.
    fn with_data_dir() -> String {
        GOOD.replace(
            "name = \"b\"\n[cluster]",
            "name = \"b\"\ndata_dir = \"data\"\n[cluster]",
        )
    }

    #[test]
    fn the_keeper_finds_its_data_dir_whatever_files_the_config_names() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("termesh.toml");
        std::fs::write(&file, with_data_dir()).unwrap();
        // The certificate files are missing: the node would not start.
        assert!(Config::load(&file).is_err());
        assert_eq!(Config::data_dir_in(&file).unwrap(), dir.path().join("data"));
    }
}
