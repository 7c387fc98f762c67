//! The `[store]` section: whether the node persists (sled, in the data
//! dir) and what the vacuum keeps.

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
    /// Events older than this are dropped (default 7 days)...
    pub event_age: Duration,
    /// ...and beyond this many per session (default 2,000).
    pub events: usize,
    /// How often the vacuum runs (default 1 hour).
    pub vacuum_every: Duration,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            enabled: true,
            output_bytes: 64 << 20,
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
        event_age,
        events,
        vacuum_every,
    })
}
