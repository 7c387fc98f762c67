//! Notifications that reach a person (PROTOCOL.md section 15): each
//! `[[notify]]` endpoint gets a POST when one of this node's sessions
//! (the owner decides, so it is sent once cluster-wide) changes to a state
//! the endpoint asked for, or fails. Off every actor: a thread per
//! endpoint with a bounded queue, retries with backoff, a quiet period per
//! session and state (a flapping prompt pages once); failures are logged
//! and counted and never hold anything up.

mod format;

use std::collections::HashMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use termesh_config::notify::NotifyConfig;

use crate::metrics::Metrics;

/// Changes an endpoint's queue holds; past it they are dropped (counted).
const QUEUE: usize = 1024;
/// Tries per notification.
const ATTEMPTS: u32 = 5;
/// The first wait before a retry; each next one doubles.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// One POST's bound.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Quiet-period entries kept before old ones are pruned.
const MAX_REMEMBERED: usize = 10_000;

/// What changed, as the JSON body carries it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Change {
    pub session: String,
    pub name: Option<String>,
    pub node: String,
    /// `waiting`, `working`, `idle`, or `failed` (a non-zero exit).
    pub state: String,
    pub waiting_for: Option<String>,
    pub seq: u64,
    /// Opens the session in the console.
    pub url: String,
}

/// The node's endpoints; cloned into every session's settings.
#[derive(Clone, Default)]
pub struct Notifier(Option<Arc<Vec<Endpoint>>>);

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Notifier({} endpoints)",
            self.0.as_ref().map_or(0, |e| e.len())
        )
    }
}

struct Endpoint {
    config: NotifyConfig,
    queue: SyncSender<Change>,
    /// When each (session, state) was last notified.
    last: Mutex<HashMap<(String, String), Instant>>,
    metrics: Arc<Metrics>,
}

impl Notifier {
    /// Starts a thread per endpoint; they end once the last clone is gone.
    pub fn start(configs: &[NotifyConfig], metrics: &Arc<Metrics>) -> std::io::Result<Notifier> {
        if configs.is_empty() {
            return Ok(Notifier(None));
        }
        let mut endpoints = Vec::new();
        for config in configs {
            let (queue, changes) = sync_channel(QUEUE);
            let (to, metrics_) = (config.clone(), metrics.clone());
            std::thread::Builder::new()
                .name("notify".into())
                .spawn(move || deliver_all(&to, changes, &metrics_))?;
            endpoints.push(Endpoint {
                config: config.clone(),
                queue,
                last: Mutex::default(),
                metrics: metrics.clone(),
            });
        }
        Ok(Notifier(Some(Arc::new(endpoints))))
    }

    /// Queues `change` for every endpoint that wants it (without waiting).
    pub fn tell(&self, change: &Change) {
        let Some(endpoints) = &self.0 else {
            return;
        };
        for e in endpoints.iter() {
            if e.config.on.contains(&change.state) && e.due(change) {
                match e.queue.try_send(change.clone()) {
                    Ok(()) => {}
                    Err(TrySendError::Full(_)) => {
                        Metrics::add(&e.metrics.notify_failed, 1);
                        tracing::warn!(url = %e.config.url, session = %change.session, "notify: the queue is full; this change is not sent");
                    }
                    Err(TrySendError::Disconnected(_)) => {}
                }
            }
        }
    }
}

impl Endpoint {
    /// Not within the quiet period of the last notification of this
    /// session's state; remembers this one.
    fn due(&self, change: &Change) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let key = (change.session.clone(), change.state.clone());
        let now = Instant::now();
        if last
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < self.config.quiet)
        {
            return false;
        }
        if last.len() >= MAX_REMEMBERED {
            let quiet = self.config.quiet;
            last.retain(|_, at| now.duration_since(*at) < quiet);
        }
        last.insert(key, now);
        true
    }
}

/// The endpoint's thread: each change in turn, until the node is gone.
fn deliver_all(to: &NotifyConfig, changes: Receiver<Change>, metrics: &Metrics) {
    let agent = ureq::AgentBuilder::new().timeout(TIMEOUT).build();
    for change in changes {
        match deliver(&agent, to, &change) {
            Ok(()) => Metrics::add(&metrics.notify_sent, 1),
            Err(e) => {
                Metrics::add(&metrics.notify_failed, 1);
                tracing::warn!(url = %to.url, session = %change.session, state = %change.state, "notify failed: {e}");
            }
        }
    }
}

/// POSTs `change`, retrying with backoff: a server error, a 429 or no
/// answer is tried again; another refusal is final.
fn deliver(agent: &ureq::Agent, to: &NotifyConfig, change: &Change) -> Result<(), String> {
    let (content_type, body, headers) = format::body(to.format, change);
    let mut wait = FIRST_BACKOFF;
    let mut last_error = String::new();
    for attempt in 1..=ATTEMPTS {
        let mut req = agent.post(&to.url).set("Content-Type", content_type);
        for (name, value) in &headers {
            req = req.set(name, value);
        }
        if let Some(token) = &to.token {
            req = req.set("Authorization", &format!("Bearer {token}"));
        }
        match req.send_bytes(body.as_bytes()) {
            Ok(_) => return Ok(()),
            Err(ureq::Error::Status(code, _)) if code != 429 && code < 500 => {
                return Err(format!("answered {code}"));
            }
            Err(e) => last_error = e.to_string(),
        }
        if attempt < ATTEMPTS {
            std::thread::sleep(wait);
            wait *= 2;
        }
    }
    Err(format!("{ATTEMPTS} tries: {last_error}"))
}
