//! The attach's link: a lost link and the wait before the next attempt,
//! and liveness on a live one (probes, quiet, stale).

use std::time::{Duration, Instant};

use super::*;

impl State {
    pub fn link_lost(&mut self, e: &anyhow::Error) {
        self.offline_since.get_or_insert_with(Instant::now);
        self.quiet_for = None;
        self.node_stopped = e
            .chain()
            .find_map(|c| c.downcast_ref::<crate::client::NodeStopped>())
            .map(|s| s.0.clone());
    }

    /// The wait before the next connection attempt: quick and flat while
    /// the node said it is going away (restarting), else backed off.
    pub fn next_delay(&mut self) -> Duration {
        let restarting = self.node_stopped.is_some();
        self.backoff.next_delay(restarting)
    }

    pub fn set_retry_at(&mut self, at: Option<Instant>) {
        self.retry_at = at;
    }

    /// The liveness check's period, from the node's ping interval: probe
    /// after a third of it in silence; a link silent for twice the interval
    /// (several probes and the node's own pings unanswered) is dropped.
    pub fn tick_period(&mut self, interval: Duration) -> Duration {
        self.probe_after = interval / 3;
        self.stale_after = interval * 2;
        // Guesses of the predictive echo are checked more often.
        let most = if self.view.predicting() { 100 } else { 500 };
        (self.probe_after / 2).clamp(Duration::from_millis(50), Duration::from_millis(most))
    }

    /// A link silent this long is given up (the driver reconnects, unless
    /// a frame it had no time to read is waiting).
    pub fn stale(&self, silent: Duration) -> bool {
        silent >= self.stale_after
    }

    /// Liveness, on the link silent for `silent`: a quiet link is probed
    /// with `ping`; the round trip is measured for predictive echo.
    pub fn on_tick(&mut self, silent: Duration) {
        if silent >= self.probe_after && self.last_ping.elapsed() >= self.probe_after {
            self.last_ping = Instant::now();
            self.send(ClientMsg::Ping { nonce: None });
        }
        // Quiet from one unanswered probe on: input waits from then on.
        self.quiet_for = (silent >= self.probe_after * 2).then_some(silent);
        self.view.settle(self.last_seq.unwrap_or(0));
        if self.view.predicting()
            && self
                .rtt_probe
                .is_none_or(|(_, at)| at.elapsed() >= RTT_EVERY)
        {
            let nonce = rand::random::<u32>().into();
            self.rtt_probe = Some((Some(nonce), Instant::now()));
            self.send(ClientMsg::Ping {
                nonce: Some(rmpv::Value::from(nonce)),
            });
        }
    }
}
