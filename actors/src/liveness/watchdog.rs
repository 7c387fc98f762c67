//! `WatchdogActor`: one per node, on the main arbiter. It wakes on a fixed
//! tick, measures how late it woke and how much the PSI memory `some total`
//! grew, and credits the stall to the node's `StallClock` (see `stall`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use actix::prelude::*;

use crate::liveness::stall::{parse_psi_some_total, StallClock, StallTracker};

pub struct WatchdogActor {
    clock: StallClock,
    tracker: StallTracker,
    tick: Duration,
    psi_path: Option<PathBuf>,
    last_tick: Instant,
    /// Whether an unreadable PSI file was already logged.
    psi_warned: bool,
}

impl WatchdogActor {
    pub fn new(clock: StallClock, tick: Duration, psi_path: Option<PathBuf>) -> Self {
        WatchdogActor {
            clock,
            tracker: StallTracker::new(tick),
            tick,
            psi_path,
            last_tick: Instant::now(),
            psi_warned: false,
        }
    }

    fn read_psi(&mut self) -> Option<Duration> {
        let path = self.psi_path.as_ref()?;
        let reading = std::fs::read_to_string(path)
            .ok()
            .and_then(|text| parse_psi_some_total(&text));
        if reading.is_none() && !self.psi_warned {
            self.psi_warned = true;
            tracing::info!(
                path = %path.display(),
                "no memory pressure reading; host stall is measured by timer lateness alone"
            );
        }
        reading
    }

    /// A chain of one-shot timers, not an interval: after a stall an
    /// interval would burst its missed ticks, each measuring nothing.
    fn schedule(&self, ctx: &mut Context<Self>) {
        ctx.run_later(self.tick, |act, ctx| {
            let now = Instant::now();
            let elapsed = now.saturating_duration_since(act.last_tick);
            act.last_tick = now;
            let psi = act.read_psi();
            let credit = act.tracker.tick(elapsed, psi);
            act.clock.record(now, act.tracker.total());
            if credit >= Duration::from_secs(1) {
                tracing::warn!(
                    stall_ms = credit.as_millis() as u64,
                    "the node was stalled; liveness timers discount it"
                );
            }
            act.schedule(ctx);
        });
    }
}

impl Actor for WatchdogActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.last_tick = Instant::now();
        // The first reading is the PSI baseline.
        let psi = self.read_psi();
        self.tracker.tick(self.tick, psi);
        self.clock.record(self.last_tick, self.tracker.total());
        self.schedule(ctx);
    }
}
