//! A link's state and counters as `/api/v1/nodes` and `/metrics` show
//! them: up or down, breaker, RTT, the peer's stall, and bytes over every
//! connection the link has had.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Link states as `/api/v1/nodes` names them.
pub const CONNECTING: u8 = 0;
pub const UP: u8 = 1;
pub const DOWN: u8 = 2;
/// Breaker states.
pub const CLOSED: u8 = 0;
pub const OPEN: u8 = 1;
pub const HELD: u8 = 2;

/// The link as `/api/v1/nodes` and `/metrics` show it.
#[derive(Debug, Default)]
pub struct LinkStats {
    /// `CONNECTING`, `UP` or `DOWN`.
    pub state: std::sync::atomic::AtomicU8,
    /// `CLOSED`, `OPEN` or `HELD`.
    pub breaker: std::sync::atomic::AtomicU8,
    /// Round-trip time of the last answered ping, in microseconds (0: none).
    pub rtt_us: AtomicU64,
    /// The peer's credited host stall, as its last pong said (ms).
    pub peer_stall_ms: AtomicU64,
    pub ups: AtomicU64,
    pub downs: AtomicU64,
    /// Forwarded requests that went unanswered.
    pub timeouts: AtomicU64,
    pub trips: AtomicU64,
    pub holds: AtomicU64,
    /// Output frames sent on the fast data stream (typed-into sessions').
    pub fast_frames: AtomicU64,
    /// UDP bytes of the link's connections that ended (in, out), and the
    /// connections still open, read live by [`LinkStats::bytes`].
    bytes: std::sync::Mutex<LinkBytes>,
}

#[derive(Debug, Default)]
struct LinkBytes {
    ended: LinkTotals,
    open: HashMap<usize, quinn::Connection>,
}

/// UDP bytes each way and packets lost (sent again) over a link so far.
#[derive(Debug, Default, Clone, Copy)]
pub struct LinkTotals {
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub lost_packets: u64,
}

impl LinkTotals {
    fn add(mut self, c: &quinn::Connection) -> Self {
        let s = c.stats();
        self.bytes_in += s.udp_rx.bytes;
        self.bytes_out += s.udp_tx.bytes;
        self.lost_packets += s.path.lost_packets;
        self
    }
}

impl LinkStats {
    /// Every connection of the link so far, the open ones counted up to
    /// this moment.
    pub fn totals(&self) -> LinkTotals {
        let b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        b.open.values().fold(b.ended, LinkTotals::add)
    }

    /// The largest UDP payload the link's open connection sends now, as
    /// its path MTU search found it (0 while none is open).
    pub fn path_mtu(&self) -> u16 {
        let b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let mtus = b.open.values().map(|c| c.stats().path.current_mtu);
        mtus.max().unwrap_or(0)
    }

    /// Counts `conn` from now until [`LinkStats::conn_ended`].
    pub(crate) fn conn_opened(&self, conn: &quinn::Connection) {
        let mut b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        b.open.insert(conn.stable_id(), conn.clone());
    }

    /// Folds the final counts of `conn` into the ended totals.
    pub(crate) fn conn_ended(&self, conn: &quinn::Connection) {
        let mut b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        if b.open.remove(&conn.stable_id()).is_some() {
            b.ended = b.ended.add(conn);
        }
    }

    pub fn state_name(&self) -> &'static str {
        match self.state.load(Ordering::Relaxed) {
            UP => "up",
            DOWN => "down",
            _ => "connecting",
        }
    }

    pub fn breaker_name(&self) -> &'static str {
        match self.breaker.load(Ordering::Relaxed) {
            OPEN => "open",
            HELD => "held",
            _ => "closed",
        }
    }
}
