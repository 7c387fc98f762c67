//! The `[http]` section: where the node listens, the kernel's liveness of
//! client sockets, which web pages may open WebSockets, HTTPS, and the
//! bounds on connections (node-wide, per source address, and the time a
//! request head may take).

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use crate::{defaults, origins, positive, tls, ConfigError, DAY};

#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub listen: SocketAddr,
    /// Kernel liveness of client sockets, set on the listening socket
    /// (Linux copies it to every accepted one).
    pub keepalive_idle: Duration,
    pub keepalive_interval: Duration,
    pub keepalive_probes: u32,
    pub user_timeout: Duration,
    /// Web pages (other than the node's own) that may open WebSockets.
    pub allowed_origins: Vec<String>,
    /// HTTPS: the listener's certificate chain and key (`None`: plain HTTP).
    pub tls: Option<tls::TlsFiles>,
    /// TCP connections open at once (past it the node stops accepting
    /// until one closes), and long-lived streams (WebSockets, event
    /// streams) from one source address (past it: 503 `unavailable`).
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    /// A request head must have arrived this long after the connection
    /// opened (slow senders are closed).
    pub request_head_timeout: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttp {
    listen: Option<String>,
    keepalive_idle: Option<String>,
    keepalive_interval: Option<String>,
    keepalive_probes: Option<i64>,
    user_timeout: Option<String>,
    allowed_origins: Option<Vec<String>>,
    tls_cert: Option<std::path::PathBuf>,
    tls_key: Option<std::path::PathBuf>,
    max_connections: Option<i64>,
    max_connections_per_address: Option<i64>,
    request_head_timeout: Option<String>,
}

pub(crate) fn parse(h: RawHttp, file: &str) -> Result<HttpConfig, ConfigError> {
    let bad = |key: &str, value: String, reason: String| ConfigError::Value {
        file: file.to_string(),
        key: key.to_string(),
        value,
        reason,
    };
    let listen_text = h
        .listen
        .clone()
        .unwrap_or_else(|| defaults::HTTP_LISTEN.to_string());
    let listen: SocketAddr = listen_text.parse().map_err(|_| {
        bad(
            "http.listen",
            format!("{listen_text:?}"),
            "not an address:port such as \"127.0.0.1:7420\"".into(),
        )
    })?;
    let count = |key: &str, value: Option<i64>, default: usize, max: i64| match value {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n as usize),
        Some(n) => Err(bad(key, n.to_string(), format!("must be 1 to {max}"))),
    };
    let max_connections = count(
        "http.max_connections",
        h.max_connections,
        defaults::MAX_CONNECTIONS,
        1 << 20,
    )?;
    let max_connections_per_address = count(
        "http.max_connections_per_address",
        h.max_connections_per_address,
        defaults::MAX_CONNECTIONS_PER_ADDRESS,
        1 << 20,
    )?;
    Ok(HttpConfig {
        listen,
        keepalive_idle: positive(
            file,
            "http.keepalive_idle",
            &h.keepalive_idle,
            defaults::KEEPALIVE_IDLE,
            DAY,
        )?,
        keepalive_interval: positive(
            file,
            "http.keepalive_interval",
            &h.keepalive_interval,
            defaults::KEEPALIVE_INTERVAL,
            DAY,
        )?,
        keepalive_probes: count(
            "http.keepalive_probes",
            h.keepalive_probes,
            defaults::KEEPALIVE_PROBES as usize,
            127,
        )? as u32,
        user_timeout: positive(
            file,
            "http.user_timeout",
            &h.user_timeout,
            defaults::USER_TIMEOUT,
            DAY,
        )?,
        allowed_origins: origins::parse(h.allowed_origins, file)?,
        tls: tls::parse(h.tls_cert, h.tls_key, file)?,
        max_connections,
        max_connections_per_address,
        request_head_timeout: positive(
            file,
            "http.request_head_timeout",
            &h.request_head_timeout,
            defaults::REQUEST_HEAD_TIMEOUT,
            Duration::from_secs(300),
        )?,
    })
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn connection_bounds_have_defaults_and_are_checked() {
        let c = Config::parse("", "f").unwrap();
        assert_eq!(c.http.max_connections, 4_096);
        assert_eq!(c.http.max_connections_per_address, 256);
        assert_eq!(c.http.request_head_timeout.as_secs(), 5);
        let c = Config::parse(
            "[http]\nmax_connections = 100\nmax_connections_per_address = 3\n\
             request_head_timeout = \"2s\"\n",
            "f",
        )
        .unwrap();
        assert_eq!(
            (c.http.max_connections, c.http.max_connections_per_address),
            (100, 3)
        );
        assert_eq!(c.http.request_head_timeout.as_secs(), 2);
        for bad in [
            "max_connections = 0",
            "max_connections_per_address = -1",
            "request_head_timeout = \"0s\"",
        ] {
            let e = Config::parse(&format!("[http]\n{bad}\n"), "f")
                .unwrap_err()
                .to_string();
            let key = bad.split(' ').next().unwrap();
            assert!(e.contains(&format!("http.{key}")), "{e}");
        }
    }
}
