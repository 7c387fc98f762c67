//! Who waits for which session's changes (`wait`, and a `send` held for
//! another node's session): the registry rings a session's bell at every
//! change it tells watchers, its own sessions' and what peers announce;
//! a waiter reads the session again then. Bounded: `MAX_PER_SESSION`
//! waiters on one session, `MAX_WAITERS` on the node (`unavailable` past
//! them).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use termesh_transport::ErrorCode;
use tokio::sync::Notify;

use crate::error::ApiError;

/// Waiters on one session, at most.
pub const MAX_PER_SESSION: usize = 64;
/// Waiters on the node, at most.
pub const MAX_WAITERS: usize = 4096;

#[derive(Clone, Default, Debug)]
pub struct Bells(Arc<Mutex<Board>>);

#[derive(Default, Debug)]
struct Board {
    by_session: HashMap<String, (Arc<Notify>, usize)>,
    total: usize,
}

/// One waiter's hold on a session's bell; let go on drop.
#[derive(Debug)]
pub struct Bell {
    bells: Bells,
    id: String,
    notify: Arc<Notify>,
}

impl Bells {
    /// Rings `id`'s bell, if anyone waits on it.
    pub fn ring(&self, id: &str) {
        if let Some((notify, _)) = self.board().by_session.get(id) {
            notify.notify_waiters();
        }
    }

    /// A hold on `id`'s bell, or `unavailable` past the bounds.
    pub fn bell(&self, id: &str) -> Result<Bell, ApiError> {
        let mut board = self.board();
        if board.total >= MAX_WAITERS {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                format!("this node holds {MAX_WAITERS} waits already; try again later"),
            ));
        }
        let entry = board
            .by_session
            .entry(id.to_string())
            .or_insert_with(|| (Arc::new(Notify::new()), 0));
        if entry.1 >= MAX_PER_SESSION {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                format!("session `{id}` has {MAX_PER_SESSION} waits on it already"),
            ));
        }
        entry.1 += 1;
        let notify = entry.0.clone();
        board.total += 1;
        Ok(Bell {
            bells: self.clone(),
            id: id.to_string(),
            notify,
        })
    }

    /// Waiters held now (for tests and metrics).
    pub fn held(&self) -> usize {
        self.board().total
    }

    fn board(&self) -> std::sync::MutexGuard<'_, Board> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Bell {
    /// Resolves at the next ring after this call (`enable` it before
    /// reading what it guards, so no ring in between is missed).
    pub fn rung(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for Bell {
    fn drop(&mut self) {
        let mut board = self.bells.board();
        board.total -= 1;
        if let Some(entry) = board.by_session.get_mut(&self.id) {
            entry.1 -= 1;
            if entry.1 == 0 {
                board.by_session.remove(&self.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_ring_wakes_the_session_s_waiters_and_bounds_hold() {
        let bells = Bells::default();
        let bell = bells.bell("a").unwrap();
        {
            let rung = bell.rung();
            tokio::pin!(rung);
            rung.as_mut().enable();
            bells.ring("b");
            assert!(futures_util::FutureExt::now_or_never(rung.as_mut()).is_none());
            bells.ring("a");
            assert!(futures_util::FutureExt::now_or_never(rung.as_mut()).is_some());
        }
        let more: Vec<Bell> = (1..MAX_PER_SESSION)
            .map(|_| bells.bell("a").unwrap())
            .collect();
        assert_eq!(bells.bell("a").unwrap_err().code, ErrorCode::Unavailable);
        drop(more);
        drop(bell);
        assert_eq!(bells.held(), 0);
        assert!(bells.0.lock().unwrap().by_session.is_empty());
    }
}
