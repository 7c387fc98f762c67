//! The publisher's snapshots: which are wanted (a fresh attach, a
//! resync), the ring pins each implies until it is sent, and what a
//! computed or failed snapshot does for its subscriber.

use super::{restart_credit, Publisher, Sink, SnapshotWanted};
use crate::metrics::Metrics;
use crate::output::vocab::{Delivery, ScreenOut, ScreenResult, SubId};

impl<S: Sink> Publisher<S> {
    /// Snapshots wanted since the last call, for the owner to compute.
    pub fn take_wanted(&mut self) -> Vec<SnapshotWanted> {
        std::mem::take(&mut self.wanted)
    }

    pub fn has_wanted(&self) -> bool {
        !self.wanted.is_empty()
    }

    pub(super) fn want_snapshot(&mut self, sub: SubId, generation: u64, scrollback: usize) {
        // The snapshot will be at this seq or later; what follows it must
        // still be in the ring when the snapshot is delivered.
        self.pins.insert((sub, generation), self.ring.last_seq());
        self.repin();
        self.wanted.push(SnapshotWanted {
            sub,
            generation,
            scrollback,
        });
    }

    /// Lets the ring evict what wanted snapshots need (a mirror that may
    /// hold its owner's output no longer): a snapshot whose seq has left
    /// the ring when it is done is wanted again, at a newer seq.
    pub fn release_pins(&mut self) {
        self.pins.clear();
        self.repin();
    }

    pub(super) fn unpin(&mut self, sub: SubId, generation: u64) {
        if self.pins.remove(&(sub, generation)).is_some() {
            self.repin();
        }
    }

    pub(super) fn repin(&mut self) {
        self.ring.set_pin(self.pins.values().min().copied());
    }

    /// The snapshot for a wanted one. Delivered when output can continue
    /// after its seq; parked when the ring has not reached that seq yet;
    /// wanted again when that seq has left the ring meanwhile.
    pub fn snapshot_done(&mut self, id: SubId, generation: u64, result: ScreenResult) {
        let current = self
            .subs
            .get(&id)
            .is_some_and(|s| s.generation == generation && s.awaiting_snapshot);
        if !current {
            self.unpin(id, generation);
            return;
        }
        if result.seq > self.ring.last_seq() {
            // What it needs now is what follows its own seq: frames up to
            // there may go, or a full ring could never reach it.
            self.pins.insert((id, generation), result.seq);
            self.repin();
            self.parked.push((id, generation, result));
            return;
        }
        let Some(offset) = self.ring.offset_after(result.seq) else {
            self.unpin(id, generation);
            self.want_snapshot(id, generation, 0);
            return;
        };
        self.unpin(id, generation);
        let ScreenOut::Snapshot(data) = result.out else {
            return;
        };
        let known = self.size_known_before(result.seq);
        let Some(sub) = self.subs.get_mut(&id) else {
            return;
        };
        if sub.credit.sent_seq() > 0 || sub.credit.in_flight() > 0 {
            restart_credit(sub, result.seq, offset);
        } else {
            sub.credit.reset_to(result.seq, offset);
        }
        sub.awaiting_snapshot = false;
        // The snapshot has the size as of its seq.
        sub.told_size = sub.told_size.max(known);
        let sink = sub.sink.clone();
        self.send(
            id,
            &sink,
            Delivery::Snapshot {
                seq: result.seq,
                cols: result.cols,
                rows: result.rows,
                data,
            },
        );
        self.pump(id);
    }

    /// A wanted snapshot could not be made: the subscription ends with
    /// `message`. Whether it did (it may have been replaced or gone).
    pub fn snapshot_failed(&mut self, id: SubId, generation: u64, message: String) -> bool {
        self.unpin(id, generation);
        let current = self
            .subs
            .get(&id)
            .is_some_and(|s| s.generation == generation && s.awaiting_snapshot);
        if !current {
            return false;
        }
        if let Some(s) = self.subs.remove(&id) {
            Metrics::gauge(&self.metrics.subscribers, -1);
            let code = termesh_transport::ErrorCode::Internal;
            self.send(id, &s.sink, Delivery::Failed { code, message });
        }
        true
    }
}
