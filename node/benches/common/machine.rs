//! The whole machine's CPU over a bench's rounds, from `/proc/stat`:
//! every process and kernel worker, not only the processes a bench
//! measures. What a workload costs the host per MiB, how busy its CPUs
//! were, and the rate that cost would allow with every CPU busy (a round
//! near 100% busy is bound by CPU; one well under it, by waits).
//!
//! Busy time is the CPUs' time that passed (the clock's) less their
//! idle time (`/proc/stat`'s idle and iowait, which `/proc/uptime`
//! agrees with; time a hypervisor gave elsewhere counts as busy), not
//! `/proc/stat`'s busy ticks: under a PTY flood those miss about a third
//! of it (a Python reader of `cat` in a PTY on two CPUs: busy ticks of
//! 280-400 ms in rounds where the reader, `cat` and the kworkers alone
//! used 385-472 ms of CPU).

use std::time::Instant;

/// Milliseconds in one `/proc` tick (USER_HZ, which Linux fixes at 100).
pub const TICK_MS: f64 = 10.0;
/// Bytes in a MiB.
const MIB: f64 = (1u64 << 20) as f64;

/// `/proc/stat`'s idle ticks over every CPU at one moment, and when.
#[derive(Debug, Clone, Copy)]
pub struct Ticks {
    /// Idle and waiting for I/O.
    idle: u64,
    at: Instant,
}

impl Ticks {
    /// Now; `None` where `/proc/stat` does not read as Linux writes it.
    pub fn now() -> Option<Ticks> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let mut fields = stat.lines().next()?.split_whitespace();
        if fields.next() != Some("cpu") {
            return None;
        }
        // user nice system idle iowait: the last two.
        let mut waiting = fields.skip(3).map(str::parse::<u64>);
        let (idle, iowait) = (waiting.next()?.ok()?, waiting.next()?.ok()?);
        Some(Ticks {
            idle: idle + iowait,
            at: Instant::now(),
        })
    }
}

/// One kind of round's machine totals, pooled over its rounds (so its
/// figures are one ratio each, not medians of rounds that differ).
#[derive(Debug, Default, Clone, Copy)]
pub struct Pooled {
    /// Idle ticks in its rounds, every CPU's.
    idle: u64,
    /// Seconds that passed in its rounds.
    secs: f64,
    mib: f64,
}

/// A kind of round's figures (`Pooled::figures`).
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    /// CPU ms the machine spent per MiB shipped.
    pub ms_per_mib: f64,
    /// The busy share of all its CPUs, 0 to 1.
    pub busy: f64,
    /// MB/s that `ms_per_mib` allows with every CPU busy.
    pub allows: f64,
}

impl Pooled {
    /// Adds a round that began at `from` and shipped `bytes`.
    pub fn add(&mut self, from: Option<Ticks>, bytes: usize) {
        if let (Some(from), Some(now)) = (from, Ticks::now()) {
            self.idle += now.idle.saturating_sub(from.idle);
            self.secs += now.at.duration_since(from.at).as_secs_f64();
            self.mib += bytes as f64 / MIB;
        }
    }

    /// The figures on a machine of `cpus` CPUs; `None` before a round
    /// with ticks counted.
    pub fn figures(&self, cpus: usize) -> Option<Figures> {
        let passed_ms = cpus as f64 * self.secs * 1000.0;
        let busy_ms = (passed_ms - self.idle as f64 * TICK_MS).max(0.0);
        if self.mib <= 0.0 || busy_ms <= 0.0 {
            return None;
        }
        let ms_per_mib = busy_ms / self.mib;
        Some(Figures {
            ms_per_mib,
            busy: busy_ms / passed_ms,
            allows: cpus as f64 * 1000.0 / ms_per_mib * MIB / 1e6,
        })
    }
}

/// The CPUs `/proc/stat`'s totals cover (its `cpuN` lines; at least 1).
pub fn cpus() -> usize {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    stat.lines()
        .filter(|l| {
            l.strip_prefix("cpu")
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count()
        .max(1)
}
