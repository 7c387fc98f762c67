//! `Feed`: what a subscriber holds to reach a session's output, whoever
//! publishes it (the `SessionActor` of a local session or the
//! `MirrorActor` of a remote one): the same messages either way.

use actix::dev::ToEnvelope;
use actix::prelude::*;

use crate::output::vocab::{Ack, ClaimSize, Subscribe, Unsubscribe};

#[derive(Clone)]
pub struct Feed {
    pub subscribe: Recipient<Subscribe>,
    pub unsubscribe: Recipient<Unsubscribe>,
    pub ack: Recipient<Ack>,
    pub claim: Recipient<ClaimSize>,
}

impl Feed {
    pub fn of<A>(addr: &Addr<A>) -> Feed
    where
        A: Actor + Handler<Subscribe> + Handler<Unsubscribe> + Handler<Ack> + Handler<ClaimSize>,
        A::Context: ToEnvelope<A, Subscribe>
            + ToEnvelope<A, Unsubscribe>
            + ToEnvelope<A, Ack>
            + ToEnvelope<A, ClaimSize>,
    {
        Feed {
            subscribe: addr.clone().recipient(),
            unsubscribe: addr.clone().recipient(),
            ack: addr.clone().recipient(),
            claim: addr.clone().recipient(),
        }
    }
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Feed")
    }
}
