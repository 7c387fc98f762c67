//! Where the keys of a phase waited, hop by hop: with `TERMESH_HOP_LOG`
//! set, the nodes log when a key passes each point
//! (`termesh_transport::hops`); this lines those up with the bench's own
//! send and receive times and prints the median key's hops and the mean
//! of each hop over the slowest 5% of keys.

use std::collections::HashMap;

use termesh_transport::hops::{ENV, POINTS};

/// A key as the bench saw it: sent and echoed, µs of CLOCK_MONOTONIC.
pub struct Stamp {
    pub key: u64,
    pub sent: u64,
    pub echoed: u64,
}

/// Whether the nodes log hops in this run.
pub fn on() -> bool {
    std::env::var_os(ENV).is_some()
}

/// Prints the breakdown of `stamps` from the nodes' logs.
pub fn report(stamps: &[Stamp]) {
    let Some(lines) = read_logs() else {
        println!("    (no hop logs found beside {ENV})");
        return;
    };
    let mut keys: Vec<(u64, Vec<(usize, u64)>)> = stamps
        .iter()
        .map(|s| {
            // The first pass of each point within the key's own time.
            let mut at: Vec<(usize, u64)> = Vec::new();
            for &(point, t) in lines.get(&s.key).into_iter().flatten() {
                if (s.sent..=s.echoed).contains(&t) && !at.iter().any(|(p, _)| *p == point) {
                    at.push((point, t));
                }
            }
            at.sort();
            (s.echoed - s.sent, spans(s, &at))
        })
        .collect();
    if keys.is_empty() {
        return;
    }
    keys.sort_by_key(|(total, _)| *total);
    let (total, median) = &keys[keys.len() / 2];
    println!("    median key {}: {}", ms(*total), show(median));
    let slow = &keys[keys.len() - (keys.len() / 20).max(1)..];
    let mut sum: HashMap<usize, u64> = HashMap::new();
    for (_, spans) in slow {
        for &(point, us) in spans {
            *sum.entry(point).or_default() += us;
        }
    }
    let mut mean: Vec<(usize, u64)> = sum
        .into_iter()
        .map(|(p, us)| (p, us / slow.len() as u64))
        .collect();
    mean.sort();
    let total = slow.iter().map(|(t, _)| t).sum::<u64>() / slow.len() as u64;
    println!(
        "    slowest {} keys, mean {}: {}",
        slow.len(),
        ms(total),
        show(&mean)
    );
}

/// Each point's wait since the one before (the last entry, past every
/// point: the client's).
fn spans(stamp: &Stamp, at: &[(usize, u64)]) -> Vec<(usize, u64)> {
    let mut prev = stamp.sent;
    let mut out: Vec<(usize, u64)> = at
        .iter()
        .map(|&(point, t)| {
            let span = (point, t - prev);
            prev = t;
            span
        })
        .collect();
    out.push((POINTS.len(), stamp.echoed - prev));
    out
}

fn show(spans: &[(usize, u64)]) -> String {
    spans
        .iter()
        .map(|&(p, us)| format!("{} +{}", POINTS.get(p).unwrap_or(&"client"), ms(us)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn ms(us: u64) -> String {
    format!("{:.2}", us as f64 / 1000.0)
}

/// Every node's lines, by key: (point's index, µs).
fn read_logs() -> Option<HashMap<u64, Vec<(usize, u64)>>> {
    let base = std::path::PathBuf::from(std::env::var_os(ENV)?);
    let dir = base.parent()?;
    let prefix = format!("{}.", base.file_name()?.to_str()?);
    let mut lines: HashMap<u64, Vec<(usize, u64)>> = HashMap::new();
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).ok()?;
        for line in text.lines() {
            let mut words = line.split(' ');
            let (Some(point), Some(key), Some(t)) = (words.next(), words.next(), words.next())
            else {
                continue;
            };
            let Some(point) = POINTS.iter().position(|p| *p == point) else {
                continue;
            };
            if let (Ok(key), Ok(t)) = (key.parse(), t.parse()) {
                lines.entry(key).or_default().push((point, t));
            }
        }
    }
    Some(lines)
}
