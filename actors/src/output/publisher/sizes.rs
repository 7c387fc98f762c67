//! Size changes in order with output: each is marked with the seq of the
//! last frame printed before it, and told to a subscriber between that
//! frame and the next, however far behind it is; a snapshot or a resume
//! says which it knew already.

use std::collections::VecDeque;
use std::sync::Arc;

use termesh_transport::EventKind;

use super::{Publisher, Sink, Subscriber};
use crate::output::vocab::{Deliver, Delivery, SubId};

/// Size changes kept (a resume from before the oldest is told the ones
/// kept, the last of which is the size now).
const KEPT: usize = 64;

#[derive(Debug, Clone, Copy)]
pub(super) struct SizeMark {
    pub id: u64,
    pub after_seq: u64,
    pub cols: u16,
    pub rows: u16,
}

/// Tells `sub` of every size change it has not been told of whose frames
/// before it have been sent (up to `sent`).
pub(super) fn tell<S: Sink>(
    sizes: &VecDeque<SizeMark>,
    session: &Arc<str>,
    id: SubId,
    sub: &mut Subscriber<S>,
    sent: u64,
) {
    // Per frame sent: nothing to do unless a change is untold.
    let told = sub.told_size;
    if sizes.back().is_none_or(|m| m.id <= told) {
        return;
    }
    // Marks are in id and seq order.
    let untold = sizes.iter().skip_while(|m| m.id <= told);
    for mark in untold.take_while(|m| m.after_seq <= sent) {
        sub.told_size = mark.id;
        sub.sink.deliver(Deliver {
            sub: id,
            session: session.clone(),
            item: Delivery::Event(EventKind::Resized {
                cols: mark.cols,
                rows: mark.rows,
            }),
        });
    }
}

impl<S: Sink> Publisher<S> {
    /// The session's size changed after the last frame: each subscriber is
    /// told once it has been sent that frame.
    pub fn resized(&mut self, cols: u16, rows: u16) {
        self.sizes.push_back(SizeMark {
            id: self.next_size,
            after_seq: self.ring.last_seq(),
            cols,
            rows,
        });
        self.next_size += 1;
        if self.sizes.len() > KEPT {
            self.sizes.pop_front();
        }
        for (id, sub) in self.subs.iter_mut() {
            if !sub.awaiting_snapshot && sub.start_after.is_none() {
                tell(&self.sizes, &self.id, *id, sub, sub.credit.sent_seq());
            }
        }
    }

    /// The last size change a subscriber given output up to `seq` is sure
    /// to have seen: the newest marked before `seq` (one marked right
    /// after frame `seq` may not be in what it was given, a snapshot taken
    /// before the mark, and is told again: the same size twice changes
    /// nothing); when every one kept is later, none of them.
    pub(super) fn size_known_before(&self, seq: u64) -> u64 {
        match self.sizes.iter().rev().find(|m| m.after_seq < seq) {
            Some(mark) => mark.id,
            None => self.sizes.front().map_or(self.next_size - 1, |m| m.id - 1),
        }
    }
}
