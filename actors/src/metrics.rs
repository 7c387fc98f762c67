//! Node-wide counters and gauges, read by `/metrics`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Metrics {
    pub sessions: AtomicI64,
    pub connections: AtomicI64,
    pub subscribers: AtomicI64,
    /// Mirrors of other nodes' sessions on this node.
    pub mirrors: AtomicI64,
    /// Ended sessions whose ring was read back from the log (`session::cold`).
    pub ended_warm: AtomicI64,
    pub bytes_out: AtomicU64,
    pub frames_out: AtomicU64,
    pub resyncs: AtomicU64,
    pub snapshots: AtomicU64,
    /// Output fed to screen models by passes someone waited for, and by
    /// background warming passes (see `session::warmth`).
    pub screen_request_bytes: AtomicU64,
    pub screen_warm_bytes: AtomicU64,
    /// Screen models dropped for idleness (their last snapshot kept).
    pub screen_models_dropped: AtomicU64,
    pub stale_episodes: AtomicU64,
    /// Connections stale right now.
    pub stale_now: AtomicI64,
    /// Connections closed for silence (only ever ones without subscriptions).
    pub reaps: AtomicU64,
    pub bad_frames: AtomicU64,
    /// Output that could not be stored (a failed write), in bytes.
    pub store_lost_bytes: AtomicU64,
    /// The store's size on disk, as of its last vacuum (or start).
    pub store_bytes: AtomicU64,
    /// Flushes to disk (fsyncs) the store has made.
    pub store_flushes: AtomicU64,
    /// Why the store's last write failed, while it fails (`/healthz` says
    /// so); cleared by the next write that works.
    pub store_error: std::sync::Mutex<Option<String>>,
    /// The output log's segments on disk, in bytes.
    pub log_bytes: AtomicU64,
    /// Output the log deleted for retention (per session and node-wide).
    pub log_dropped_bytes: AtomicU64,
    /// Group syncs of the output log that wrote something.
    pub log_syncs: AtomicU64,
    /// Segment files the log holds open (bounded: `log::session::MAX_OPEN`).
    pub log_open_files: AtomicU64,
    /// Bytes in the log's index cache (bounded: `log::cache::INDEX_CACHE_BYTES`).
    pub log_cache_bytes: AtomicU64,
    /// Why the output log's last write failed, while writes fail.
    pub log_error: std::sync::Mutex<Option<String>>,
}

impl Metrics {
    /// The store's state after a write: `Err` marks it failing.
    pub fn store_wrote(&self, result: Result<(), String>) {
        let mut e = self.store_error.lock().unwrap_or_else(|p| p.into_inner());
        *e = result.err();
    }

    /// Why the store fails, while it does (its records, or its output).
    pub fn store_failure(&self) -> Option<String> {
        let records = self
            .store_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let output = self
            .log_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .map(|e| format!("output is not stored: {e}"));
        match (records, output) {
            (Some(r), Some(o)) => Some(format!("{r}; {o}")),
            (r, o) => r.or(o),
        }
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn gauge(gauge: &AtomicI64, delta: i64) {
        gauge.fetch_add(delta, Ordering::Relaxed);
    }

    /// Prometheus text exposition; `stall` is the node's credited host stall.
    pub fn render(&self, node: &str, stall: std::time::Duration) -> String {
        let g = |v: &AtomicI64| v.load(Ordering::Relaxed);
        let c = |v: &AtomicU64| v.load(Ordering::Relaxed);
        let rows: [(&str, &str, &str, String); 25] = [
            (
                "termesh_sessions",
                "gauge",
                "Sessions on this node.",
                g(&self.sessions).to_string(),
            ),
            (
                "termesh_mirrors",
                "gauge",
                "Mirrors of other nodes' sessions on this node.",
                g(&self.mirrors).to_string(),
            ),
            (
                "termesh_sessions_ended_warm",
                "gauge",
                "Ended sessions holding their ring in memory, read back from the output log.",
                g(&self.ended_warm).to_string(),
            ),
            (
                "termesh_connections",
                "gauge",
                "Open client connections.",
                g(&self.connections).to_string(),
            ),
            (
                "termesh_subscribers",
                "gauge",
                "Live output subscriptions.",
                g(&self.subscribers).to_string(),
            ),
            (
                "termesh_bytes_out_total",
                "counter",
                "Output bytes sent to subscribers.",
                c(&self.bytes_out).to_string(),
            ),
            (
                "termesh_frames_out_total",
                "counter",
                "Output frames sent to subscribers.",
                c(&self.frames_out).to_string(),
            ),
            (
                "termesh_resyncs_total",
                "counter",
                "resync_required sent.",
                c(&self.resyncs).to_string(),
            ),
            (
                "termesh_snapshots_total",
                "counter",
                "Snapshots computed.",
                c(&self.snapshots).to_string(),
            ),
            (
                "termesh_screen_request_bytes_total",
                "counter",
                "Output emulated by screen passes a request waited for.",
                c(&self.screen_request_bytes).to_string(),
            ),
            (
                "termesh_screen_warm_bytes_total",
                "counter",
                "Output emulated in the background to keep screen models warm.",
                c(&self.screen_warm_bytes).to_string(),
            ),
            (
                "termesh_screen_models_dropped_total",
                "counter",
                "Screen models of idle sessions dropped (their last snapshot kept).",
                c(&self.screen_models_dropped).to_string(),
            ),
            (
                "termesh_stale_episodes_total",
                "counter",
                "Connections marked stale (late pongs).",
                c(&self.stale_episodes).to_string(),
            ),
            (
                "termesh_stale_connections",
                "gauge",
                "Connections stale now (late pongs, host stall discounted).",
                g(&self.stale_now).to_string(),
            ),
            (
                "termesh_reaps_total",
                "counter",
                "Silent connections without a subscription closed.",
                c(&self.reaps).to_string(),
            ),
            (
                "termesh_host_stall_seconds_total",
                "counter",
                "Time this node itself was stalled (timer lateness or memory pressure).",
                format!("{:.3}", stall.as_secs_f64()),
            ),
            (
                "termesh_bad_frames_total",
                "counter",
                "Inbound frames refused.",
                c(&self.bad_frames).to_string(),
            ),
            (
                "termesh_store_lost_bytes_total",
                "counter",
                "Output that could not be stored (failed writes).",
                c(&self.store_lost_bytes).to_string(),
            ),
            (
                "termesh_store_flushes_total",
                "counter",
                "Flushes to disk the store made (requests for durability share one).",
                c(&self.store_flushes).to_string(),
            ),
            (
                "termesh_store_bytes",
                "gauge",
                "The store's size on disk: records, events and the output log.",
                (c(&self.store_bytes) + c(&self.log_bytes)).to_string(),
            ),
            (
                "termesh_store_output_bytes",
                "gauge",
                "The output log's segments on disk.",
                c(&self.log_bytes).to_string(),
            ),
            (
                "termesh_store_output_dropped_bytes_total",
                "counter",
                "Output deleted by retention (store.output_bytes, store.max_bytes).",
                c(&self.log_dropped_bytes).to_string(),
            ),
            (
                "termesh_store_output_syncs_total",
                "counter",
                "Group syncs of the output log to disk.",
                c(&self.log_syncs).to_string(),
            ),
            (
                "termesh_store_output_open_files",
                "gauge",
                "Segment files held open for appending (at most 512).",
                c(&self.log_open_files).to_string(),
            ),
            (
                "termesh_store_output_cache_bytes",
                "gauge",
                "Memory in the output log's index cache (at most 4 MiB).",
                c(&self.log_cache_bytes).to_string(),
            ),
        ];
        let mut out = String::new();
        for (name, kind, help, value) in rows {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{node=\"{node}\"}} {value}\n"
            ));
        }
        out
    }
}
