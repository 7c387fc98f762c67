//! The output log's one cache: sealed segments' block indexes, bounded by
//! bytes, least recently used out first. Frames themselves are never
//! cached by the node: the kernel's page cache holds recent blocks, and it
//! gives them back under memory pressure, which a cache of ours would not.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::format::IndexEntry;
use crate::metrics::Metrics;

/// Bytes of index the cache holds, at most (an 8 MiB segment's index is
/// about 3 KiB: this is about 1,300 segments, 10 GiB of output).
pub const INDEX_CACHE_BYTES: u64 = 4 << 20;

#[derive(Debug)]
pub struct IndexCache {
    inner: Mutex<Inner>,
    /// `log_cache_bytes`: what it holds, for `/metrics`.
    metrics: Arc<Metrics>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Path -> (the segment length the index describes, entries, last use).
    map: HashMap<PathBuf, (u64, Arc<Vec<IndexEntry>>, u64)>,
    bytes: u64,
    tick: u64,
}

fn size(entries: &[IndexEntry]) -> u64 {
    (std::mem::size_of_val(entries) + 128) as u64
}

impl IndexCache {
    pub fn new(metrics: Arc<Metrics>) -> IndexCache {
        IndexCache {
            inner: Mutex::default(),
            metrics,
        }
    }

    /// The index of the segment at `path` when it describes `len` bytes.
    pub fn get(&self, path: &PathBuf, len: u64) -> Option<Arc<Vec<IndexEntry>>> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.tick += 1;
        let tick = inner.tick;
        let (covered, entries, used) = inner.map.get_mut(path)?;
        if *covered != len {
            return None;
        }
        *used = tick;
        Some(entries.clone())
    }

    /// Keeps `entries` for `path`, dropping the least recently used past
    /// the bound; answers them shared.
    pub fn put(&self, path: PathBuf, len: u64, entries: Vec<IndexEntry>) -> Arc<Vec<IndexEntry>> {
        let entries = Arc::new(entries);
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.tick += 1;
        let tick = inner.tick;
        let added = size(&entries);
        if let Some((_, old, _)) = inner.map.insert(path, (len, entries.clone(), tick)) {
            inner.bytes -= size(&old);
        }
        inner.bytes += added;
        while inner.bytes > INDEX_CACHE_BYTES && inner.map.len() > 1 {
            let Some(oldest) = inner
                .map
                .iter()
                .min_by_key(|(_, (_, _, used))| *used)
                .map(|(p, _)| p.clone())
            else {
                break;
            };
            if let Some((_, gone, _)) = inner.map.remove(&oldest) {
                inner.bytes -= size(&gone);
            }
        }
        self.metrics
            .log_cache_bytes
            .store(inner.bytes, Ordering::Relaxed);
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_stays_under_its_bound_and_keeps_what_is_used() {
        let metrics = Arc::new(Metrics::default());
        let cache = IndexCache::new(metrics.clone());
        let entries = |n: u64| {
            (0..n)
                .map(|i| IndexEntry {
                    seq: i,
                    at_ms: 0,
                    offset: i,
                })
                .collect::<Vec<_>>()
        };
        let big = INDEX_CACHE_BYTES / 24 / 4;
        cache.put("keep".into(), 1, entries(big));
        for i in 0..20 {
            cache.put(format!("seg{i}").into(), 1, entries(big));
            // Used between the others: never the least recent.
            assert!(cache.get(&"keep".into(), 1).is_some(), "round {i}");
        }
        assert!(metrics.log_cache_bytes.load(Ordering::Relaxed) <= INDEX_CACHE_BYTES);
        assert!(cache.get(&"seg0".into(), 1).is_none(), "the oldest went");
        assert!(
            cache.get(&"keep".into(), 2).is_none(),
            "another length: stale"
        );
    }
}
