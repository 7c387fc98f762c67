//! The `PeerActor`'s part in mirroring, both ways: as the owner, it
//! subscribes to its sessions for the peer's mirrors (output out on this
//! side's data stream, acks in on the control stream); as the mirroring
//! side, it carries its mirrors' subscribes and acks to the peer and
//! keeps the routes by which the link hands them what arrives on the
//! peer's data streams (`routes`).

use std::sync::atomic::Ordering;

use actix::prelude::*;
use termesh_transport::peer::DataMsg;

use super::PeerActor;
use crate::cluster::owner::{FromOwner, ToOwner};
use crate::directory::registry::NEXT_SUB_ID;
use crate::output::publisher::Kind;
use crate::session::{
    Ack, ClaimSize, Deliver, Delivery, ReleaseSize, Resize, Subscribe, Unsubscribe,
};
use termesh_config::defaults::{MAX_COLS, MAX_ROWS};

/// Bounds of the window a peer's mirror may ask for.
const WINDOW_BOUNDS: (u64, u64) = (64 << 10, 16 << 20);

impl PeerActor {
    /// `msg` on the data stream, or the fast one (`lane`).
    pub(super) fn send_data(&mut self, msg: DataMsg, fast: bool) {
        // As `send`: the link's `Down` follows a failure here.
        let stream = match (&self.fast, fast) {
            (Some(fast), true) => fast,
            _ => match &self.data {
                Some(data) => data,
                None => return,
            },
        };
        let _ = stream.send(msg);
    }

    /// The peer's mirror of `session` subscribes (again).
    pub(super) fn mirror_subscribe(
        &mut self,
        session: String,
        from_seq: Option<u64>,
        window: u64,
        ctx: &mut Context<Self>,
    ) {
        let kept = self.upstream.remove(&session);
        if let Some(up) = &kept {
            up.handle.addr.do_send(Unsubscribe { sub: up.sub });
        }
        let Some(handle) = self.dir.get(&session) else {
            // A node shutting down no longer holds its sessions: for the
            // mirror that is its owner going away, not a removal.
            let removed = !self.dir.closing();
            let fast = kept.is_some_and(|mut up| up.fast(None, 0));
            self.send_data(DataMsg::Closed { session, removed }, fast);
            return;
        };
        let sub = NEXT_SUB_ID.fetch_add(1, Ordering::Relaxed);
        handle.addr.do_send(Subscribe {
            sub,
            sink: ctx.address().recipient(),
            req_id: 0,
            from_seq,
            window: window.clamp(WINDOW_BOUNDS.0, WINDOW_BOUNDS.1),
            scrollback: 0,
            kind: Kind::Mirror,
        });
        // The same mirror again: its seqs go on, on the stream it used.
        let up = match kept {
            Some(mut up) => {
                up.resubscribed(sub, handle, from_seq);
                up
            }
            None => super::lane::Upstream::new(sub, handle),
        };
        self.upstream.insert(session, up);
    }

    pub(super) fn mirror_ack(&mut self, session: &str, seq: u64) {
        if let Some(up) = self.upstream.get_mut(session) {
            up.acked(seq);
            up.handle.addr.do_send(Ack { sub: up.sub, seq });
        }
    }

    /// Ends every subscription this node holds for the peer's mirrors.
    pub(super) fn end_upstream(&mut self) {
        let sessions: Vec<String> = self.upstream.keys().cloned().collect();
        for session in sessions {
            self.mirror_unsubscribe(&session);
        }
    }

    /// The peer's mirror of `session` stands for its viewers' size: a
    /// claim by its upstream subscription (applied now with `apply`), or
    /// none any more (the size goes back to this node's sizers).
    pub(super) fn mirror_claim(&mut self, session: &str, size: Option<(u16, u16)>, apply: bool) {
        let Some(up) = self.upstream.get(session) else {
            return;
        };
        let Some((cols, rows)) =
            size.filter(|(c, r)| (1..=MAX_COLS).contains(c) && (1..=MAX_ROWS).contains(r))
        else {
            up.handle.addr.do_send(ReleaseSize { sub: up.sub });
            return;
        };
        up.handle.addr.do_send(ClaimSize {
            sub: up.sub,
            cols,
            rows,
        });
        if apply {
            // In order with the keys queued before it, as a client's.
            let applied = up.handle.input.resize(cols, rows);
            up.handle.addr.do_send(Resize {
                cols,
                rows,
                applied,
            });
        }
    }

    /// A client resumed through the peer's mirror of `session`.
    pub(super) fn mirror_repaint(&mut self, session: &str) {
        if self.upstream.contains_key(session) {
            if let Some(handle) = self.dir.get(session) {
                handle.addr.do_send(crate::session::Repaint);
            }
        }
    }

    pub(super) fn mirror_unsubscribe(&mut self, session: &str) {
        if let Some(up) = self.upstream.remove(session) {
            up.handle.addr.do_send(Unsubscribe { sub: up.sub });
        }
    }

    /// The link went up or down: the peer's mirrors of this node's
    /// sessions are gone (they subscribe again), and this node's mirrors
    /// of the peer's sessions are told.
    pub(super) fn mirrors_link(&mut self, up: bool) {
        if !up {
            self.end_upstream();
        }
        self.mirrors.link(up);
    }

    /// The routes the link's reader hands the peer's output by
    /// (`MirrorRoutes::sink`, the node's `LinkSink` for this peer).
    pub fn mirror_routes(&self) -> super::routes::MirrorRoutes {
        self.mirrors.clone()
    }
}

impl Handler<Deliver> for PeerActor {
    type Result = ();

    /// Output of a session of this node for the peer's mirror.
    fn handle(&mut self, msg: Deliver, _: &mut Context<Self>) {
        let Some(up) = self.upstream.get_mut(&*msg.session) else {
            return;
        };
        if up.sub != msg.sub {
            // Left over from a subscription that was replaced.
            return;
        }
        let fast = match &msg.item {
            // A mirror's subscription gets neither.
            Delivery::Snapshot { .. } | Delivery::Failed { .. } => return,
            Delivery::Output(frame) => {
                termesh_transport::hops::pass("out_peer", &frame.data);
                up.fast(Some(frame.seq), frame.data.len())
            }
            _ => up.fast(None, 0),
        };
        let session = msg.session.to_string();
        let data = match msg.item {
            Delivery::Subscribed {
                last_seq,
                oldest_seq,
                cols,
                rows,
                ..
            } => DataMsg::Subscribed {
                session,
                last_seq,
                oldest_seq,
                cols,
                rows,
            },
            Delivery::Output(frame) => DataMsg::Output {
                session,
                seq: frame.seq,
                data: frame.data.clone(),
            },
            Delivery::ResyncRequired { last_seq } => DataMsg::Resync { session, last_seq },
            Delivery::Event(event) => DataMsg::Event { session, event },
            Delivery::Closed { removed } => {
                self.upstream.remove(&session);
                DataMsg::Closed { session, removed }
            }
            Delivery::Snapshot { .. } | Delivery::Failed { .. } => return,
        };
        if fast && matches!(data, DataMsg::Output { .. }) && self.fast.is_some() {
            self.stats.fast_frames.fetch_add(1, Ordering::Relaxed);
        }
        self.send_data(data, fast);
    }
}

impl Handler<ToOwner> for PeerActor {
    type Result = ();

    /// From one of this node's mirrors of the peer's sessions.
    fn handle(&mut self, msg: ToOwner, _: &mut Context<Self>) {
        match msg {
            ToOwner::Subscribe {
                session,
                from_seq,
                window,
                sink,
            } => {
                if !self.link_open() {
                    sink.do_send(FromOwner::Link(false));
                } else {
                    self.send(termesh_transport::peer::PeerMsg::Subscribe {
                        session: session.to_string(),
                        from_seq,
                        window,
                    });
                }
                self.mirrors.insert(session, sink);
            }
            ToOwner::Ack { session, seq } => {
                self.send(termesh_transport::peer::PeerMsg::Ack {
                    session: session.to_string(),
                    seq,
                });
            }
            ToOwner::Repaint { session } => {
                self.send(termesh_transport::peer::PeerMsg::Repaint {
                    session: session.to_string(),
                });
            }
            // A peer of an older revision would end the link on it: its
            // viewers' sizes then stay outside the give-back.
            ToOwner::ClaimSize {
                session,
                size,
                apply,
            } if self.revision >= 4 => {
                self.send(termesh_transport::peer::PeerMsg::ClaimSize {
                    session: session.to_string(),
                    size,
                    apply,
                });
            }
            ToOwner::ClaimSize { .. } => {}
            ToOwner::End { session } => {
                if self.mirrors.remove(&session) {
                    self.send(termesh_transport::peer::PeerMsg::Unsubscribe {
                        session: session.to_string(),
                    });
                }
            }
        }
    }
}
