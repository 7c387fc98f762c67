//! The `[store]` section: whether the node persists (the output log and
//! sled, in the data dir), what each session keeps, the node's budget for
//! all of it, and what the vacuum keeps.

use std::time::Duration;

use serde::Deserialize;

use crate::units::{parse_duration, parse_size};
use crate::ConfigError;

#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Off only by `--no-store` or `enabled = false`: nothing survives a
    /// restart then.
    pub enabled: bool,
    /// Output kept per session, oldest dropped first (default 64 MiB).
    pub output_bytes: u64,
    /// Output kept by the whole node (default: half the data dir's file
    /// system): past it the oldest output of ended sessions goes first,
    /// then the oldest of running ones.
    pub max_bytes: MaxBytes,
    /// Events older than this are dropped (default 7 days)...
    pub event_age: Duration,
    /// ...and beyond this many per session (default 2,000).
    pub events: usize,
    /// How often the vacuum runs (default 1 hour).
    pub vacuum_every: Duration,
}

/// The node's budget for stored output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxBytes {
    Bytes(u64),
    /// A share of the data dir's file system, in percent (1 to 100).
    Share(u8),
}

/// `store.max_bytes` by default: half the file system.
pub const DEFAULT_SHARE: u8 = 50;

impl MaxBytes {
    /// The budget in bytes, for a file system of `fs_bytes`.
    pub fn resolve(self, fs_bytes: u64) -> u64 {
        match self {
            MaxBytes::Bytes(n) => n,
            MaxBytes::Share(p) => fs_bytes / 100 * u64::from(p),
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            enabled: true,
            output_bytes: 64 << 20,
            max_bytes: MaxBytes::Share(DEFAULT_SHARE),
            event_age: Duration::from_secs(7 * 86_400),
            events: 2_000,
            vacuum_every: Duration::from_secs(3_600),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    enabled: Option<bool>,
    output_bytes: Option<crate::SizeValue>,
    max_bytes: Option<crate::SizeValue>,
    event_age: Option<String>,
    events: Option<i64>,
    vacuum_every: Option<String>,
}

pub(crate) fn parse(raw: RawStore, file: &str) -> Result<StoreConfig, ConfigError> {
    let bad = |key: &str, value: String, reason: String| ConfigError::Value {
        file: file.to_string(),
        key: key.to_string(),
        value,
        reason,
    };
    let d = StoreConfig::default();
    let output_bytes = match &raw.output_bytes {
        None => d.output_bytes,
        Some(crate::SizeValue::Int(n)) => u64::try_from(*n).unwrap_or(0),
        Some(crate::SizeValue::Text(t)) => {
            parse_size(t).map_err(|r| bad("store.output_bytes", format!("{t:?}"), r))?
        }
    };
    if !(64 << 10..=1 << 40).contains(&output_bytes) {
        return Err(bad(
            "store.output_bytes",
            output_bytes.to_string(),
            "must be 64KiB to 1TiB".into(),
        ));
    }
    let max_bytes = match &raw.max_bytes {
        None => d.max_bytes,
        Some(crate::SizeValue::Int(n)) => MaxBytes::Bytes(u64::try_from(*n).unwrap_or(0)),
        Some(crate::SizeValue::Text(t)) => match t.trim().strip_suffix('%') {
            Some(p) => match p.trim().parse::<u8>() {
                Ok(p) if (1..=100).contains(&p) => MaxBytes::Share(p),
                _ => {
                    return Err(bad(
                        "store.max_bytes",
                        format!("{t:?}"),
                        "a share must be 1% to 100% of the file system".into(),
                    ))
                }
            },
            None => MaxBytes::Bytes(
                parse_size(t).map_err(|r| bad("store.max_bytes", format!("{t:?}"), r))?,
            ),
        },
    };
    if let MaxBytes::Bytes(n) = max_bytes {
        if n < 1 << 20 {
            return Err(bad(
                "store.max_bytes",
                n.to_string(),
                "must be at least 1MiB (or a share such as \"50%\")".into(),
            ));
        }
    }
    let dur = |key: &str, value: &Option<String>, default: Duration, min: Duration| {
        let d = value
            .as_deref()
            .map_or(Ok(default), parse_duration)
            .map_err(|r| bad(key, format!("{value:?}"), r))?;
        if d < min {
            return Err(bad(
                key,
                format!("{value:?}"),
                format!("must be at least {min:?}"),
            ));
        }
        Ok(d)
    };
    let event_age = dur(
        "store.event_age",
        &raw.event_age,
        d.event_age,
        Duration::from_secs(60),
    )?;
    let vacuum_every = dur(
        "store.vacuum_every",
        &raw.vacuum_every,
        d.vacuum_every,
        Duration::from_secs(1),
    )?;
    let events = match raw.events {
        None => d.events,
        Some(n) if (1..=1_000_000).contains(&n) => n as usize,
        Some(n) => {
            return Err(bad(
                "store.events",
                n.to_string(),
                "must be 1 to 1000000".into(),
            ))
        }
    };
    Ok(StoreConfig {
        enabled: raw.enabled.unwrap_or(true),
        output_bytes,
        max_bytes,
        event_age,
        events,
        vacuum_every,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn max_bytes_is_a_size_or_a_share_of_the_file_system() {
        let parse = |v: &str| Config::parse(&format!("[store]\nmax_bytes = {v}\n"), "t.toml");
        let max = |v: &str| parse(v).unwrap().store.max_bytes;
        assert_eq!(
            Config::parse("", "t").unwrap().store.max_bytes,
            MaxBytes::Share(50)
        );
        assert_eq!(max("\"20GiB\""), MaxBytes::Bytes(20 << 30));
        assert_eq!(max("\"25%\""), MaxBytes::Share(25));
        assert_eq!(max("1073741824"), MaxBytes::Bytes(1 << 30));
        assert_eq!(MaxBytes::Share(25).resolve(400), 100);
        for bad in [
            "\"0%\"",
            "\"101%\"",
            "\"x%\"",
            "\"12 parsecs\"",
            "1000",
            "-5",
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(
                e.contains("store.max_bytes") && e.contains("t.toml"),
                "{bad}: {e}"
            );
        }
    }
}
