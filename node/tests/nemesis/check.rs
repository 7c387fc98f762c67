//! The nemesis checker, as pure logic over what the run recorded: each
//! program's numbering inside one contiguous stretch of output (`Lines`),
//! one payload per seq across every client and node (`Frames`), and, after
//! the run, requests answered within their bound and no subscriber left
//! silent while its session's owner was away (`judge`).

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

/// A session's program prints `\nstart PID\n`, then `PID N .` lines with
/// N counting from 1, and `PID echo TOKEN .` for each line typed into it.
/// A stretch of output without a resync must follow that numbering; a
/// truncated line is allowed only right before a new run's `start`.
#[derive(Debug, Default)]
pub struct Lines {
    partial: Vec<u8>,
    /// A line boundary was seen since the last reset (what came before it
    /// is the tail of a line whose start this stretch did not hold).
    synced: bool,
    /// The run (pid) and the last number seen in it.
    last: Option<(u64, u64)>,
    /// A truncated line came: the next line must start a new run.
    truncated: Option<String>,
    /// Tokens echoed in the current run.
    echoed: HashSet<String>,
    pub lines: u64,
}

impl Lines {
    /// A resync or snapshot: what follows is a new stretch.
    pub fn reset(&mut self) {
        *self = Lines {
            lines: self.lines,
            ..Default::default()
        };
    }

    /// Feeds output bytes; each break of the program's numbering is pushed
    /// to `bad`. Returns the tokens echoed by the program in these bytes.
    pub fn feed(&mut self, data: &[u8], bad: &mut Vec<String>) -> Vec<String> {
        let mut echoed = Vec::new();
        let mut rest = data;
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            let (head, tail) = rest.split_at(nl);
            rest = &tail[1..];
            if !self.synced {
                self.synced = true;
                self.partial.clear();
                continue;
            }
            self.partial.extend_from_slice(head);
            let line = String::from_utf8_lossy(&self.partial)
                .trim_end_matches('\r')
                .to_string();
            self.partial.clear();
            if let Some(token) = self.line(&line, bad) {
                echoed.push(token);
            }
        }
        if self.synced {
            self.partial.extend_from_slice(rest);
        }
        echoed
    }

    fn line(&mut self, line: &str, bad: &mut Vec<String>) -> Option<String> {
        self.lines += 1;
        if line.is_empty() {
            return None;
        }
        let words: Vec<&str> = line.split(' ').collect();
        let number = |w: &str| w.parse::<u64>().ok();
        match words.as_slice() {
            ["start", pid] if number(pid).is_some() => {
                self.last = number(pid).map(|p| (p, 0));
                self.truncated = None;
                self.echoed.clear();
                None
            }
            [pid, n, ".", pad @ ..]
                if number(pid).is_some()
                    && number(n).is_some()
                    && pad.iter().all(|w| w.bytes().all(|b| b == b'x')) =>
            {
                let (pid, n) = (number(pid).unwrap(), number(n).unwrap());
                self.after_truncated(line, bad);
                match self.last {
                    Some((p, last)) if p == pid && n != last + 1 => {
                        bad.push(format!("numbering jumps from {last} to {n} in run {pid}"))
                    }
                    Some((p, _)) if p != pid => {
                        bad.push(format!("run {pid} follows run {p} without a start"))
                    }
                    _ => {}
                }
                self.last = Some((pid, n));
                None
            }
            [pid, "echo", token, "."] if number(pid).is_some() => {
                self.after_truncated(line, bad);
                if !self.echoed.insert(token.to_string()) {
                    bad.push(format!("typed line {token} echoed twice in one run"));
                }
                Some(token.to_string())
            }
            _ => {
                self.after_truncated(line, bad);
                self.truncated = Some(line.to_string());
                None
            }
        }
    }

    /// A whole line followed a truncated one without a new run between.
    fn after_truncated(&mut self, line: &str, bad: &mut Vec<String>) {
        if let Some(cut) = self.truncated.take() {
            bad.push(format!(
                "damaged line {cut:?} followed by {line:?}, not a new run"
            ));
        }
    }
}

/// Every frame any client received, by (session, seq): its length and a
/// hash of its bytes. A seq with two different payloads is a violation.
#[derive(Debug, Default)]
pub struct Frames {
    seen: HashMap<(usize, u64), (usize, u64)>,
    pub bytes: u64,
}

impl Frames {
    pub fn check(&mut self, session: usize, seq: u64, data: &[u8]) -> Result<(), String> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        data.hash(&mut h);
        let this = (data.len(), h.finish());
        self.bytes += data.len() as u64;
        match self.seen.insert((session, seq), this) {
            Some(old) if old != this => Err(format!(
                "session {session} seq {seq} came with two payloads ({} and {} bytes)",
                old.0, this.0
            )),
            _ => Ok(()),
        }
    }

    pub fn distinct(&self) -> usize {
        self.seen.len()
    }
}

/// A time since the run started, in seconds.
pub type At = f64;

/// One fault the nemesis applied: `node` away from `from` (the nodes that
/// lost it) between `start` and `end`; `dies` when its programs died with
/// it (kill -9, SIGTERM).
#[derive(Debug, Clone)]
pub struct Fault {
    pub kind: &'static str,
    pub node: usize,
    pub from: Vec<usize>,
    pub start: At,
    pub end: At,
    pub dies: bool,
}

/// One subscription: a client on node `on` following `owner`'s session
/// from `start` to `end`, with the times it heard that the owner was away
/// or back (`unreachable`, `reachable`, `lost`, a resync or an error).
#[derive(Debug, Clone)]
pub struct Sub {
    pub client: usize,
    pub on: usize,
    pub owner: usize,
    pub session: usize,
    pub start: At,
    pub end: At,
    pub told: Vec<At>,
}

/// One request: sent on node `on` at `sent`; `answered` when a reply or an
/// error came, `None` when the connection ended first (at `ended`).
#[derive(Debug, Clone)]
pub struct Request {
    pub kind: &'static str,
    /// The session asked about (its index), if any.
    pub session: Option<usize>,
    pub on: usize,
    pub sent: At,
    pub answered: Option<At>,
    pub ended: At,
    pub outcome: String,
}

#[derive(Debug, Default)]
pub struct Verdict {
    pub violations: Vec<String>,
    /// Client-seconds between an owner going away and a subscriber being
    /// told, summed over the checked subscriptions.
    pub silence: f64,
    pub silences_checked: usize,
    pub requests_answered: usize,
    pub requests_cut: usize,
}

/// Whether node `n` was in a fault that covers `[from, to]` (widened by
/// `slack` at both ends): its connections may then end or go quiet.
fn faulted(faults: &[Fault], n: usize, from: At, to: At, slack: f64) -> bool {
    faults
        .iter()
        .any(|f| f.node == n && f.start - slack <= to && f.end + slack >= from)
}

/// An owner stopped by SIGTERM says so to its peers as it goes: its
/// remote viewers hear `unreachable` within this.
pub const STOP_TOLD: f64 = 10.0;
/// An owner back after its programs died: its remote viewers hear `lost`
/// (or `unreachable` first) within this of its return.
pub const LOST_TOLD: f64 = 15.0;

/// Judges requests and silences. A request must be answered within
/// `bound` unless its node was faulted meanwhile (its connection may then
/// end unanswered). A subscription on a healthy node to a session of a
/// faulted owner must be told (`unreachable`, `lost`, ...): within
/// `STOP_TOLD` of a SIGTERM; within `told_within` (the breaker's bound) of
/// any fault that lasts that long; within `LOST_TOLD` of the return of an
/// owner whose programs died. It is checked when it lasted to that
/// deadline.
pub fn judge(
    faults: &[Fault],
    subs: &[Sub],
    requests: &[Request],
    bound: f64,
    told_within: f64,
) -> Verdict {
    let mut v = Verdict::default();
    for r in requests {
        match r.answered {
            Some(at) if at - r.sent <= bound || faulted(faults, r.on, r.sent, at, 1.0) => {
                v.requests_answered += 1
            }
            Some(at) => v.violations.push(format!(
                "{} on node {} answered after {:.1} s (bound {bound} s)",
                r.kind,
                r.on,
                at - r.sent
            )),
            None if faulted(faults, r.on, r.sent, r.ended, 1.0) => v.requests_cut += 1,
            None if r.ended - r.sent < bound => v.violations.push(format!(
                "{} on node {} at {:.1} s: the connection ended unanswered at {:.1} s ({}) with no fault on that node",
                r.kind, r.on, r.sent, r.ended, r.outcome
            )),
            None => v.violations.push(format!(
                "{} on node {} at {:.1} s (session {:?}): no answer in {bound} s",
                r.kind, r.on, r.sent, r.session
            )),
        }
    }
    for f in faults {
        let deadline = if f.kind == "sigterm" {
            f.start + STOP_TOLD
        } else if f.end - f.start >= told_within {
            f.start + told_within
        } else if f.dies {
            f.end + LOST_TOLD
        } else {
            continue;
        };
        for s in subs {
            let checked = s.owner == f.node
                && f.from.contains(&s.on)
                && s.start <= f.start
                && s.end >= deadline
                && !faulted(faults, s.on, s.start, s.end, 0.0);
            if !checked {
                continue;
            }
            v.silences_checked += 1;
            match s.told.iter().find(|t| **t >= f.start && **t <= deadline) {
                Some(t) => v.silence += t - f.start,
                None => {
                    v.silence += deadline - f.start;
                    v.violations.push(format!(
                        "client {} on node {} heard nothing from {:.1} s to {deadline:.1} s after {} of node {} (session {})",
                        s.client, s.on, f.start, f.kind, f.node, s.session
                    ))
                }
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(l: &mut Lines, text: &str) -> Vec<String> {
        let mut bad = Vec::new();
        l.feed(text.as_bytes(), &mut bad);
        bad
    }

    #[test]
    fn numbering_in_order_across_chunks_is_clean() {
        let mut l = Lines::default();
        assert!(feed(&mut l, "\nstart 7\n7 1 . xxx\n7 2").is_empty());
        assert!(feed(&mut l, " .\r\n7 3 .\n7 echo x .\n7 4 .\n").is_empty());
    }

    #[test]
    fn a_skipped_or_repeated_number_is_caught() {
        let mut l = Lines::default();
        assert_eq!(feed(&mut l, "\nstart 7\n7 1 .\n7 3 .\n").len(), 1);
        let mut l = Lines::default();
        assert_eq!(feed(&mut l, "\n7 5 .\n7 5 .\n").len(), 1);
    }

    #[test]
    fn a_truncated_line_is_allowed_only_before_a_new_run() {
        let mut l = Lines::default();
        assert!(feed(&mut l, "\n7 1 .\n7 2\nstart 9\n9 1 .\n").is_empty());
        let mut l = Lines::default();
        assert!(!feed(&mut l, "\n7 1 .\n7 2\n7 3 .\n").is_empty());
    }

    #[test]
    fn a_new_run_without_start_and_a_twice_typed_echo_are_caught() {
        let mut l = Lines::default();
        assert_eq!(feed(&mut l, "\n7 1 .\n9 1 .\n").len(), 1);
        let mut l = Lines::default();
        assert_eq!(feed(&mut l, "\n7 echo a .\n7 echo a .\n").len(), 1);
    }

    #[test]
    fn a_reset_forgets_the_run_and_the_partial_line() {
        let mut l = Lines::default();
        assert!(feed(&mut l, "\n7 1 .\n7 2 ").is_empty());
        l.reset();
        assert!(feed(&mut l, "0 .\n7 40 .\n7 41 .\n").is_empty());
    }

    #[test]
    fn one_payload_per_seq() {
        let mut f = Frames::default();
        assert!(f.check(0, 1, b"a").is_ok());
        assert!(f.check(0, 1, b"a").is_ok());
        assert!(f.check(1, 1, b"b").is_ok());
        assert!(f.check(0, 1, b"b").is_err());
    }

    fn sub(on: usize, owner: usize, start: At, end: At, told: Vec<At>) -> Sub {
        Sub {
            client: 0,
            on,
            owner,
            session: 0,
            start,
            end,
            told,
        }
    }

    fn fault(node: usize, start: At, end: At) -> Fault {
        Fault {
            kind: "partition",
            node,
            from: vec![0, 1, 2],
            start,
            end,
            dies: false,
        }
    }

    #[test]
    fn a_subscriber_told_in_time_is_clean_and_a_silent_one_is_not() {
        let faults = [fault(0, 10.0, 50.0)];
        let told = judge(
            &faults,
            &[sub(1, 0, 0.0, 60.0, vec![25.0])],
            &[],
            30.0,
            25.0,
        );
        assert!(told.violations.is_empty());
        assert_eq!(told.silences_checked, 1);
        assert!((told.silence - 15.0).abs() < 1e-9);
        let silent = judge(&faults, &[sub(1, 0, 0.0, 60.0, vec![])], &[], 30.0, 25.0);
        assert_eq!(silent.violations.len(), 1);
        // Not checked: too short a fault, a sub that ended early, a sub on
        // the faulted node, a sub of another owner.
        let short = [fault(0, 10.0, 20.0)];
        let subs = [
            sub(1, 0, 0.0, 60.0, vec![]),
            sub(1, 0, 0.0, 20.0, vec![]),
            sub(0, 0, 0.0, 60.0, vec![]),
            sub(1, 2, 0.0, 60.0, vec![]),
        ];
        assert_eq!(judge(&short, &subs, &[], 30.0, 25.0).silences_checked, 0);
        assert_eq!(
            judge(&faults, &subs[1..], &[], 30.0, 25.0).silences_checked,
            0
        );
        // A short fault that killed the programs: `lost` must follow the
        // owner's return.
        let died = [Fault {
            dies: true,
            ..fault(0, 10.0, 15.0)
        }];
        let late = [sub(1, 0, 0.0, 60.0, vec![31.0])];
        assert_eq!(judge(&died, &late, &[], 30.0, 25.0).violations.len(), 1);
        let lost = [sub(1, 0, 0.0, 60.0, vec![29.0])];
        assert!(judge(&died, &lost, &[], 30.0, 25.0).violations.is_empty());
        // A clean stop is told at once, however short.
        let stopped = [Fault {
            kind: "sigterm",
            ..died[0].clone()
        }];
        assert_eq!(judge(&stopped, &lost, &[], 30.0, 25.0).violations.len(), 1);
        let prompt = [sub(1, 0, 0.0, 60.0, vec![11.0])];
        assert!(judge(&stopped, &prompt, &[], 30.0, 25.0)
            .violations
            .is_empty());
    }

    #[test]
    fn requests_are_answered_in_bound_or_cut_by_a_fault() {
        let req = |on, sent, answered: Option<At>, ended| Request {
            kind: "screen",
            session: None,
            on,
            sent,
            answered,
            ended,
            outcome: String::new(),
        };
        let faults = [fault(0, 10.0, 20.0)];
        let rs = [
            req(1, 0.0, Some(1.0), 1.0),
            req(0, 9.5, None, 10.0),
            req(0, 9.0, Some(19.0), 19.0),
        ];
        let v = judge(&faults, &[], &rs, 5.0, 25.0);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!((v.requests_answered, v.requests_cut), (2, 1));
        let rs = [req(1, 0.0, Some(9.0), 9.0), req(1, 0.0, None, 2.0)];
        assert_eq!(judge(&faults, &[], &rs, 5.0, 25.0).violations.len(), 2);
    }
}
