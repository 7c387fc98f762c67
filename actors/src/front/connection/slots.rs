//! The reply slots of one connection: a screen, history, list, events or
//! read_output reply holds one from its request until its bytes have left
//! the node's buffers for the socket, so a client that sends requests and
//! never reads the replies holds at most `MAX_SCREENS_IN_FLIGHT` replies
//! and about `MAX_UNSENT_REPLIES` bytes of them in the node.
//!
//! "Left the node's buffers": actix encodes a queued message when the
//! HTTP dispatcher pulls the WebSocket's outgoing stream, which it does
//! only while its own write buffer holds less than 32 KiB. So a reply
//! taken from the queue during one pull is in the kernel's socket buffer
//! (all but that last 32 KiB, and what TLS holds with HTTPS) by the time
//! the dispatcher pulls again: [`Outgoing`] counts the pulls, and a
//! reply's bytes record the pull that took them.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;

use termesh_transport::ErrorCode;

use crate::error::ApiError;

/// Screen, history, list, events and read_output replies one connection
/// may have in flight or unsent: each can cost a render of 10,000 lines
/// or a page of stored output.
pub const MAX_SCREENS_IN_FLIGHT: usize = 4;
/// Bytes of such replies one connection may have in flight or unsent
/// (a request's expected size is counted until its reply is made); one
/// request is always admitted when none is held, whatever its size.
pub const MAX_UNSENT_REPLIES: usize = 8 << 20;

const NOT_TAKEN: u64 = u64::MAX;

/// A held slot, returned by [`ReplySlots::take`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot(u64);

enum Held {
    /// Being computed; counts its expected size.
    Working { slot: Slot, expect: usize },
    /// Queued on the WebSocket: the pull that took it, once taken.
    Queued {
        taken_at: Arc<AtomicU64>,
        len: usize,
    },
}

impl Held {
    fn bytes(&self) -> usize {
        match self {
            Held::Working { expect, .. } => *expect,
            Held::Queued { len, .. } => *len,
        }
    }
}

/// One connection's slots; its clock is shared with its [`Outgoing`].
pub struct ReplySlots {
    pulls: Arc<AtomicU64>,
    held: Vec<Held>,
    next: u64,
}

impl Default for ReplySlots {
    fn default() -> Self {
        ReplySlots {
            pulls: Arc::new(AtomicU64::new(0)),
            held: Vec::new(),
            next: 0,
        }
    }
}

impl ReplySlots {
    /// A slot for a request whose reply is expected to be about `expect`
    /// bytes, or the error naming the bound.
    pub fn take(&mut self, expect: usize) -> Result<Slot, ApiError> {
        self.forget_sent();
        let bytes: usize = self.held.iter().map(Held::bytes).sum();
        let over_bytes = !self.held.is_empty() && bytes + expect > MAX_UNSENT_REPLIES;
        if self.held.len() >= MAX_SCREENS_IN_FLIGHT || over_bytes {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                format!(
                    "{} screen, history, list, events or read_output replies ({} KiB) are \
                 in flight or not yet read on this connection (at most \
                 {MAX_SCREENS_IN_FLIGHT} and {} MiB); try again once their replies came",
                    self.held.len(),
                    bytes >> 10,
                    MAX_UNSENT_REPLIES >> 20
                ),
            ));
        }
        let slot = Slot(self.next);
        self.next += 1;
        self.held.push(Held::Working { slot, expect });
        Ok(slot)
    }

    /// The request failed before a reply: its slot is free.
    pub fn release(&mut self, slot: Slot) {
        self.held
            .retain(|h| !matches!(h, Held::Working { slot: s, .. } if *s == slot));
    }

    /// `slot`'s reply, encoded: the returned bytes hold the slot until
    /// the socket has them.
    pub fn reply(&mut self, slot: Slot, data: Vec<u8>) -> Bytes {
        let taken_at = Arc::new(AtomicU64::new(NOT_TAKEN));
        let len = data.len();
        for h in &mut self.held {
            if matches!(h, Held::Working { slot: s, .. } if *s == slot) {
                *h = Held::Queued {
                    taken_at: taken_at.clone(),
                    len,
                };
            }
        }
        Bytes::from_owner(Tracked {
            data,
            taken_at,
            pulls: self.pulls.clone(),
        })
    }

    /// The clock of this connection's outgoing stream.
    pub fn clock(&self) -> PullClock {
        PullClock(self.pulls.clone())
    }

    /// Drops the replies that a pull before the current one took.
    fn forget_sent(&mut self) {
        let now = self.pulls.load(Ordering::Relaxed);
        self.held.retain(|h| match h {
            Held::Working { .. } => true,
            Held::Queued { taken_at, .. } => taken_at.load(Ordering::Relaxed) >= now,
        });
    }
}

/// A reply's bytes; dropped when actix encodes them into the chunk it
/// hands the dispatcher, recording which pull that was.
struct Tracked {
    data: Vec<u8>,
    taken_at: Arc<AtomicU64>,
    pulls: Arc<AtomicU64>,
}

impl AsRef<[u8]> for Tracked {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        let now = self.pulls.load(Ordering::Relaxed);
        self.taken_at.store(now, Ordering::Relaxed);
    }
}

/// Counts the pulls of one connection's outgoing stream.
pub struct PullClock(Arc<AtomicU64>);

impl PullClock {
    /// `inner` (the WebSocket's outgoing stream), counting its pulls.
    pub fn wrap<S>(self, inner: S) -> Outgoing<S> {
        Outgoing {
            inner: Box::pin(inner),
            pulls: self.0,
        }
    }
}

/// A WebSocket's outgoing byte stream, counting the pulls.
pub struct Outgoing<S> {
    inner: Pin<Box<S>>,
    pulls: Arc<AtomicU64>,
}

impl<S: Stream> Stream for Outgoing<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        self.pulls.fetch_add(1, Ordering::Relaxed);
        self.inner.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replies queued on the WebSocket (actix's context drops each when
    /// a pull encodes it).
    struct Queue(std::sync::Mutex<Vec<Bytes>>);

    fn pull(out: &mut Outgoing<futures_util::stream::Iter<std::vec::IntoIter<usize>>>) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let _ = Pin::new(out).poll_next(&mut cx);
    }

    #[test]
    fn a_reply_holds_its_slot_until_a_later_pull() {
        let mut slots = ReplySlots::default();
        let mut out = slots
            .clock()
            .wrap(futures_util::stream::iter(vec![1usize, 2, 3, 4]));
        let queue = Queue(Default::default());
        let held: Vec<_> = (0..MAX_SCREENS_IN_FLIGHT)
            .map(|_| slots.take(100).unwrap())
            .collect();
        assert!(slots.take(100).is_err(), "a fifth while four compute");
        // Replies made and queued: still held, not yet taken.
        for s in &held {
            let bytes = slots.reply(*s, vec![0; 10]);
            queue.0.lock().unwrap().push(bytes);
        }
        pull(&mut out);
        assert!(slots.take(100).is_err(), "queued, not taken");
        // This pull takes them (the queue is drained inside it) ...
        pull(&mut out);
        queue.0.lock().unwrap().clear();
        assert!(slots.take(100).is_err(), "taken by this pull, not sent");
        // ... and the next one means the socket has them.
        pull(&mut out);
        assert!(slots.take(100).is_ok());
    }

    #[test]
    fn bytes_bound_admits_one_large_request_then_waits() {
        let mut slots = ReplySlots::default();
        let first = slots.take(MAX_UNSENT_REPLIES * 2).unwrap();
        assert!(slots.take(1).is_err(), "over the bytes bound");
        slots.release(first);
        let a = slots.take(MAX_UNSENT_REPLIES / 2).unwrap();
        let _b = slots.take(MAX_UNSENT_REPLIES / 2).unwrap();
        assert!(slots.take(1).is_err());
        slots.release(a);
        assert!(slots.take(1).is_ok());
    }
}
