//! This node's mirrors of a peer's sessions, shared by the `PeerActor`
//! (which keeps them) and the link's reader (which hands each frame of the
//! peer's data streams straight to its mirror): a flood's frames never
//! pass the peer actor's mailbox, so a keystroke forwarded to the peer,
//! a ping or an ack there waits behind none of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use actix::Recipient;
use termesh_transport::peer::link::{LinkEvent, LinkSink};
use termesh_transport::peer::DataMsg;

use super::FromLink;
use crate::cluster::owner::FromOwner;

#[derive(Clone, Default)]
pub struct MirrorRoutes(Arc<Mutex<Routes>>);

#[derive(Default)]
struct Routes {
    /// Whether the link is up as the peer actor sees it: what a link sends
    /// after this side dropped it (a breaker trip) is stale and goes
    /// nowhere.
    open: bool,
    sinks: HashMap<Arc<str>, Recipient<FromOwner>>,
}

impl MirrorRoutes {
    fn lock(&self) -> MutexGuard<'_, Routes> {
        // A panic while holding it left plain data behind: still usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sink a link to the peer reports to: the peer's output goes to
    /// its mirror here by these routes, everything else to `actor`.
    pub fn sink(self, actor: Recipient<FromLink>) -> LinkSink {
        LinkSink::new(move |event| match event {
            LinkEvent::Data(msg) => self.route(msg),
            event => actor.do_send(FromLink(event)),
        })
    }

    /// `session`'s mirror here, from now on.
    pub fn insert(&self, session: Arc<str>, sink: Recipient<FromOwner>) {
        self.lock().sinks.insert(session, sink);
    }

    /// Forgets `session`'s mirror; whether there was one.
    pub fn remove(&self, session: &str) -> bool {
        self.lock().sinks.remove(session).is_some()
    }

    /// The link went up or down: frames pass from now on (or not), and
    /// each mirror still running is told, after every frame routed to it
    /// before (one lock orders the two).
    pub fn link(&self, up: bool) {
        let mut routes = self.lock();
        routes.open = up;
        routes.sinks.retain(|_, sink| sink.connected());
        for sink in routes.sinks.values() {
            sink.do_send(FromOwner::Link(up));
        }
    }

    /// Hands a frame of the peer's data streams to its mirror here, if the
    /// link is open and the mirror known (else it is dropped, as a frame
    /// for a mirror that ended).
    pub fn route(&self, msg: DataMsg) {
        termesh_transport::peer::hop_output("out_route", &msg);
        let routes = self.lock();
        if !routes.open {
            return;
        }
        if let Some(sink) = routes.sinks.get(msg.session()) {
            sink.do_send(FromOwner::Data(msg));
        }
    }
}

#[cfg(test)]
mod tests;
