//! The newest N bytes of a session's output, however large N is, given
//! oldest first in bounded requests (PROTOCOL.md section 14): raw
//! `history` pages walk back from the newest frame to where the N bytes
//! begin, keeping the oldest pages found (up to [`KEEP`] bytes); the
//! pages not kept are asked for again, by the seqs the walk found, as
//! they are given out. One request carries at most [`PAGE`] bytes, so the
//! walk works through any node, and memory stays bounded whatever N is.

use std::future::Future;

use anyhow::{anyhow, bail};
use bytes::Bytes;
use termesh_transport::{ClientMsg, ServerMsg};

/// Raw output one request carries at most.
pub const PAGE: usize = 4 << 20;
/// Pages kept from the walk back, the oldest first.
const KEEP: usize = 16 << 20;

/// Whoever answers the requests: a client connection, or the node itself.
pub trait Ask {
    /// The answer to the request `make` builds with its id (an error
    /// reply as the error).
    fn ask(
        &mut self,
        make: impl FnOnce(u64) -> ClientMsg,
    ) -> impl Future<Output = anyhow::Result<ServerMsg>>;
}

/// One raw page the walk found.
struct Found {
    first_seq: u64,
    end_seq: u64,
    len: usize,
    data: Option<Bytes>,
}

/// A planned tail: where it ends, and its pages, newest first (given out
/// from the back).
pub struct Tail {
    session: String,
    seq: u64,
    pages: Vec<Found>,
    /// Bytes cut from the front of the oldest page (the walk found more
    /// than N).
    cut: usize,
}

impl Tail {
    /// Finds where the newest `n` bytes of `session` begin.
    pub async fn plan(ask: &mut impl Ask, session: &str, n: u64) -> anyhow::Result<Tail> {
        let first = raw(ask, session, n.min(PAGE as u64), None).await?;
        let mut tail = Tail {
            session: session.to_string(),
            seq: first.end_seq,
            pages: Vec::new(),
            cut: 0,
        };
        // What one request answers is all there is, or all that is asked.
        if n <= PAGE as u64 || (first.data.len() as u64) < n.min(PAGE as u64) {
            tail.pages.push(first.found());
            return Ok(tail);
        }
        let (mut before, mut found, mut kept) = (tail.seq.saturating_add(1), 0u64, 0usize);
        while found < n {
            let page = raw(ask, session, PAGE as u64, Some(before)).await?;
            if page.data.is_empty() {
                break;
            }
            found += page.data.len() as u64;
            kept += page.data.len();
            before = page.first_seq;
            let more = page.more;
            tail.pages.push(page.found());
            // The newest pages' bytes go first: they are asked for again.
            for p in tail.pages.iter_mut() {
                if kept <= KEEP {
                    break;
                }
                if let Some(data) = p.data.take() {
                    kept -= data.len();
                }
            }
            if !more {
                break;
            }
        }
        tail.cut = found.saturating_sub(n) as usize;
        Ok(tail)
    }

    pub fn session(&self) -> &str {
        &self.session
    }

    /// The seq the tail ends with (0 for a session with no output).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The next bytes, oldest first; `None` at the end.
    pub async fn next(&mut self, ask: &mut impl Ask) -> anyhow::Result<Option<Bytes>> {
        let Some(page) = self.pages.pop() else {
            return Ok(None);
        };
        let data = match page.data {
            Some(data) => data,
            None => {
                let again =
                    raw(ask, &self.session, page.len as u64, Some(page.end_seq + 1)).await?;
                if again.first_seq != page.first_seq || again.data.len() != page.len {
                    bail!(
                        "output {}..={} of {} was dropped (retention) while it was read",
                        page.first_seq,
                        page.end_seq,
                        self.session
                    );
                }
                again.data
            }
        };
        let cut = std::mem::take(&mut self.cut).min(data.len());
        Ok(Some(data.slice(cut..)))
    }
}

/// One answer to a raw `history`.
struct Raw {
    data: Bytes,
    first_seq: u64,
    end_seq: u64,
    more: bool,
}

impl Raw {
    fn found(self) -> Found {
        Found {
            first_seq: self.first_seq,
            end_seq: self.end_seq,
            len: self.data.len(),
            data: Some(self.data),
        }
    }
}

async fn raw(
    ask: &mut impl Ask,
    session: &str,
    limit: u64,
    before_seq: Option<u64>,
) -> anyhow::Result<Raw> {
    let msg = |id| ClientMsg::History {
        id,
        session: session.to_string(),
        limit: Some(limit),
        before_seq,
        rows: None,
    };
    match ask.ask(msg).await? {
        ServerMsg::History {
            seq,
            data,
            first_seq,
            more,
            ..
        } => Ok(Raw {
            data: Bytes::from(data.unwrap_or_default()),
            first_seq: first_seq.unwrap_or(0),
            end_seq: seq,
            more: more.unwrap_or(false),
        }),
        other => Err(anyhow!("unexpected reply to history: {other:?}")),
    }
}
