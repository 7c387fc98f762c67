//! `http.allowed_origins`: which web pages may open a WebSocket to the
//! node. A browser sends `Origin` on every WebSocket upgrade; programs
//! (the CLI, scripts) send none. An upgrade is allowed when it has no
//! `Origin`, when its `Origin` is the node's own address as the browser
//! reached it (the console the node serves), or when the origin is listed
//! (`"*"` lists every origin). Anything else is refused, so a page on
//! another site cannot drive sessions with a token the browser holds.

use crate::ConfigError;

/// Most origins a config may list.
pub const MAX_ORIGINS: usize = 64;

/// Checks the listed origins: `"*"`, or `scheme://host[:port]` with
/// scheme `http` or `https` and nothing after the host.
pub(crate) fn parse(raw: Option<Vec<String>>, file: &str) -> Result<Vec<String>, ConfigError> {
    let list = raw.unwrap_or_default();
    let bad = |value: String, reason: &str| ConfigError::Value {
        file: file.to_string(),
        key: "http.allowed_origins".into(),
        value,
        reason: reason.into(),
    };
    if list.len() > MAX_ORIGINS {
        return Err(bad(format!("{} entries", list.len()), "at most 64 origins"));
    }
    list.into_iter()
        .map(|o| {
            let norm = o.trim_end_matches('/').to_ascii_lowercase();
            if norm == "*" || well_formed(&norm) {
                Ok(norm)
            } else {
                Err(bad(
                    format!("{o:?}"),
                    "must be \"*\" or scheme://host[:port], e.g. \"https://console.example.com\"",
                ))
            }
        })
        .collect()
}

fn well_formed(origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    let host = rest.trim_end_matches('/');
    matches!(scheme, "http" | "https")
        && !host.is_empty()
        && host.len() <= 255
        && !host.contains(['/', '?', '#', '@', ' '])
}

/// Whether an upgrade with `origin` (the header, if sent) to a node the
/// browser reached as `host` (the Host header) is allowed.
pub fn allowed(origin: Option<&str>, host: Option<&str>, list: &[String]) -> bool {
    let Some(origin) = origin else {
        return true;
    };
    let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
    if let (Some(host), Some((_, rest))) = (host, origin.split_once("://")) {
        if rest == host.trim().to_ascii_lowercase() {
            return true;
        }
    }
    list.iter().any(|o| o == "*" || *o == origin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_origin_listed_or_none_pass_others_do_not() {
        let list = vec!["https://console.example.com".to_string()];
        let host = Some("10.0.0.5:7420");
        assert!(allowed(None, host, &list), "the CLI sends no Origin");
        assert!(allowed(Some("http://10.0.0.5:7420"), host, &list));
        assert!(allowed(Some("https://10.0.0.5:7420"), host, &list));
        assert!(allowed(Some("https://Console.Example.com/"), host, &list));
        assert!(!allowed(Some("https://evil.example"), host, &list));
        assert!(!allowed(Some("null"), host, &list));
        assert!(!allowed(Some("http://10.0.0.5:7421"), host, &list));
        assert!(!allowed(Some("http://10.0.0.5:7420"), None, &[]));
        assert!(allowed(Some("https://anything"), host, &["*".to_string()]));
    }

    #[test]
    fn listed_origins_are_checked() {
        let ok = parse(
            Some(vec!["*".into(), "HTTPS://A.example:8443/".into()]),
            "f",
        )
        .unwrap();
        assert_eq!(ok, ["*", "https://a.example:8443"]);
        for bad in [
            "a.example",
            "ftp://a",
            "https://a/path",
            "https://",
            "https://u@a",
        ] {
            let e = parse(Some(vec![bad.into()]), "f").unwrap_err().to_string();
            assert!(e.contains("http.allowed_origins"), "{e}");
        }
    }
}
