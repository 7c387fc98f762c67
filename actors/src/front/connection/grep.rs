//! `grep` without a node: asked of every node of the cluster at once (this
//! one included, each through the request table), each node's hits passed
//! on as that node answers, then `grep_done` with the totals and the nodes
//! that failed. One reply slot is held for the whole search. A client that
//! leaves cancels it: the answers still to come are dropped, and each
//! node's scan ends by its time limit.

use std::cell::RefCell;
use std::rc::Rc;

use actix::fut::{wrap_stream, ActorStreamExt};
use actix::prelude::*;
use actix_web_actors::ws::WebsocketContext;
use futures_util::stream::FuturesUnordered;
use termesh_transport::{ClientMsg, ServerMsg};

use super::ConnectionActor;
use crate::error::ApiError;
use crate::front::grep::GrepSpec;
use crate::front::request::expected_reply;

type Ctx = WebsocketContext<ConnectionActor>;

#[derive(Default)]
struct Totals {
    hits: u64,
    scanned: u64,
    truncated: bool,
    errors: Vec<String>,
}

impl ConnectionActor {
    pub(super) fn grep_everywhere(
        &mut self,
        msg: ClientMsg,
        ctx: &mut Ctx,
    ) -> Result<(), ApiError> {
        let ClientMsg::Grep { id, .. } = msg else {
            return Err(ApiError::bad_request("not a grep"));
        };
        let max_hits = GrepSpec::parse(&msg)?.max_hits as u64;
        let slot = self.slots.take(expected_reply(&msg))?;
        let mut nodes = vec![self.node.node.clone()];
        nodes.extend(self.node.mesh.peers.all().into_iter().map(|p| p.entry.name));
        let asks: FuturesUnordered<_> = nodes
            .into_iter()
            .map(|name| {
                let mut one = msg.clone();
                if let ClientMsg::Grep { node, .. } = &mut one {
                    *node = Some(name.clone());
                }
                let reply = self.node.submit(one);
                async move { (name, reply.await) }
            })
            .collect();
        let totals = Rc::new(RefCell::new(Totals::default()));
        let seen = totals.clone();
        let work = wrap_stream::<_, Self>(asks)
            .map(move |(name, answer), act, ctx| {
                let mut t = seen.borrow_mut();
                match answer {
                    Ok(ServerMsg::GrepHits {
                        id,
                        node,
                        mut hits,
                        scanned_bytes,
                        truncated,
                    }) => {
                        let room = max_hits.saturating_sub(t.hits) as usize;
                        let cut = hits.len() > room;
                        hits.truncate(room);
                        t.hits += hits.len() as u64;
                        t.scanned += scanned_bytes;
                        t.truncated |= truncated || cut;
                        act.send(
                            ctx,
                            &ServerMsg::GrepHits {
                                id,
                                node,
                                hits,
                                scanned_bytes,
                                truncated: truncated || cut,
                            }
                            .bounded(),
                        );
                    }
                    Ok(ServerMsg::Error { message, .. }) => {
                        t.errors.push(format!("{name}: {message}"))
                    }
                    Ok(other) => t
                        .errors
                        .push(format!("{name}: unexpected answer {other:?}")),
                    Err(e) => t.errors.push(format!("{name}: {}", e.message)),
                }
            })
            .finish()
            .map(move |_, act, ctx| {
                let t = std::mem::take(&mut *totals.borrow_mut());
                let done = ServerMsg::GrepDone {
                    id,
                    hits: t.hits,
                    scanned_bytes: t.scanned,
                    truncated: t.truncated,
                    errors: t.errors,
                };
                let bytes = act
                    .slots
                    .reply(slot, termesh_transport::encode_server(&done));
                ctx.binary(bytes);
            });
        ctx.spawn(work);
        Ok(())
    }
}
