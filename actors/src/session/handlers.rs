//! The `SessionActor`'s lifecycle and one `Handler` per message.

use actix::prelude::*;
use bytes::BytesMut;
use nix::sys::signal::Signal;
use termesh_transport::EventKind;

use super::*;

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if !self.core.finished() {
            // The first block, before the program's first output needs it.
            if let Some(upto) = self.core.intake.reserve(self.publisher.last_seq()) {
                self.reserve(upto, ctx);
            }
        }
        self.attend_start(ctx);
        self.pull(ctx);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.uncount_warm();
        // The node's own child ends with its session; a kept one only by an
        // explicit kill or release (`Close`, `finish`), never because the
        // actor went (a node stopping slowly).
        if !self.core.kept() {
            self.signal(Signal::SIGKILL);
        }
        self.publisher.clear();
    }
}

impl Handler<Subscribe> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Subscribe, ctx: &mut Context<Self>) {
        self.warm(ctx);
        let viewer = msg.kind == Kind::Viewer;
        let done = self.publisher.subscribe(Subscription::from(msg), self.size);
        self.after_publish(ctx);
        if done.resumed && viewer {
            self.repaint();
        }
        self.set_viewers();
        if done.added {
            self.notify_changed();
        }
    }
}

impl SessionActor {
    /// SIGWINCH to the foreground process group so an in-place TUI redraws
    /// after a resume (Linux sends none for a same-size resize).
    fn repaint(&self) {
        if !self.core.signallable() || self.reap_guard.is_none() {
            return;
        }
        if let Some(terminal) = &self.terminal {
            pty::signal_foreground(self.pid, terminal, Signal::SIGWINCH, true);
        }
    }

    fn prune_marks(&mut self) {
        let start = self.publisher.ring().oldest_seq().saturating_sub(1);
        let keep_from = self
            .marks
            .iter()
            .rposition(|m| m.after_seq <= start)
            .unwrap_or(0);
        self.marks.drain(..keep_from);
    }
}

impl Handler<Unsubscribe> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Unsubscribe, _: &mut Context<Self>) {
        if self.publisher.unsubscribe(msg.sub) {
            self.set_viewers();
            self.notify_changed();
        }
        if let Some(size) = self.claims.left(msg.sub) {
            self.give_size_back(size);
        }
    }
}

impl Handler<ReleaseSize> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: ReleaseSize, _: &mut Context<Self>) {
        if let Some(size) = self.claims.left(msg.sub) {
            self.give_size_back(size);
        }
    }
}

impl Handler<ClaimSize> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: ClaimSize, _: &mut Context<Self>) {
        // From a subscription still here only: one that left has nothing
        // to hold.
        if self.publisher.is_subscribed(msg.sub) {
            self.claims.claim(msg.sub, (msg.cols, msg.rows), self.size);
        }
    }
}

impl Handler<Ack> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Ack, ctx: &mut Context<Self>) {
        self.publisher.ack(msg.sub, msg.seq);
        self.after_publish(ctx);
    }
}

impl Handler<Resize> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Resize, _: &mut Context<Self>) {
        if !self.core.resizable() || (msg.cols, msg.rows) == self.size {
            return;
        }
        self.claims.resized((msg.cols, msg.rows));
        self.apply_size(msg.cols, msg.rows, msg.applied);
    }
}

impl SessionActor {
    /// The size of the sizer left, after the holder left: through the
    /// input queue, in order with the keys queued before it, as a client's
    /// resize goes.
    pub(super) fn give_size_back(&mut self, (cols, rows): (u16, u16)) {
        if !self.core.resizable() {
            return;
        }
        let applied = self.input.as_ref().is_some_and(|i| i.resize(cols, rows));
        self.apply_size(cols, rows, applied);
    }

    /// Gives the terminal (unless `applied`), the screen's marks, the
    /// listing and the viewers the new size.
    pub(super) fn apply_size(&mut self, cols: u16, rows: u16, applied: bool) {
        if !self.core.resizable() || (cols, rows) == self.size {
            return;
        }
        let msg = Resize {
            cols,
            rows,
            applied,
        };
        self.size = (msg.cols, msg.rows);
        if !msg.applied {
            if let Some(terminal) = &self.terminal {
                let _ = terminal.resize(msg.cols, msg.rows);
            }
        }
        self.marks.push(ResizeMark {
            id: self.next_mark,
            after_seq: self.publisher.last_seq(),
            cols: msg.cols,
            rows: msg.rows,
        });
        self.next_mark += 1;
        self.prune_marks();
        self.shared.update(|m| {
            m.cols = msg.cols;
            m.rows = msg.rows;
        });
        self.announce(EventKind::Resized {
            cols: msg.cols,
            rows: msg.rows,
        });
    }
}

impl Handler<Kill> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Kill, ctx: &mut Context<Self>) {
        // Whatever survives the grace time (the program, or members of its
        // groups that ignore the signal) is killed; nothing is sent once
        // the program was let go.
        let steps = self.core.kill(msg.signal);
        self.carry_out(steps, ctx);
    }
}

impl Handler<Rename> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Rename, _: &mut Context<Self>) {
        self.shared.update(|m| m.name = Some(msg.name.clone()));
        self.announce(EventKind::Renamed { name: msg.name });
    }
}

impl Handler<DetachAttaches> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: DetachAttaches, _: &mut Context<Self>) {
        self.publisher
            .broadcast(Delivery::Event(EventKind::Detached { keep: msg.keep }));
    }
}

impl Handler<Tag> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Tag, _: &mut Context<Self>) {
        self.shared.update(|m| m.tags = msg.tags.clone());
        self.announce(EventKind::Tagged { tags: msg.tags });
    }
}

impl Handler<Hooked> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Hooked, _: &mut Context<Self>) {
        if let Some(phase) = msg.phase {
            self.shared.update(|m| m.phase = Some(phase.clone()));
            self.announce(EventKind::Phase { phase });
        }
        if let Some(state) = msg.state {
            self.attend_hook(state);
        }
    }
}

impl Handler<Repaint> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: Repaint, _: &mut Context<Self>) {
        self.repaint();
    }
}

impl Handler<Close> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Close, ctx: &mut Context<Self>) {
        let steps = self.core.close(msg.removed);
        self.carry_out(steps, ctx);
    }
}

impl Handler<Leave> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Leave, ctx: &mut Context<Self>) {
        // Answered as the session closes: at once, or for a kept program
        // once the PTY's tasks ended (without an exit or EOF) and their
        // events are applied.
        self.leaving = Some(msg.0);
        let steps = self.core.leave();
        if steps.is_empty() {
            // Closed already.
            if let Some(done) = self.leaving.take() {
                let _ = done.send(());
            }
        }
        self.carry_out(steps, ctx);
    }
}

impl Handler<Released> for SessionActor {
    type Result = Option<tokio::sync::watch::Receiver<bool>>;

    fn handle(&mut self, _: Released, _: &mut Context<Self>) -> Self::Result {
        self.released.clone()
    }
}

impl Handler<GetScreen> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: GetScreen, ctx: &mut Context<Self>) {
        self.warm(ctx);
        self.request_screen(msg.want, ScreenTo::Reply(msg.reply), ctx);
    }
}

impl Handler<RawTail> for SessionActor {
    type Result = RawTailResult;

    fn handle(&mut self, msg: RawTail, ctx: &mut Context<Self>) -> RawTailResult {
        self.warm(ctx);
        let before = msg.before.unwrap_or(u64::MAX);
        let ring = self.publisher.ring();
        let mut parts = Vec::new();
        let mut total = 0;
        for frame in ring.iter().rev().filter(|f| f.seq < before) {
            let full = match msg.before {
                None => total >= msg.limit,
                Some(_) => !parts.is_empty() && total + frame.data.len() > msg.limit,
            };
            if full {
                break;
            }
            total += frame.data.len();
            parts.push(frame);
        }
        let first_seq = parts.last().map_or(0, |f| f.seq);
        let end_seq = parts.first().map_or(0, |f| f.seq);
        let more = ring.iter().next().is_some_and(|f| f.seq < first_seq);
        let mut out = BytesMut::with_capacity(total);
        for part in parts.iter().rev() {
            out.extend_from_slice(&part.data);
        }
        let skip = match msg.before {
            None => out.len().saturating_sub(msg.limit),
            Some(_) => 0,
        };
        RawTailResult {
            last_seq: self.publisher.last_seq(),
            data: out.freeze().split_off(skip),
            first_seq,
            end_seq,
            more,
        }
    }
}
