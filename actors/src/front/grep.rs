//! `grep` (docs/protocol.md section 16): a regex over the plain text of
//! stored output (as `read` makes it: `plain`), line by line. Each node
//! searches its own sessions' output logs, one session after another on a
//! blocking thread, within the request's hit bound and time limit; the node
//! a client asked fans the request out to every node at once and passes
//! each node's hits on as that node finishes (`connection`). `Scan` is the
//! part without I/O.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use termesh_transport::{
    AgentState, ClientMsg, ErrorCode, GrepHit, ServerMsg, GREP_DEFAULT_HITS, GREP_DEFAULT_MS,
    GREP_MAX_CONTEXT, GREP_MAX_HITS, GREP_MAX_MS,
};

use super::ops::NodeCtx;
use super::plain::Plain;
use crate::error::ApiError;

/// A pattern's compiled size at most (a hostile one cannot take the
/// node's memory).
const MAX_PATTERN: usize = 1 << 20;

/// A `grep` request, checked.
#[derive(Debug, Clone)]
pub struct GrepSpec {
    pub regex: regex::Regex,
    pub sessions: Option<Vec<String>>,
    pub since_ms: u64,
    pub state: Option<AgentState>,
    pub context: usize,
    pub max_hits: usize,
    pub limit: Duration,
}

impl GrepSpec {
    /// The fields of a `grep` message, checked and bounded.
    pub fn parse(msg: &ClientMsg) -> Result<GrepSpec, ApiError> {
        let ClientMsg::Grep {
            pattern,
            sessions,
            since_ms,
            state,
            context,
            max_hits,
            timeout_ms,
            ..
        } = msg
        else {
            return Err(ApiError::bad_request("not a grep"));
        };
        if pattern.is_empty() {
            return Err(ApiError::bad_request("`pattern` is empty"));
        }
        let regex = regex::RegexBuilder::new(pattern)
            .size_limit(MAX_PATTERN)
            .build()
            .map_err(|e| ApiError::bad_request(format!("`pattern` is not a regex: {e}")))?;
        let state = match state.as_deref() {
            None => None,
            Some(name) => Some(AgentState::parse(name).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "`state` `{name}`: the states are working, waiting and idle"
                ))
            })?),
        };
        let check = |what: &str, value: u64, max: u64| {
            if value > max {
                Err(ApiError::bad_request(format!(
                    "`{what}` of {value} is over its bound, {max}"
                )))
            } else {
                Ok(value)
            }
        };
        Ok(GrepSpec {
            regex,
            sessions: sessions.clone(),
            since_ms: since_ms.unwrap_or(0),
            state,
            context: check(
                "context",
                context.unwrap_or(0).into(),
                GREP_MAX_CONTEXT.into(),
            )? as usize,
            max_hits: check(
                "max_hits",
                max_hits.unwrap_or(GREP_DEFAULT_HITS).into(),
                GREP_MAX_HITS.into(),
            )?
            .max(1) as usize,
            limit: Duration::from_millis(check(
                "timeout_ms",
                timeout_ms.unwrap_or(GREP_DEFAULT_MS),
                GREP_MAX_MS,
            )?),
        })
    }
}

/// One session's output, scanned line by line: the lines that match, each
/// with up to `context` lines before and after.
pub struct Scan<'a> {
    spec: &'a GrepSpec,
    session: String,
    node: String,
    plain: Plain,
    before: VecDeque<String>,
    /// Hits still taking lines after them.
    open: Vec<(usize, usize)>,
    pub hits: Vec<GrepHit>,
    pub scanned: u64,
}

impl<'a> Scan<'a> {
    pub fn new(spec: &'a GrepSpec, session: &str, node: &str) -> Scan<'a> {
        Scan {
            spec,
            session: session.to_string(),
            node: node.to_string(),
            plain: Plain::default(),
            before: VecDeque::new(),
            open: Vec::new(),
            hits: Vec::new(),
            scanned: 0,
        }
    }

    /// Frame `seq`'s bytes; `false` once the hits are enough (after the
    /// last hit's context).
    pub fn feed(&mut self, seq: u64, data: &[u8]) -> bool {
        self.scanned += data.len() as u64;
        self.plain.feed(data);
        let lines = self.plain.take_lines();
        let mut spent = Vec::with_capacity(lines.len());
        for line in lines {
            if let Some(old) = self.line(seq, line) {
                spent.push(old);
            }
        }
        self.plain.recycle(spent);
        !self.full()
    }

    /// The output ended: its unended line counts as a line.
    pub fn finish(&mut self, seq: u64) {
        let partial = self.plain.partial();
        if !partial.is_empty() && !self.full() {
            self.line(seq, partial);
        }
    }

    fn full(&self) -> bool {
        self.hits.len() >= self.spec.max_hits && self.open.is_empty()
    }

    /// One line; gives back a line buffer done with.
    fn line(&mut self, seq: u64, line: String) -> Option<String> {
        self.open.retain_mut(|(hit, left)| {
            self.hits[*hit].after.push(line.clone());
            *left -= 1;
            *left > 0
        });
        if self.hits.len() < self.spec.max_hits && self.spec.regex.is_match(&line) {
            self.hits.push(GrepHit {
                session: self.session.clone(),
                node: self.node.clone(),
                seq,
                line: line.clone(),
                before: self.before.iter().cloned().collect(),
                after: Vec::new(),
            });
            if self.spec.context > 0 {
                self.open.push((self.hits.len() - 1, self.spec.context));
            }
        }
        if self.spec.context == 0 {
            return Some(line);
        }
        self.before.push_back(line);
        (self.before.len() > self.spec.context)
            .then(|| self.before.pop_front())
            .flatten()
    }
}

/// Scans `sessions` one after another until the time or the node's hits
/// (`found`, shared by the lanes) run out: the hits, bytes scanned, and
/// whether it stopped early.
fn scan_lane(
    store: &crate::store::StoreHandle,
    spec: &GrepSpec,
    node: &str,
    sessions: &[String],
    deadline: Instant,
    found: &AtomicUsize,
) -> (Vec<GrepHit>, u64, bool) {
    let (mut hits, mut scanned) = (Vec::new(), 0);
    for session in sessions {
        if found.load(Ordering::Relaxed) >= spec.max_hits || Instant::now() >= deadline {
            return (hits, scanned, true);
        }
        let mut scan = Scan::new(spec, session, node);
        let mut last = 0;
        let walked = store.walk(session, 0, |frame| {
            last = frame.seq;
            if frame.at_ms < spec.since_ms {
                return Instant::now() < deadline;
            }
            scan.feed(frame.seq, &frame.data) && Instant::now() < deadline
        });
        if let Err(e) = walked {
            tracing::warn!(session, "grep: its output cannot be read: {e}");
        }
        scan.finish(last);
        scanned += scan.scanned;
        found.fetch_add(scan.hits.len(), Ordering::Relaxed);
        hits.append(&mut scan.hits);
    }
    let stopped = Instant::now() >= deadline;
    (hits, scanned, stopped)
}

impl NodeCtx {
    /// This node's part of a `grep`: its sessions' stored output, on as
    /// many blocking threads as the machine has cores, sessions dealt out
    /// in turn.
    pub async fn grep_here(&self, id: u64, spec: GrepSpec) -> Result<ServerMsg, ApiError> {
        let store = self.store()?.clone();
        let mut sessions: Vec<String> = self
            .dir
            .list()
            .into_iter()
            .filter(|s| spec.sessions.as_ref().is_none_or(|w| w.contains(&s.id)))
            .filter(|s| spec.state.is_none() || s.state == spec.state)
            .map(|s| s.id)
            .collect();
        sessions.sort();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let lanes = cores.min(sessions.len()).max(1);
        let deadline = Instant::now() + spec.limit;
        let found = Arc::new(AtomicUsize::new(0));
        let spec = Arc::new(spec);
        let mut running = Vec::new();
        for lane in 0..lanes {
            let mine: Vec<String> = sessions.iter().skip(lane).step_by(lanes).cloned().collect();
            let (store, spec, found, node) = (
                store.clone(),
                spec.clone(),
                found.clone(),
                self.node.clone(),
            );
            running.push(tokio::task::spawn_blocking(move || {
                scan_lane(&store, &spec, &node, &mine, deadline, &found)
            }));
        }
        let (mut hits, mut scanned, mut truncated) = (Vec::new(), 0, false);
        for lane in running {
            let (more, bytes, stopped) = lane
                .await
                .map_err(|e| ApiError::new(ErrorCode::Internal, format!("grep: {e}")))?;
            hits.extend(more);
            scanned += bytes;
            truncated |= stopped;
        }
        hits.sort_by(|a, b| (&a.session, a.seq).cmp(&(&b.session, b.seq)));
        truncated |= hits.len() > spec.max_hits;
        hits.truncate(spec.max_hits);
        // Within a reply's bound, with room for the fields around.
        let mut bytes = 0;
        let fit = hits
            .iter()
            .take_while(|h| {
                bytes += h.reply_bytes();
                bytes <= termesh_transport::MAX_REPLY - (64 << 10)
            })
            .count();
        truncated |= fit < hits.len();
        hits.truncate(fit);
        Ok(ServerMsg::GrepHits {
            id,
            node: self.node.clone(),
            hits,
            scanned_bytes: scanned,
            truncated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(pattern: &str, context: u32, max_hits: u32) -> GrepSpec {
        GrepSpec::parse(&ClientMsg::Grep {
            id: 1,
            pattern: pattern.into(),
            sessions: None,
            since_ms: None,
            state: None,
            context: Some(context),
            max_hits: Some(max_hits),
            timeout_ms: None,
            node: None,
        })
        .unwrap()
    }

    #[test]
    fn lines_match_as_read_shows_them_with_context_and_their_frame() {
        let spec = spec("^err", 1, 10);
        let mut scan = Scan::new(&spec, "s", "a");
        // A line split across frames, colours and a redraw.
        scan.feed(1, b"ok 1\r\n\x1b[31mer");
        scan.feed(2, b"ror: disk\x1b[0m\r\nok 2\n50%\r100%\nerr");
        scan.feed(3, b"or again");
        scan.finish(3);
        let hits: Vec<(u64, &str, &[String], &[String])> = scan
            .hits
            .iter()
            .map(|h| (h.seq, h.line.as_str(), &h.before[..], &h.after[..]))
            .collect();
        assert_eq!(
            hits,
            [
                (
                    2,
                    "error: disk",
                    &["ok 1".to_string()][..],
                    &["ok 2".to_string()][..]
                ),
                (3, "error again", &["100%".to_string()][..], &[][..]),
            ]
        );
        assert_eq!(scan.scanned, 53);
    }

    #[test]
    fn max_hits_stops_the_scan_once_the_last_hit_has_its_context() {
        let spec = spec("x", 2, 1);
        let mut scan = Scan::new(&spec, "s", "a");
        assert!(scan.feed(1, b"x1\n"));
        assert!(scan.feed(2, b"a\n"));
        assert!(!scan.feed(3, b"b\nx2\n"));
        assert_eq!(scan.hits.len(), 1);
        assert_eq!(scan.hits[0].after, ["a", "b"]);
    }

    #[test]
    fn bad_requests_are_refused_with_the_bound() {
        let grep = |pattern: &str, context: u32| {
            GrepSpec::parse(&ClientMsg::Grep {
                id: 1,
                pattern: pattern.into(),
                sessions: None,
                since_ms: None,
                state: Some("idle".into()),
                context: Some(context),
                max_hits: None,
                timeout_ms: None,
                node: None,
            })
        };
        assert!(grep("(", 0).unwrap_err().message.contains("not a regex"));
        assert!(grep("", 0).is_err());
        assert!(grep("a", 11).unwrap_err().message.contains("context"));
        assert!(grep("a{1000}{1000}", 0).is_err(), "too big compiled");
        assert_eq!(grep("a", 0).unwrap().state, Some(AgentState::Idle));
    }
}
