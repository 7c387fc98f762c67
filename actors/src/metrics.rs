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
    /// Bulk output connections hold until their flight has room
    /// (`front::connection::lanes`).
    pub held_bytes: AtomicI64,
    /// Marks (pings behind output) clients answered, and connections
    /// whose client answered none (served within their windows alone).
    pub marks_answered: AtomicU64,
    pub pongless: AtomicU64,
    /// Sessions whose output is read on the bulk PTY thread now (their
    /// programs flood and are not interactive: `session::bulk`).
    pub bulk_readers: std::sync::Arc<AtomicI64>,
    /// Keystrokes and pastes queued for programs, and written to their
    /// terminals (the two differ by what is queued, or lost on the way).
    pub input_bytes: AtomicU64,
    pub input_written: std::sync::Arc<AtomicU64>,
    pub resyncs: AtomicU64,
    pub snapshots: AtomicU64,
    /// Changes of sessions' states (working, waiting, idle).
    pub state_changes: AtomicU64,
    /// Screens read for sessions' states (on the actor thread or off it).
    pub looks: AtomicU64,
    /// Notifications posted (`[[notify]]`), and those that failed for
    /// good or found their queue full.
    pub notify_sent: AtomicU64,
    pub notify_failed: AtomicU64,
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
        let mut out = String::new();
        let mut row = |name: &str, kind: &str, help: &str, value: String| {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{node=\"{node}\"}} {value}\n"
            ));
        };
        for (name, kind, help, value) in ROWS {
            row(name, kind, help, value(self));
        }
        row(
            "termesh_host_stall_seconds_total",
            "counter",
            "Time this node itself was stalled (timer lateness or memory pressure).",
            format!("{:.3}", stall.as_secs_f64()),
        );
        out
    }
}

/// `termesh_sessions_by_state`: running sessions by state, one series a
/// state (counted from the directory when scraped).
pub fn render_states(node: &str, counts: &[(termesh_transport::AgentState, u64)]) -> String {
    let mut out = String::from(
        "# HELP termesh_sessions_by_state Running sessions by state (waiting, working, idle).\n\
         # TYPE termesh_sessions_by_state gauge\n",
    );
    for (state, n) in counts {
        out.push_str(&format!(
            "termesh_sessions_by_state{{node=\"{node}\",state=\"{}\"}} {n}\n",
            state.as_str()
        ));
    }
    out
}

/// `termesh_waits_held`: `wait`s and `send`s held for a session's state
/// on this node now (at most `bells::MAX_WAITERS`).
pub fn render_waits(node: &str, held: usize) -> String {
    format!(
        "# HELP termesh_waits_held Waits (and sends held for another node's session) open on this node.\n\
         # TYPE termesh_waits_held gauge\n\
         termesh_waits_held{{node=\"{node}\"}} {held}\n"
    )
}

/// A row of the exposition: name, type, help, and its value read off the
/// metrics.
type Row = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Metrics) -> String,
);

fn g(v: &AtomicI64) -> String {
    v.load(Ordering::Relaxed).to_string()
}

fn c(v: &AtomicU64) -> String {
    v.load(Ordering::Relaxed).to_string()
}

/// Every metric the node exposes but the host stall (which the stall
/// clock holds).
const ROWS: &[Row] = &[
    ("termesh_sessions", "gauge", "Sessions on this node.", |m| {
        g(&m.sessions).to_string()
    }),
    (
        "termesh_mirrors",
        "gauge",
        "Mirrors of other nodes' sessions on this node.",
        |m| g(&m.mirrors),
    ),
    (
        "termesh_sessions_ended_warm",
        "gauge",
        "Ended sessions holding their ring in memory, read back from the output log.",
        |m| g(&m.ended_warm),
    ),
    (
        "termesh_connections",
        "gauge",
        "Open client connections.",
        |m| g(&m.connections),
    ),
    (
        "termesh_subscribers",
        "gauge",
        "Live output subscriptions.",
        |m| g(&m.subscribers),
    ),
    (
        "termesh_session_state_changes_total",
        "counter",
        "Changes of sessions' states (working, waiting, idle).",
        |m| c(&m.state_changes),
    ),
    (
        "termesh_state_looks_total",
        "counter",
        "Screens read to decide sessions' states.",
        |m| c(&m.looks),
    ),
    (
        "termesh_notify_sent_total",
        "counter",
        "Notifications posted to [[notify]] endpoints.",
        |m| c(&m.notify_sent),
    ),
    (
        "termesh_notify_failed_total",
        "counter",
        "Notifications that failed after their retries, or found their queue full.",
        |m| c(&m.notify_failed),
    ),
    (
        "termesh_bytes_out_total",
        "counter",
        "Output bytes sent to subscribers.",
        |m| c(&m.bytes_out),
    ),
    (
        "termesh_output_held_bytes",
        "gauge",
        "Bulk output connections hold back so interactive output goes first (bounded by the subscription windows).",
        |m| g(&m.held_bytes),
    ),
    (
        "termesh_bulk_sessions",
        "gauge",
        "Sessions whose output is read on the bulk PTY thread: their programs flood and are not interactive (not typed into in 10 s, or 256 KiB printed since the last key).",
        |m| g(&m.bulk_readers),
    ),
    (
        "termesh_input_bytes_total",
        "counter",
        "Input bytes (keys, pastes, send) queued for programs.",
        |m| c(&m.input_bytes),
    ),
    (
        "termesh_input_written_bytes_total",
        "counter",
        "Input bytes written to programs' terminals.",
        |m| c(&m.input_written),
    ),
    (
        "termesh_output_marks_answered_total",
        "counter",
        "Pings sent behind output that clients answered (each tells how much they have read).",
        |m| c(&m.marks_answered),
    ),
    (
        "termesh_pongless_connections_total",
        "counter",
        "Connections whose client answered no ping: their output is bounded by their windows alone.",
        |m| c(&m.pongless),
    ),
    (
        "termesh_frames_out_total",
        "counter",
        "Output frames sent to subscribers.",
        |m| c(&m.frames_out),
    ),
    (
        "termesh_resyncs_total",
        "counter",
        "resync_required sent.",
        |m| c(&m.resyncs),
    ),
    (
        "termesh_snapshots_total",
        "counter",
        "Snapshots computed.",
        |m| c(&m.snapshots),
    ),
    (
        "termesh_screen_request_bytes_total",
        "counter",
        "Output emulated by screen passes a request waited for.",
        |m| c(&m.screen_request_bytes),
    ),
    (
        "termesh_screen_warm_bytes_total",
        "counter",
        "Output emulated in the background to keep screen models warm.",
        |m| c(&m.screen_warm_bytes),
    ),
    (
        "termesh_screen_models_dropped_total",
        "counter",
        "Screen models of idle sessions dropped (their last snapshot kept).",
        |m| c(&m.screen_models_dropped),
    ),
    (
        "termesh_stale_episodes_total",
        "counter",
        "Connections marked stale (late pongs).",
        |m| c(&m.stale_episodes),
    ),
    (
        "termesh_stale_connections",
        "gauge",
        "Connections stale now (late pongs, host stall discounted).",
        |m| g(&m.stale_now),
    ),
    (
        "termesh_reaps_total",
        "counter",
        "Silent connections without a subscription closed.",
        |m| c(&m.reaps),
    ),
    (
        "termesh_bad_frames_total",
        "counter",
        "Inbound frames refused.",
        |m| c(&m.bad_frames),
    ),
    (
        "termesh_store_lost_bytes_total",
        "counter",
        "Output that could not be stored (failed writes).",
        |m| c(&m.store_lost_bytes),
    ),
    (
        "termesh_store_flushes_total",
        "counter",
        "Flushes to disk the store made (requests for durability share one).",
        |m| c(&m.store_flushes),
    ),
    (
        "termesh_store_bytes",
        "gauge",
        "The store's size on disk: records, events and the output log.",
        |m| {
            (m.store_bytes.load(Ordering::Relaxed) + m.log_bytes.load(Ordering::Relaxed))
                .to_string()
        },
    ),
    (
        "termesh_store_output_bytes",
        "gauge",
        "The output log's segments on disk.",
        |m| c(&m.log_bytes),
    ),
    (
        "termesh_store_output_dropped_bytes_total",
        "counter",
        "Output deleted by retention (store.output_bytes, store.max_bytes).",
        |m| c(&m.log_dropped_bytes),
    ),
    (
        "termesh_store_output_syncs_total",
        "counter",
        "Group syncs of the output log to disk.",
        |m| c(&m.log_syncs),
    ),
    (
        "termesh_store_output_open_files",
        "gauge",
        "Segment files held open for appending (at most 512).",
        |m| c(&m.log_open_files),
    ),
    (
        "termesh_store_output_cache_bytes",
        "gauge",
        "Memory in the output log's index cache (at most 4 MiB).",
        |m| c(&m.log_cache_bytes),
    ),
];

#[cfg(test)]
mod render_tests {
    use super::*;

    #[test]
    fn every_metric_is_exposed_once_with_its_help_type_and_value() {
        let m = Metrics::default();
        Metrics::add(&m.bytes_out, 42);
        Metrics::gauge(&m.sessions, 3);
        let text = m.render("n1", std::time::Duration::from_millis(1500));
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE")).collect();
        assert_eq!(types.len(), ROWS.len() + 1);
        let mut names: Vec<&str> = types.iter().map(|l| l.split(' ').nth(2).unwrap()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), types.len(), "each name once");
        assert!(text.contains("termesh_bytes_out_total{node=\"n1\"} 42\n"));
        assert!(text.contains("termesh_sessions{node=\"n1\"} 3\n"));
        assert!(text.contains("termesh_host_stall_seconds_total{node=\"n1\"} 1.500\n"));
    }
}
