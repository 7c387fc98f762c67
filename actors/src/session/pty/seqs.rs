//! Seqs given where output is read: the PTY reader gives each frame its
//! seq and writes it to the output log before the frame is queued for the
//! session, so a node killed with frames queued (in the channel, or held
//! by the session's intake) loses none of them: the restart continues
//! right after them, and they reach every client from the log. What a
//! kill can still lose is the one read between the `read` and the log's
//! `pwrite` on the same thread (microseconds).
//!
//! The session owns the limit: a seq past the ones the store has reserved
//! waits for the next reservation (a restart after a machine crash
//! continues above the reserved ones, so no seq is ever given twice).

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::store::StoreHandle;

/// A wait for seqs past this is said in the log (the store is slow, or
/// nobody reserves them).
const SLOW_RESERVE: std::time::Duration = std::time::Duration::from_secs(5);

/// One run's seqs of one session, shared by its reader and the session.
#[derive(Debug)]
pub struct Sequencer {
    id: Arc<str>,
    store: Option<StoreHandle>,
    state: Mutex<State>,
    raised: Notify,
}

enum Given {
    Seq(u64),
    Closed,
    Wait,
}

#[derive(Debug)]
struct State {
    /// The seq the next frame gets.
    next: u64,
    /// Seqs through this one may be given.
    limit: u64,
    /// A later run took over (or the session let the program go): this
    /// run gives no more seqs.
    open: bool,
}

impl Sequencer {
    /// Seqs from `last + 1`, up to `limit` until it is raised.
    pub fn new(id: Arc<str>, store: Option<StoreHandle>, last: u64, limit: u64) -> Arc<Self> {
        Arc::new(Sequencer {
            id,
            store,
            state: Mutex::new(State {
                next: last + 1,
                limit,
                open: true,
            }),
            raised: Notify::new(),
        })
    }

    /// Gives `data` the next seq and logs it, waiting while that seq is
    /// past the reserved ones; `None` once this run is closed.
    pub async fn log(&self, data: &[u8]) -> Option<u64> {
        // The usual case: the seq is reserved, no waiter is needed.
        match self.try_log(data) {
            Given::Seq(seq) => return Some(seq),
            Given::Closed => return None,
            Given::Wait => {}
        }
        loop {
            let raised = self.raised.notified();
            tokio::pin!(raised);
            raised.as_mut().enable();
            // Checked again once the waiter is enabled: a raise between
            // the check above and now is not missed.
            match self.try_log(data) {
                Given::Seq(seq) => return Some(seq),
                Given::Closed => return None,
                Given::Wait => {
                    if tokio::time::timeout(SLOW_RESERVE, raised).await.is_err() {
                        let state = self.lock();
                        tracing::warn!(
                            session = %self.id,
                            next = state.next,
                            limit = state.limit,
                            "output waits for its seqs to be reserved"
                        );
                    }
                }
            }
        }
    }

    fn try_log(&self, data: &[u8]) -> Given {
        let mut state = self.lock();
        if !state.open {
            return Given::Closed;
        }
        if state.next > state.limit {
            return Given::Wait;
        }
        let seq = state.next;
        if let Some(store) = &self.store {
            store.output(&self.id, seq, data);
        }
        state.next += 1;
        Given::Seq(seq)
    }

    /// Seqs through `limit` are reserved now.
    pub fn raise(&self, limit: u64) {
        let mut state = self.lock();
        state.limit = state.limit.max(limit);
        drop(state);
        self.raised.notify_waiters();
    }

    /// This run gives no more seqs; answers the last one it gave.
    pub fn close(&self) -> u64 {
        let mut state = self.lock();
        state.open = false;
        let last = state.next - 1;
        drop(state);
        self.raised.notify_waiters();
        last
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn seqs_follow_on_and_wait_for_the_limit() {
        let s = Sequencer::new("s".into(), None, 10, 12);
        assert_eq!(s.log(b"a").await, Some(11));
        assert_eq!(s.log(b"b").await, Some(12));
        let waiting = {
            let s = s.clone();
            tokio::spawn(async move { s.log(b"c").await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "seq 13 is not reserved yet");
        s.raise(20);
        let got = tokio::time::timeout(Duration::from_secs(10), waiting).await;
        assert_eq!(got.unwrap().unwrap(), Some(13));
    }

    #[tokio::test]
    async fn a_closed_run_gives_no_more_seqs_and_wakes_its_waiter() {
        let s = Sequencer::new("s".into(), None, 0, 1);
        assert_eq!(s.log(b"a").await, Some(1));
        let waiting = {
            let s = s.clone();
            tokio::spawn(async move { s.log(b"b").await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(s.close(), 1);
        let got = tokio::time::timeout(Duration::from_secs(10), waiting).await;
        assert_eq!(got.unwrap().unwrap(), None);
        assert_eq!(s.log(b"c").await, None);
    }
}
