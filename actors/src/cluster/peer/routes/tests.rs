//! The routes: which frames reach a mirror, in what order with its link's
//! ups and downs, and that they pass the peer actor by.

use super::*;
use actix::prelude::*;

/// An actor that notes what reaches it (a mirror, or the peer actor).
struct Seen(Arc<Mutex<Vec<String>>>);

impl Actor for Seen {
    type Context = Context<Self>;
}

impl Seen {
    fn start_noting() -> (Addr<Seen>, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        (Seen(seen.clone()).start(), seen)
    }

    fn note(&self, what: String) {
        self.0.lock().unwrap().push(what);
    }
}

impl Handler<FromOwner> for Seen {
    type Result = ();

    fn handle(&mut self, msg: FromOwner, _: &mut Context<Self>) {
        self.note(match msg {
            FromOwner::Data(DataMsg::Output { session, seq, .. }) => format!("{session} {seq}"),
            FromOwner::Data(other) => format!("{other:?}"),
            FromOwner::Link(up) => format!("link {up}"),
        });
    }
}

impl Handler<FromLink> for Seen {
    type Result = ();

    fn handle(&mut self, FromLink(event): FromLink, _: &mut Context<Self>) {
        self.note(match event {
            LinkEvent::Data(_) => "data".into(),
            LinkEvent::Down { reason } => format!("down: {reason}"),
            _ => "other".into(),
        });
    }
}

fn output(session: &str, seq: u64) -> LinkEvent {
    LinkEvent::Data(DataMsg::Output {
        session: session.into(),
        seq,
        data: bytes::Bytes::from_static(b"x"),
    })
}

fn down(reason: &str) -> LinkEvent {
    LinkEvent::Down {
        reason: reason.into(),
    }
}

#[test]
fn frames_reach_their_own_mirror_only_while_the_link_is_open() {
    actix_rt::System::new().block_on(async {
        let (mirror, seen) = Seen::start_noting();
        let (peer, _) = Seen::start_noting();
        let routes = MirrorRoutes::default();
        let sink = routes.clone().sink(peer.recipient());
        routes.insert("s1".into(), mirror.clone().recipient());
        // Before the link is up.
        sink.send(output("s1", 1));
        routes.link(true);
        sink.send(output("s1", 2));
        // A session with no mirror here.
        sink.send(output("s2", 3));
        sink.send(output("s1", 4));
        // This side dropped the link (a breaker trip): its `link false`
        // comes after what was routed before, and nothing comes after it.
        routes.link(false);
        sink.send(output("s1", 5));
        // Handled after all of the above: they have all arrived.
        mirror.send(FromOwner::Link(false)).await.unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            ["link true", "s1 2", "s1 4", "link false", "link false"]
        );
    });
}

#[test]
fn the_peers_output_passes_the_peer_actor_by() {
    actix_rt::System::new().block_on(async {
        let (mirror, mirror_seen) = Seen::start_noting();
        let (peer, peer_seen) = Seen::start_noting();
        let routes = MirrorRoutes::default();
        let sink = routes.clone().sink(peer.clone().recipient());
        routes.insert("s1".into(), mirror.clone().recipient());
        routes.link(true);
        sink.send(output("s1", 7));
        sink.send(down("lost"));
        mirror.send(FromOwner::Link(true)).await.unwrap();
        peer.send(FromLink(down("barrier"))).await.unwrap();
        assert_eq!(
            *mirror_seen.lock().unwrap(),
            ["link true", "s1 7", "link true"]
        );
        assert_eq!(*peer_seen.lock().unwrap(), ["down: lost", "down: barrier"]);
    });
}

#[test]
fn a_mirror_that_ended_is_forgotten_and_gets_nothing() {
    actix_rt::System::new().block_on(async {
        let (mirror, seen) = Seen::start_noting();
        let routes = MirrorRoutes::default();
        routes.insert("s1".into(), mirror.clone().recipient());
        routes.link(true);
        assert!(routes.remove("s1"));
        assert!(!routes.remove("s1"));
        routes.route(DataMsg::Output {
            session: "s1".into(),
            seq: 1,
            data: bytes::Bytes::from_static(b"x"),
        });
        mirror.send(FromOwner::Link(false)).await.unwrap();
        assert_eq!(*seen.lock().unwrap(), ["link true", "link false"]);
    });
}
