//! termesh-config: the node's config file (TOML), its defaults and validation.
//!
//! Every setting has exactly one default, written in [`defaults`]. A file is
//! read into loose "raw" types, then parsed once into checked types; every
//! error names the file, the key and the bad value.

pub mod agents;
mod auth;
mod cluster;
pub mod fuzz;
mod http;
pub mod notify;
pub mod origins;
mod session;
mod store;
pub mod tls;
pub use session::SessionConfig;
pub use store::{MaxBytes, StoreConfig};
mod units;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub use auth::{digest, hash_token, parse_token_hash, verify, verify_digest, Role, TokenEntry};
pub use cluster::{ClusterConfig, NodeEntry};
pub use http::HttpConfig;
pub use units::{parse_duration, parse_size};

/// Every default, with its unit.
pub mod defaults {
    use std::time::Duration;

    pub const NODE_NAME: &str = "local";
    pub const HTTP_LISTEN: &str = "127.0.0.1:7420";
    pub const COLS: u16 = 120;
    /// The largest terminal a session may have, everywhere a size is
    /// taken (create, resize, config, attach; PROTOCOL.md section 5).
    pub const MAX_COLS: u16 = 1000;
    pub const MAX_ROWS: u16 = 500;
    pub const ROWS: u16 = 30;
    /// Replay ring bound in bytes (4 MiB).
    pub const RING_BYTES: u64 = 4 << 20;
    /// Replay ring bound in frames.
    pub const RING_FRAMES: u64 = 65_536;
    /// Flow-control window of a subscription that names none (1 MiB).
    pub const WINDOW: u64 = 1 << 20;
    pub const WINDOW_MIN: u64 = 16 << 10;
    pub const WINDOW_MAX: u64 = 16 << 20;
    /// Time between SIGTERM and SIGKILL when a session is killed.
    pub const KILL_GRACE: Duration = Duration::from_secs(3);
    /// A watched session's screen model is dropped after this long
    /// without output or screen requests (its last snapshot is kept).
    pub const MODEL_IDLE: Duration = Duration::from_secs(60);
    pub const MAX_SESSIONS: u64 = 4_096;
    pub const PING_INTERVAL: Duration = Duration::from_secs(15);
    pub const STALE_AFTER: Duration = Duration::from_secs(45);
    pub const REAP_AFTER: Duration = Duration::from_secs(120);
    pub const AUTH_TIMEOUT: Duration = Duration::from_secs(10);
    /// TCP keepalive on client sockets: idle time before the first probe,
    /// time between probes, probes before the kernel drops the peer.
    pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
    pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
    pub const KEEPALIVE_PROBES: u32 = 3;
    /// TCP_USER_TIMEOUT: sent data unacknowledged (or a zero window) this
    /// long and the kernel closes the connection.
    pub const USER_TIMEOUT: Duration = Duration::from_secs(60);
    /// Connections the node keeps open at once, and from one address.
    pub const MAX_CONNECTIONS: usize = 4_096;
    pub const MAX_CONNECTIONS_PER_ADDRESS: usize = 256;
    /// A client's request head (an upgrade's included) must have arrived
    /// this long after it connected, or the connection is closed.
    pub const REQUEST_HEAD_TIMEOUT: Duration = Duration::from_secs(5);
    /// The watchdog's tick: how often it measures its own lateness.
    pub const WATCHDOG_TICK: Duration = Duration::from_millis(100);
    /// Linux pressure-stall information for memory (`some total=` in µs).
    pub const PSI_PATH: &str = "/proc/pressure/memory";
    /// Environment variable that overrides `session.ring_bytes` (for tests).
    pub const RING_BYTES_ENV: &str = "TERMESH_RING_BYTES";
}

/// A config problem, naming where it is and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: {message}")]
    Syntax { file: String, message: String },
    #[error("{file}: `{key}` = {value}: {reason}")]
    Value {
        file: String,
        key: String,
        value: String,
        reason: String,
    },
}

/// The checked configuration of one node.
#[derive(Debug, Clone)]
pub struct Config {
    pub node: NodeConfig,
    pub http: HttpConfig,
    pub auth: AuthConfig,
    pub session: SessionConfig,
    pub ws: WsConfig,
    pub watchdog: WatchdogConfig,
    /// `None`: a single node (no `[cluster]` section).
    pub cluster: Option<ClusterConfig>,
    pub store: StoreConfig,
    /// `[[agents]]`: agents beside the built-in ones.
    pub agents: Vec<agents::AgentConfig>,
    /// `[[notify]]`: where state changes are posted.
    pub notify: Vec<notify::NotifyConfig>,
    /// The file it was read from (`None`: defaults, or parsed text); a
    /// reload reads it again.
    pub source: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Cluster-unique node name: `[A-Za-z0-9_.-]`, 1 to 64 characters.
    pub name: String,
    /// Where the node keeps its files (admin token now; the store later).
    pub data_dir: PathBuf,
    /// Programs run under the node's PTY keeper (`termesh keeper`) and
    /// outlive the node's restarts; `false`: they are the node's children
    /// and end with it.
    pub keeper: bool,
}

/// The host-stall watchdog.
#[derive(Debug, Clone)]
pub struct WatchdogConfig {
    pub tick: Duration,
    /// PSI memory file; `None` (empty in the file) means lateness only.
    pub psi_path: Option<PathBuf>,
}

#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// Empty means: generate an admin token at start (see the node crate).
    pub tokens: Vec<TokenEntry>,
}

#[derive(Debug, Clone)]
pub struct WsConfig {
    pub ping_interval: Duration,
    pub stale_after: Duration,
    pub reap_after: Duration,
    pub auth_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self::from_raw(RawConfig::default(), "<defaults>").expect("the built-in defaults are valid")
    }
}

impl Config {
    /// Reads and checks a config file. Relative paths in it (the data
    /// dir, certificate files) are relative to the file's folder.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let mut config = Self::load_unchecked(path)?;
        let base = path.parent().unwrap_or(Path::new("."));
        if let Some(cluster) = &mut config.cluster {
            cluster.resolve_paths(base);
            cluster.check_files(&file)?;
        }
        if let Some(tls) = &mut config.http.tls {
            tls.resolve(base);
            tls.check(&file)?;
        }
        Ok(config)
    }

    /// Parses config text; `file` is only used in error messages.
    /// The data dir a config file names, found as `load` finds it but
    /// without checking the files the config names: the PTY keeper starts
    /// whatever certificate the node would refuse.
    pub fn data_dir_in(path: &Path) -> Result<PathBuf, ConfigError> {
        Ok(Self::load_unchecked(path)?.node.data_dir)
    }

    /// Reads and parses the file, the data dir made relative to its folder.
    fn load_unchecked(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            file: file.clone(),
            source,
        })?;
        let mut config = Self::parse(&text, &file)?;
        config.source = Some(path.to_path_buf());
        let base = path.parent().unwrap_or(Path::new("."));
        if config.node.data_dir.is_relative() && config.node.data_dir != default_data_dir() {
            config.node.data_dir = base.join(&config.node.data_dir);
        }
        Ok(config)
    }

    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            file: file.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        Self::from_raw(raw, file)
    }

    /// Applies environment overrides meant for tests and operators
    /// (`TERMESH_RING_BYTES`).
    pub fn apply_env(&mut self) -> Result<(), ConfigError> {
        if let Ok(value) = std::env::var(defaults::RING_BYTES_ENV) {
            let bytes = parse_size(&value).map_err(|reason| ConfigError::Value {
                file: "<environment>".into(),
                key: defaults::RING_BYTES_ENV.into(),
                value: format!("{value:?}"),
                reason,
            })?;
            self.session.ring_bytes =
                check_ring_bytes(bytes).map_err(|reason| ConfigError::Value {
                    file: "<environment>".into(),
                    key: defaults::RING_BYTES_ENV.into(),
                    value: format!("{value:?}"),
                    reason,
                })?;
        }
        Ok(())
    }

    fn from_raw(raw: RawConfig, file: &str) -> Result<Config, ConfigError> {
        let bad = |key: &str, value: String, reason: String| ConfigError::Value {
            file: file.to_string(),
            key: key.to_string(),
            value,
            reason,
        };
        let name = raw
            .node
            .name
            .unwrap_or_else(|| defaults::NODE_NAME.to_string());
        check_name(&name).map_err(|r| bad("node.name", format!("{name:?}"), r))?;
        let data_dir = match raw.node.data_dir {
            Some(dir) if dir.as_os_str().is_empty() => {
                return Err(bad(
                    "node.data_dir",
                    "\"\"".into(),
                    "must not be empty".into(),
                ))
            }
            Some(dir) => dir,
            None => default_data_dir(),
        };
        let http = http::parse(raw.http, file)?;
        let watchdog = WatchdogConfig {
            tick: positive(
                file,
                "watchdog.tick",
                &raw.watchdog.tick,
                defaults::WATCHDOG_TICK,
                Duration::from_secs(10),
            )?,
            psi_path: match &raw.watchdog.psi_path {
                None => Some(PathBuf::from(defaults::PSI_PATH)),
                Some(p) if p.as_os_str().is_empty() => None,
                Some(p) => Some(p.clone()),
            },
        };

        let tokens = parse_tokens(raw.auth.tokens, file)?;

        let session = session::parse(raw.session, file)?;

        let ws = parse_ws(raw.ws, file)?;

        let cluster = match raw.cluster {
            Some(c) => Some(cluster::parse(c, &name, file)?),
            None => None,
        };
        let store = store::parse(raw.store, file)?;
        let agents = agents::parse(raw.agents, file)?;
        let notify = notify::parse(raw.notify, file)?;

        Ok(Config {
            cluster,
            store,
            agents,
            notify,
            source: None,
            node: NodeConfig {
                name,
                data_dir,
                keeper: raw.node.keeper.unwrap_or(true),
            },
            http,
            auth: AuthConfig { tokens },
            session,
            ws,
            watchdog,
        })
    }
}

/// `[[auth.tokens]]`: each hash and role checked.
fn parse_tokens(raw: Vec<RawToken>, file: &str) -> Result<Vec<TokenEntry>, ConfigError> {
    let bad = |key: String, value: String, reason: String| ConfigError::Value {
        file: file.to_string(),
        key,
        value,
        reason,
    };
    let mut tokens = Vec::new();
    for (i, token) in raw.into_iter().enumerate() {
        let key = |field: &str| format!("auth.tokens[{i}].{field}");
        let hash = parse_token_hash(&token.hash)
            .map_err(|r| bad(key("hash"), format!("{:?}", token.hash), r))?;
        let role = Role::parse(&token.role).ok_or_else(|| {
            bad(
                key("role"),
                format!("{:?}", token.role),
                "must be \"viewer\", \"operator\" or \"admin\"".into(),
            )
        })?;
        tokens.push(TokenEntry {
            name: token.name,
            hash,
            role,
        });
    }
    Ok(tokens)
}

/// `[ws]`: every duration more than zero and at most a day.
fn parse_ws(w: RawWs, file: &str) -> Result<WsConfig, ConfigError> {
    let dur = |key, value, default| positive(file, key, value, default, DAY);
    Ok(WsConfig {
        ping_interval: dur(
            "ws.ping_interval",
            &w.ping_interval,
            defaults::PING_INTERVAL,
        )?,
        stale_after: dur("ws.stale_after", &w.stale_after, defaults::STALE_AFTER)?,
        reap_after: dur("ws.reap_after", &w.reap_after, defaults::REAP_AFTER)?,
        auth_timeout: dur("ws.auth_timeout", &w.auth_timeout, defaults::AUTH_TIMEOUT)?,
    })
}

/// The bound of the durations that need no more (a timer, a keepalive).
pub(crate) const DAY: Duration = Duration::from_secs(86_400);

/// Node names travel in certificates and URLs: keep them plain.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err("must be 1 to 64 characters of A-Z, a-z, 0-9, '-', '_', '.'".into())
    }
}

pub(crate) fn check_ring_bytes(bytes: u64) -> Result<usize, String> {
    if (4096..=(1u64 << 30)).contains(&bytes) {
        Ok(bytes as usize)
    } else {
        Err("must be 4KiB to 1GiB".into())
    }
}

/// `$XDG_DATA_HOME/termesh`, else `~/.local/share/termesh`, else `./termesh-data`.
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("termesh");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/share/termesh"),
        None => PathBuf::from("termesh-data"),
    }
}

/// `$SHELL` if set, else `/bin/sh`.
pub fn default_shell() -> Vec<String> {
    let shell = std::env::var("SHELL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "/bin/sh".into());
    vec![shell]
}

pub(crate) fn size_or(value: &Option<SizeValue>, default: u64) -> Result<u64, String> {
    match value {
        None => Ok(default),
        Some(SizeValue::Int(n)) => {
            u64::try_from(*n).map_err(|_| "must not be negative".to_string())
        }
        Some(SizeValue::Text(t)) => parse_size(t),
    }
}

pub(crate) fn duration_or(value: &Option<String>, default: Duration) -> Result<Duration, String> {
    value.as_deref().map_or(Ok(default), parse_duration)
}

/// `value` (`default` when absent), more than zero and at most `max`.
pub(crate) fn positive(
    file: &str,
    key: &str,
    value: &Option<String>,
    default: Duration,
    max: Duration,
) -> Result<Duration, ConfigError> {
    duration_or(value, default)
        .and_then(|d| {
            if d.is_zero() || d > max {
                Err(format!(
                    "must be more than zero and at most {}s",
                    max.as_secs()
                ))
            } else {
                Ok(d)
            }
        })
        .map_err(|reason| ConfigError::Value {
            file: file.to_string(),
            key: key.to_string(),
            value: format!("{value:?}"),
            reason,
        })
}

pub(crate) fn show(value: &Option<SizeValue>) -> String {
    match value {
        None => "(default)".into(),
        Some(SizeValue::Int(n)) => n.to_string(),
        Some(SizeValue::Text(t)) => format!("{t:?}"),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    node: RawNode,
    #[serde(default)]
    http: http::RawHttp,
    #[serde(default)]
    auth: RawAuth,
    #[serde(default)]
    session: session::RawSession,
    #[serde(default)]
    ws: RawWs,
    #[serde(default)]
    watchdog: RawWatchdog,
    #[serde(default)]
    store: store::RawStore,
    cluster: Option<cluster::RawCluster>,
    #[serde(default)]
    agents: Vec<agents::RawAgent>,
    #[serde(default)]
    notify: Vec<notify::RawNotify>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: Option<String>,
    data_dir: Option<PathBuf>,
    keeper: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWatchdog {
    tick: Option<String>,
    psi_path: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    #[serde(default)]
    tokens: Vec<RawToken>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    name: Option<String>,
    hash: String,
    role: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWs {
    ping_interval: Option<String>,
    stale_after: Option<String>,
    reap_after: Option<String>,
    auth_timeout: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum SizeValue {
    Int(i64),
    Text(String),
}

#[cfg(test)]
mod tests;
