//! The `SessionActor`'s lifecycle and one `Handler` per message.

use std::sync::atomic::Ordering;

use actix::prelude::*;
use bytes::BytesMut;
use nix::sys::signal::Signal;
use portable_pty::PtySize;
use termesh_transport::EventKind;

use super::*;

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.pull(ctx);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.signal(Signal::SIGKILL);
        Metrics::gauge(&self.metrics.subscribers, -(self.subs.len() as i64));
    }
}

impl Handler<Subscribe> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Subscribe, ctx: &mut Context<Self>) {
        let existing = self.subs.get(&msg.sub).map(|s| s.generation);
        if existing.is_some() && msg.from_seq.is_none() {
            // Not a recovery request: just answer.
            self.deliver(msg.sub, &msg.sink, self.subscribed(msg.req_id));
            return;
        }
        if existing.is_none() {
            Metrics::gauge(&self.metrics.subscribers, 1);
        }
        let generation = existing.map_or(0, |g| g + 1);
        let mut sub = Subscriber {
            sink: msg.sink.clone(),
            credit: Credit::new(msg.window, 0, 0),
            generation,
            awaiting_snapshot: true,
            prior: None,
            told_exit: false,
        };
        // Registered before replaying, so nothing published meanwhile is missed
        // (this actor is single-threaded: nothing is published meanwhile).
        self.deliver(msg.sub, &msg.sink, self.subscribed(msg.req_id));
        let snapshot = ScreenWant::Snapshot {
            scrollback: msg.scrollback,
        };
        match msg.from_seq {
            None => {
                self.subs.insert(msg.sub, sub);
                self.request_screen(
                    snapshot,
                    ScreenTo::Sub {
                        sub: msg.sub,
                        generation,
                    },
                    ctx,
                );
            }
            Some(n) => {
                if self.ring.replay_from(n).is_ok() {
                    let offset = self.ring.offset_after(n).unwrap_or(self.ring.end_offset());
                    sub.credit = Credit::new(msg.window, n, offset);
                    sub.awaiting_snapshot = false;
                    self.subs.insert(msg.sub, sub);
                    self.pump(msg.sub, ctx);
                } else {
                    let last_seq = self.ring.last_seq();
                    self.deliver(msg.sub, &msg.sink, Delivery::ResyncRequired { last_seq });
                    Metrics::add(&self.metrics.resyncs, 1);
                    self.subs.insert(msg.sub, sub);
                    self.request_screen(
                        snapshot,
                        ScreenTo::Sub {
                            sub: msg.sub,
                            generation,
                        },
                        ctx,
                    );
                }
                self.repaint();
            }
        }
        self.set_viewers();
        if existing.is_none() {
            self.notify_changed();
        }
    }
}

impl SessionActor {
    fn subscribed(&self, id: u64) -> Delivery {
        Delivery::Subscribed {
            id,
            last_seq: self.ring.last_seq(),
            oldest_seq: self.ring.oldest_seq(),
            cols: self.size.0,
            rows: self.size.1,
        }
    }

    /// SIGWINCH to the foreground process group so an in-place TUI redraws
    /// after a resume (Linux sends none for a same-size resize).
    fn repaint(&self) {
        if self.finished || self.reap_guard.is_none() {
            return;
        }
        pty::signal_foreground(self.pid, &self.master, Signal::SIGWINCH, true);
    }

    fn prune_marks(&mut self) {
        let start = self.ring.oldest_seq().saturating_sub(1);
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
        if self.subs.remove(&msg.sub).is_some() {
            Metrics::gauge(&self.metrics.subscribers, -1);
            self.set_viewers();
            self.notify_changed();
        }
    }
}

impl Handler<Ack> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Ack, ctx: &mut Context<Self>) {
        let Some(sub) = self.subs.get_mut(&msg.sub) else {
            return;
        };
        match &mut sub.prior {
            Some((restart, prior)) if msg.seq < *restart => {
                prior.on_ack(msg.seq, &self.ring);
                if prior.in_flight() == 0 {
                    sub.prior = None;
                }
            }
            _ => {
                sub.prior = None;
                sub.credit.on_ack(msg.seq, &self.ring);
            }
        }
        self.pump(msg.sub, ctx);
    }
}

impl Handler<Resize> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Resize, _: &mut Context<Self>) {
        if self.finished || (msg.cols, msg.rows) == self.size {
            return;
        }
        self.size = (msg.cols, msg.rows);
        if let Ok(master) = self.master.lock() {
            let _ = master.resize(PtySize {
                rows: msg.rows,
                cols: msg.cols,
                pixel_width: 0,
                pixel_height: 0,
            });
        }
        self.marks.push(ResizeMark {
            id: self.next_mark,
            after_seq: self.ring.last_seq(),
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
        if self.finished {
            return;
        }
        self.signal(msg.signal);
        if msg.signal != Signal::SIGKILL {
            // Whatever survived the grace time (the program, or members of
            // its groups that ignore the signal) is killed; `signal` sends
            // nothing once the program was reaped.
            ctx.run_later(self.settings.kill_grace, |act, _| {
                act.signal(Signal::SIGKILL);
            });
        }
    }
}

impl Handler<Rename> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Rename, _: &mut Context<Self>) {
        self.shared.update(|m| m.name = Some(msg.name.clone()));
        self.announce(EventKind::Renamed { name: msg.name });
    }
}

impl Handler<Tag> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Tag, _: &mut Context<Self>) {
        self.shared.update(|m| m.tags = msg.tags.clone());
        self.announce(EventKind::Tagged { tags: msg.tags });
    }
}

impl Handler<SetPhase> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: SetPhase, _: &mut Context<Self>) {
        self.shared.update(|m| m.phase = Some(msg.phase.clone()));
        self.announce(EventKind::Phase { phase: msg.phase });
    }
}

impl Handler<Close> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Close, ctx: &mut Context<Self>) {
        if !self.finished {
            self.signal(Signal::SIGKILL);
            self.finished = true;
            self.shared.exited.store(true, Ordering::Release);
        }
        self.broadcast(Delivery::Closed {
            removed: msg.removed,
        });
        ctx.stop();
    }
}

impl Handler<GetScreen> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: GetScreen, ctx: &mut Context<Self>) {
        self.request_screen(msg.want, ScreenTo::Reply(msg.reply), ctx);
    }
}

impl Handler<RawTail> for SessionActor {
    type Result = RawTailResult;

    fn handle(&mut self, msg: RawTail, _: &mut Context<Self>) -> RawTailResult {
        let mut parts = Vec::new();
        let mut total = 0;
        for frame in self.ring.iter().rev() {
            if total >= msg.limit {
                break;
            }
            total += frame.data.len();
            parts.push(frame.data.clone());
        }
        let mut out = BytesMut::with_capacity(total);
        for part in parts.iter().rev() {
            out.extend_from_slice(part);
        }
        let skip = out.len().saturating_sub(msg.limit);
        RawTailResult {
            last_seq: self.ring.last_seq(),
            data: out.freeze().split_off(skip),
        }
    }
}
