//! This node's mirrors of a peer's sessions, shared by the `PeerActor`
//! (which keeps them) and the link's reader (which hands each frame of the
//! peer's data streams straight to its mirror): a flood's frames never
//! pass the peer actor's mailbox, so a keystroke forwarded to the peer,
//! a ping or an ack there waits behind none of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use actix::Recipient;
use termesh_transport::peer::DataMsg;

use crate::cluster::owner::FromOwner;

#[derive(Clone, Default)]
pub struct MirrorRoutes(Arc<Mutex<Routes>>);

#[derive(Default)]
pub struct Routes {
    /// Whether the link is up as the peer actor sees it: what a link sends
    /// after this side dropped it (a breaker trip) is stale and goes
    /// nowhere.
    pub open: bool,
    pub sinks: HashMap<Arc<str>, Recipient<FromOwner>>,
}

impl MirrorRoutes {
    /// The routes, to change or read. Held while a frame is handed on, so
    /// a change made here (the link closed, a mirror told) is ordered with
    /// the frames before it and after it.
    pub fn lock(&self) -> MutexGuard<'_, Routes> {
        // A panic while holding it left plain data behind: still usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
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
mod tests {
    use super::*;
    use actix::prelude::*;

    /// A mirror that notes what reaches it.
    struct Mirror(Arc<Mutex<Vec<String>>>);

    impl Actor for Mirror {
        type Context = Context<Self>;
    }

    impl Handler<FromOwner> for Mirror {
        type Result = ();

        fn handle(&mut self, msg: FromOwner, _: &mut Context<Self>) {
            let what = match msg {
                FromOwner::Data(DataMsg::Output { session, seq, .. }) => format!("{session} {seq}"),
                FromOwner::Data(other) => format!("{other:?}"),
                FromOwner::Link(up) => format!("link {up}"),
            };
            self.0.lock().unwrap().push(what);
        }
    }

    fn output(session: &str, seq: u64) -> DataMsg {
        DataMsg::Output {
            session: session.into(),
            seq,
            data: b"x".to_vec(),
        }
    }

    #[test]
    fn frames_reach_their_own_mirror_and_only_while_the_link_is_open() {
        actix_rt::System::new().block_on(async {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let mirror = Mirror(seen.clone()).start();
            let routes = MirrorRoutes::default();
            routes
                .lock()
                .sinks
                .insert("s1".into(), mirror.clone().recipient());
            // Before the link is up, and for a session with no mirror here.
            routes.route(output("s1", 1));
            routes.lock().open = true;
            routes.route(output("s1", 2));
            routes.route(output("s2", 3));
            routes.route(output("s1", 4));
            // After this side dropped the link (a breaker trip).
            routes.lock().open = false;
            routes.route(output("s1", 5));
            // Handled after all of the above: they have all arrived.
            mirror.send(FromOwner::Link(false)).await.unwrap();
            assert_eq!(*seen.lock().unwrap(), ["s1 2", "s1 4", "link false"]);
        });
    }
}
