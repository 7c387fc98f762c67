//! Incoming peer connections: each handshake runs in a task of its own,
//! bounded in time and in number, so a client that sends a QUIC Initial
//! and goes silent holds one slot for `timeout`, never the accept loop.
//! One source address holds at most `MAX_PER_SOURCE` slots; once half the
//! slots are taken, an address that has not proved it receives (QUIC
//! Retry) is asked to first; and a quarter of the slots is kept for the
//! addresses of configured peers. A plain limiter keeps refusals from
//! flooding the log.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

/// How long an incoming handshake may take (a real peer on a slow link
/// needs a few round trips; QUIC's own idle timeout is 60 s).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Incoming handshakes in progress at once; one more is refused at once
/// (QUIC `CONNECTION_REFUSED`), and the dialer retries with backoff.
pub const MAX_HANDSHAKES: usize = 64;
/// Incoming handshakes one source address may have in progress.
pub const MAX_PER_SOURCE: usize = 4;

/// Why an incoming connection did not become a link.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// TLS or QUIC refused it (another CA, no certificate, wrong ALPN...).
    #[error("handshake failed: {0}")]
    Handshake(#[from] quinn::ConnectionError),
    #[error("no handshake within {0:?}")]
    TimedOut(Duration),
    #[error("refused: {0} handshakes already in progress")]
    Busy(usize),
    #[error("refused: {0} handshakes from this address already in progress")]
    BusySource(usize),
}

/// One ended handshake: who it came from, and the connection or why not.
pub type Accepted = (SocketAddr, Result<quinn::Connection, AcceptError>);

/// Takes every incoming connection of an endpoint and runs its handshake
/// beside the others.
pub struct Acceptor {
    endpoint: quinn::Endpoint,
    /// Invariant: at most `limit` tasks; each ends within `timeout`.
    handshakes: JoinSet<Accepted>,
    timeout: Duration,
    limit: usize,
    /// Handshakes in progress by source address, and each task's.
    per_source: HashMap<IpAddr, usize>,
    sources: HashMap<tokio::task::Id, IpAddr>,
    /// Whether an address is a configured peer's (they alone may take
    /// the last quarter of the slots).
    is_peer: Box<dyn Fn(IpAddr) -> bool + Send>,
    /// The endpoint has no more incoming connections.
    closed: bool,
}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acceptor")
            .field("in_progress", &self.handshakes.len())
            .field("timeout", &self.timeout)
            .field("limit", &self.limit)
            .finish()
    }
}

impl Acceptor {
    /// With `HANDSHAKE_TIMEOUT` and `MAX_HANDSHAKES`.
    pub fn new(endpoint: quinn::Endpoint) -> Acceptor {
        Acceptor::with_limits(endpoint, HANDSHAKE_TIMEOUT, MAX_HANDSHAKES)
    }

    pub fn with_limits(endpoint: quinn::Endpoint, timeout: Duration, limit: usize) -> Acceptor {
        Acceptor {
            endpoint,
            handshakes: JoinSet::new(),
            timeout,
            limit: limit.max(1),
            per_source: HashMap::new(),
            sources: HashMap::new(),
            is_peer: Box::new(|_| false),
            closed: false,
        }
    }

    /// Keeps a quarter of the slots for addresses `is_peer` says are
    /// configured peers'.
    pub fn with_peers(mut self, is_peer: impl Fn(IpAddr) -> bool + Send + 'static) -> Acceptor {
        self.is_peer = Box::new(is_peer);
        self
    }

    /// Handshakes in progress.
    pub fn in_progress(&self) -> usize {
        self.handshakes.len()
    }

    /// The next handshake to end, in the order they end (not the order
    /// they began); `None` once the endpoint is closed and none is left.
    /// Cancel-safe: a handshake in progress stays in the set.
    pub async fn next(&mut self) -> Option<Accepted> {
        loop {
            tokio::select! {
                incoming = self.endpoint.accept(), if !self.closed => match incoming {
                    Some(incoming) => {
                        if let Some(refused) = self.start(incoming) {
                            return Some(refused);
                        }
                    }
                    None => self.closed = true,
                },
                Some(done) = self.handshakes.join_next_with_id() => {
                    let id = match &done {
                        Ok((id, _)) => *id,
                        Err(e) => e.id(),
                    };
                    if let Some(ip) = self.sources.remove(&id) {
                        if let Some(n) = self.per_source.get_mut(&ip) {
                            *n -= 1;
                            if *n == 0 {
                                self.per_source.remove(&ip);
                            }
                        }
                    }
                    match done {
                        Ok((_, accepted)) => return Some(accepted),
                        // Only a panic in quinn lands here: nothing to
                        // hand on (its slot is counted free above).
                        Err(_) => continue,
                    }
                }
                else => return None,
            }
        }
    }

    /// Starts `incoming`'s handshake, or refuses it when `limit` are in
    /// progress (answered at once: a refusal is an `Accepted` too).
    fn start(&mut self, incoming: quinn::Incoming) -> Option<Accepted> {
        let remote = incoming.remote_address();
        let ip = remote.ip();
        let mine = self.per_source.get(&ip).copied().unwrap_or(0);
        let validated = incoming.remote_address_validated();
        match admit(
            self.handshakes.len(),
            self.limit,
            mine,
            (self.is_peer)(ip),
            validated,
        ) {
            Admit::Take => {}
            Admit::Retry if incoming.may_retry() => {
                let _ = incoming.retry();
                return None;
            }
            Admit::Retry => {}
            Admit::Refuse(why) => {
                incoming.refuse();
                return Some((remote, Err(why)));
            }
        }
        *self.per_source.entry(ip).or_insert(0) += 1;
        let timeout = self.timeout;
        let task = self.handshakes.spawn(async move {
            // Dropping a handshake that timed out closes its connection.
            let result = match tokio::time::timeout(timeout, incoming).await {
                Ok(result) => result.map_err(AcceptError::Handshake),
                Err(_) => Err(AcceptError::TimedOut(timeout)),
            };
            (remote, result)
        });
        self.sources.insert(task.id(), ip);
        None
    }
}

/// What to do with a new handshake.
#[derive(Debug)]
enum Admit {
    Take,
    /// Ask the address to prove it receives (QUIC Retry) first.
    Retry,
    Refuse(AcceptError),
}

/// A new handshake from an address with `mine` in progress, `busy` in
/// progress in all: a quarter of `limit` is kept for configured peers,
/// one address holds at most `MAX_PER_SOURCE`, and past half of `limit`
/// (of 4 or more) an address that has not proved it receives is asked to.
fn admit(busy: usize, limit: usize, mine: usize, peer: bool, validated: bool) -> Admit {
    let room = if peer { limit } else { limit - limit / 4 };
    if busy >= room.max(1) {
        Admit::Refuse(AcceptError::Busy(limit))
    } else if mine >= MAX_PER_SOURCE {
        Admit::Refuse(AcceptError::BusySource(MAX_PER_SOURCE))
    } else if busy * 2 >= limit && limit >= 4 && !validated {
        Admit::Retry
    } else {
        Admit::Take
    }
}

/// Which refusals get a log line: the first from each remote IP, then at
/// most one per `every` from it, with a count of those left out. Holds at
/// most `cap` addresses; while that many logged within `every`, refusals
/// from further addresses are left out (and counted nowhere: a flood from
/// that many addresses is what a firewall, not this log, is for).
#[derive(Debug)]
pub struct LogLimit {
    every: Duration,
    cap: usize,
    /// Per address: when it was last logged, and refusals left out since.
    last: HashMap<IpAddr, (Instant, u64)>,
}

impl LogLimit {
    pub fn new(every: Duration, cap: usize) -> LogLimit {
        LogLimit {
            every,
            cap: cap.max(1),
            last: HashMap::new(),
        }
    }

    /// Whether to log a refusal from `ip` at `now`: `Some(left out since
    /// the last line for it)`, or `None` to leave it out.
    pub fn admit(&mut self, ip: IpAddr, now: Instant) -> Option<u64> {
        if let Some((logged, left_out)) = self.last.get_mut(&ip) {
            if now.saturating_duration_since(*logged) < self.every {
                *left_out += 1;
                return None;
            }
            let since = *left_out;
            *logged = now;
            *left_out = 0;
            return Some(since);
        }
        if self.last.len() >= self.cap {
            let every = self.every;
            self.last
                .retain(|_, (logged, _)| now.saturating_duration_since(*logged) < every);
            if self.last.len() >= self.cap {
                return None;
            }
        }
        self.last.insert(ip, (now, 0));
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_kept_for_peers_shared_by_source_and_validated_when_busy() {
        let take = |busy, mine, peer, validated| admit(busy, 64, mine, peer, validated);
        assert!(matches!(take(0, 0, false, false), Admit::Take));
        // One address: at most MAX_PER_SOURCE.
        assert!(matches!(
            take(10, MAX_PER_SOURCE, false, true),
            Admit::Refuse(AcceptError::BusySource(_))
        ));
        // Half full: unvalidated addresses are asked to Retry first.
        assert!(matches!(take(32, 0, false, false), Admit::Retry));
        assert!(matches!(take(32, 0, false, true), Admit::Take));
        // The last quarter is the configured peers'.
        assert!(matches!(
            take(48, 0, false, true),
            Admit::Refuse(AcceptError::Busy(64))
        ));
        assert!(matches!(take(48, 0, true, true), Admit::Take));
        assert!(matches!(
            take(64, 0, true, true),
            Admit::Refuse(AcceptError::Busy(64))
        ));
        // Tiny limits (tests) keep every slot for anyone, with no Retry.
        assert!(matches!(admit(1, 2, 1, false, false), Admit::Take));
    }

    #[test]
    fn one_line_per_address_per_period_with_the_count_left_out() {
        let mut limit = LogLimit::new(Duration::from_secs(60), 8);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        assert_eq!(limit.admit(a, t0), Some(0));
        assert_eq!(limit.admit(a, t0 + Duration::from_secs(1)), None);
        assert_eq!(limit.admit(a, t0 + Duration::from_secs(59)), None);
        assert_eq!(limit.admit(b, t0 + Duration::from_secs(2)), Some(0));
        assert_eq!(limit.admit(a, t0 + Duration::from_secs(60)), Some(2));
        assert_eq!(limit.admit(a, t0 + Duration::from_secs(61)), None);
    }

    #[test]
    fn memory_is_bounded_and_old_addresses_make_room() {
        let mut limit = LogLimit::new(Duration::from_secs(60), 2);
        let ip = |n: u8| IpAddr::from([10, 0, 0, n]);
        let t0 = Instant::now();
        assert_eq!(limit.admit(ip(1), t0), Some(0));
        assert_eq!(limit.admit(ip(2), t0), Some(0));
        // Full of addresses logged within the period: a third is left out.
        assert_eq!(limit.admit(ip(3), t0 + Duration::from_secs(1)), None);
        assert!(limit.last.len() <= 2);
        // Once their period is over they make room.
        assert_eq!(limit.admit(ip(3), t0 + Duration::from_secs(61)), Some(0));
        assert!(limit.last.len() <= 2);
    }
}
