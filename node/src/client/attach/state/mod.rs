//! The attach client's state across connections: where the stream stands
//! (last seq shown, acks), typed keys not yet sent, the link's health and
//! the status row, read-only mode, and what each server message or local
//! event does to them. No I/O: messages, keys, sizes and the link's
//! silence come in; what to send goes into an outbox (`take_outbox`) and
//! what to draw into the view's buffer, which the driver (`attach/mod.rs`)
//! writes out.

use std::time::{Duration, Instant};

use termesh_transport::{ClientMsg, EventKind, ServerMsg, SessionStatus};

use super::backoff::Backoff;
use super::display::{Display, Failed, RawPage, Scrolled};
use super::keys::{Key, KeyFilter};
use super::raw::Raw;
use super::resync::{Apply, Resync, Snap};
use super::view::{View, ViewOptions};
use super::{AttachOptions, Ended, Outside};
use crate::client::Fatal;
use history::{HISTORY_FILL_ID, HISTORY_OLDER_ID, HISTORY_SCAN_ID};
use stdin::Stdin;

mod errors;
mod history;
mod link;
mod status;
mod stdin;
#[cfg(test)]
mod tests;

pub use status::key_name;

/// Keystrokes kept while disconnected; more are dropped.
const MAX_PENDING_INPUT: usize = 64 * 1024;
/// The window this client asks for; it acks every quarter of it.
const WINDOW: u64 = 1 << 20;
/// The id of this client's `subscribe` request.
const SUBSCRIBE_ID: u64 = 1;
/// The id of the `list` that asks, once subscribed, whether the session's
/// program is gone with its node (`lost`): no event says so.
const LIST_ID: u64 = 2;
/// The id of the `history` the scroll mode asks for.
const HISTORY_ID: u64 = 3;
/// The id of the `detach` an `attach -d` sends once subscribed.
const DETACH_ID: u64 = 4;
/// The ids of the `screen` requests after a resize count up from here.
const SCREEN_IDS: u64 = 100;
/// The largest session a node makes (PROTOCOL.md, `resize`).
pub use termesh_config::defaults::{MAX_COLS, MAX_ROWS};
/// How often the round trip is measured for predictive echo.
const RTT_EVERY: Duration = Duration::from_secs(1);
/// The size drawn for when stdout is no terminal.
const DEFAULT_TERM: (u16, u16) = (80, 24);
/// How long a notice (read-only, help) stays in the status row.
const NOTICE: Duration = Duration::from_secs(4);

pub enum Step {
    Continue,
    End(Ended),
}

pub struct State {
    opts: AttachOptions,
    pub view: Box<dyn Display>,
    keys: KeyFilter,
    pub backoff: Backoff,
    /// Seq of the last output or snapshot shown; `None` before the first.
    last_seq: Option<u64>,
    reset_next_snapshot: bool,
    unacked: u64,
    pending_input: Vec<u8>,
    read_only: bool,
    /// What the status row says when keys are typed in read-only mode.
    read_only_note: &'static str,
    /// The size was sent once: the first attach takes the size.
    sized: bool,
    /// This connection has sent a size: the node knows it as a sizer of
    /// the session (to give the size back to when a later one leaves).
    claimed: bool,
    /// The last size sent was the session's own (only so the node counts
    /// this attach as a sizer): a viewer token's refusal of it is taken
    /// quietly (the terminal is not told until a key is typed).
    quiet_claim: bool,
    stdin: Stdin,
    /// Since when the link is down, and when the next attempt is due.
    offline_since: Option<Instant>,
    retry_at: Option<Instant>,
    /// The link is up but the node has been silent this long.
    quiet_for: Option<Duration>,
    /// Since when the session's own node is unreachable from the node this
    /// client is connected to (`event{unreachable}`).
    owner_unreachable: Option<Instant>,
    last_ping: Instant,
    notice: Option<(String, Instant)>,
    redraw_at: Option<Instant>,
    /// From the node's ping interval: when to probe, and when silence
    /// means the link is gone.
    probe_after: Duration,
    stale_after: Duration,
    /// The session is `lost`: the attach ends once its screen is shown.
    lost: bool,
    /// The node closed the link because it shut down (its words).
    node_stopped: Option<String>,
    /// This attach's tag: a `detached` event naming another ends it.
    tag: String,
    /// `-d` was carried out (once, on the first subscription).
    took: bool,
    /// The outer terminal's size; `None` when stdout is no terminal (the
    /// size is then never sent).
    term: Option<(u16, u16)>,
    /// The session's size as the node last said (a snapshot, `resized`).
    session_size: Option<(u16, u16)>,
    /// Messages for the node, in order, until the driver sends them.
    outbox: Vec<ClientMsg>,
    /// After a resize: the node's screen awaited to take in place of the
    /// model's (the renderer only).
    resync: Option<Resync>,
    next_screen_id: u64,
    /// The scroll mode was asked for and its history is awaited: keys
    /// typed meanwhile are the scroll mode's, kept here (bounded).
    scroll_wanted: Option<Vec<u8>>,
    /// `--at`: the scroll mode opens there after the first snapshot.
    scroll_at: Option<u64>,
    /// The last round-trip probe: when it went, and its nonce while it
    /// is unanswered.
    rtt_probe: Option<(Option<u64>, Instant)>,
}

impl State {
    /// `term`: the outer terminal's size, `None` when stdout is none.
    pub fn new(opts: AttachOptions, term: Option<(u16, u16)>) -> State {
        let scroll_at = opts.at;
        let shown = term.unwrap_or(DEFAULT_TERM);
        let view: Box<dyn Display> = if opts.raw {
            Box::new(Raw::new(shown))
        } else {
            Box::new(View::new(
                shown,
                opts.title.clone(),
                key_name(opts.prefix),
                ViewOptions {
                    predict: opts.predict,
                    mouse: opts.mouse,
                },
            ))
        };
        let mut st = State {
            keys: KeyFilter::new(opts.prefix),
            read_only: opts.read_only,
            read_only_note: "read-only: keys are not sent",
            opts,
            view,
            backoff: Backoff::default(),
            last_seq: None,
            reset_next_snapshot: false,
            unacked: 0,
            pending_input: Vec::new(),
            sized: false,
            claimed: false,
            quiet_claim: false,
            stdin: Stdin::Terminal,
            offline_since: None,
            retry_at: None,
            quiet_for: None,
            owner_unreachable: None,
            last_ping: Instant::now(),
            notice: None,
            redraw_at: None,
            probe_after: Duration::from_secs(5),
            stale_after: Duration::from_secs(30),
            lost: false,
            node_stopped: None,
            tag: format!("{:016x}", rand::random::<u64>()),
            took: false,
            rtt_probe: None,
            resync: None,
            next_screen_id: SCREEN_IDS,
            scroll_wanted: None,
            scroll_at,
            term,
            session_size: None,
            outbox: Vec::new(),
        };
        if st.read_only {
            st.notify(st.read_only_note.into());
        }
        st
    }

    /// Stdin is no terminal (`stdin::Stdin`).
    pub fn input_is_piped(&mut self) {
        self.stdin = Stdin::Piped { typed: false };
    }

    /// Piped input ended and every byte of it went to the node.
    pub fn input_sent(&self) -> bool {
        self.stdin.done(!self.pending_input.is_empty())
    }

    /// What to send the node, in order, taken.
    pub fn take_outbox(&mut self) -> Vec<ClientMsg> {
        std::mem::take(&mut self.outbox)
    }

    fn send(&mut self, msg: ClientMsg) {
        self.outbox.push(msg);
    }

    /// The session has been shown (a snapshot or output written).
    pub fn shown(&self) -> bool {
        self.last_seq.is_some()
    }

    pub fn redraw_at(&self) -> Option<Instant> {
        self.redraw_at
    }

    pub fn subscribe(&mut self) {
        self.unacked = 0;
        // A new connection: the node knows nothing of the last one's size.
        self.claimed = false;
        // A new subscription starts from a snapshot anyway; a history asked
        // of the old connection will not come.
        self.resync = None;
        self.scroll_wanted = None;
        self.quiet_for = None;
        self.send(ClientMsg::Subscribe {
            id: SUBSCRIBE_ID,
            session: self.opts.session.clone(),
            from_seq: self.last_seq,
            window: Some(WINDOW),
            // The renderer keeps no history of its own (its scroll mode
            // asks for it): only `--raw` writes history lines.
            scrollback: Some(if self.opts.raw {
                self.opts.scrollback
            } else {
                0
            }),
        });
    }

    pub fn on_message(&mut self, msg: ServerMsg) -> anyhow::Result<Step> {
        self.quiet_for = None;
        match msg {
            ServerMsg::Subscribed { .. } => {
                // (A size given while the link was down comes as a
                // `resized` in order with the replayed output.)
                // The stream is back: the backoff starts over.
                self.backoff.reset();
                self.offline_since = None;
                self.node_stopped = None;
                self.owner_unreachable = None;
                self.retry_at = None;
                self.send(ClientMsg::list(LIST_ID));
                if self.opts.take && !std::mem::replace(&mut self.took, true) {
                    self.send(ClientMsg::Detach {
                        id: DETACH_ID,
                        session: self.opts.session.clone(),
                        keep: self.tag.clone(),
                    });
                }
            }
            ServerMsg::Sessions {
                id: LIST_ID,
                sessions,
                ..
            } => {
                let status = sessions
                    .iter()
                    .find(|s| s.id == self.opts.session)
                    .map(|s| s.status);
                if status == Some(SessionStatus::Lost) {
                    self.lost = true;
                    if self.shown() {
                        return Ok(self.end_lost());
                    }
                }
            }
            ServerMsg::Snapshot {
                id: Some(id),
                seq,
                cols,
                rows,
                data,
                ..
            } => {
                let (cols, rows) = bounded(cols, rows);
                self.session_size = Some((cols, rows));
                if let Some(r) = self.resync.as_mut().filter(|r| r.id == id) {
                    let snap = Snap {
                        seq,
                        cols,
                        rows,
                        data,
                    };
                    match r.snapshot(snap, self.last_seq.unwrap_or(0)) {
                        Apply::Now { snap, replay } => {
                            self.view.replace(snap.cols, snap.rows, &snap.data, &replay);
                            self.resync = None;
                            self.schedule_redraw();
                        }
                        Apply::Wait => {}
                        Apply::GiveUp => self.resync = None,
                    }
                }
            }
            ServerMsg::Snapshot {
                seq,
                cols,
                rows,
                data,
                ..
            } => {
                let (cols, rows) = bounded(cols, rows);
                self.session_size = Some((cols, rows));
                // A fresh attach or a resync starts from a reset terminal; a
                // resume never gets here (it continues with output).
                let reset =
                    self.last_seq.is_none() || std::mem::take(&mut self.reset_next_snapshot);
                self.view.snapshot(cols, rows, &data, reset);
                self.last_seq = Some(seq);
                self.schedule_redraw();
                if let Some(at) = self.scroll_at.take() {
                    self.scroll_wanted = Some(Vec::new());
                    self.notify(format!("loading the history at seq {at}"));
                    self.ask_page(Some(at.saturating_add(1)));
                }
                if self.lost {
                    return Ok(self.end_lost());
                }
                // The first attach takes the size (the last to attach or
                // resize wins, as in tmux), sent even when it is the
                // session's already: the node then counts this attach as
                // a sizer. After the snapshot, so the `resized` event comes
                // after it too.
                if !std::mem::replace(&mut self.sized, true) && !self.read_only {
                    self.send_size();
                }
            }
            ServerMsg::History {
                id,
                lines,
                first_seq,
                more,
                ..
            } if id == HISTORY_ID || id == HISTORY_OLDER_ID => {
                let older = first_seq.filter(|_| more == Some(true));
                self.on_history(id, lines.unwrap_or_default(), older);
            }
            ServerMsg::History {
                id,
                seq,
                data,
                first_seq,
                more,
                ..
            } if id == HISTORY_SCAN_ID || id == HISTORY_FILL_ID => {
                let page = RawPage {
                    data: data.unwrap_or_default(),
                    first_seq: first_seq.unwrap_or(0),
                    end_seq: seq,
                    more: more == Some(true),
                };
                self.on_raw_page(id, page);
            }
            ServerMsg::ResyncRequired { .. } => self.reset_next_snapshot = true,
            ServerMsg::Pong { nonce: Some(n) } => {
                if let Some((Some(sent), at)) = self.rtt_probe {
                    if n.as_u64() == Some(sent) {
                        self.view.rtt(at.elapsed());
                        self.rtt_probe = Some((None, at));
                    }
                }
            }
            ServerMsg::Output { session, seq, data } => {
                self.view.output(&data);
                if let Some(r) = self.resync.as_mut() {
                    match r.output(seq, &data) {
                        Ok(Some(snap)) => {
                            self.view.replace(snap.cols, snap.rows, &snap.data, &[]);
                            self.resync = None;
                        }
                        Ok(None) => {}
                        Err(()) => self.resync = None,
                    }
                }
                self.view.settle(seq);
                self.schedule_redraw();
                self.last_seq = Some(seq);
                self.unacked += data.len() as u64;
                if self.unacked >= WINDOW / 4 {
                    self.unacked = 0;
                    self.send(ClientMsg::Ack { session, seq });
                }
            }
            ServerMsg::Event { event, .. } => match event {
                EventKind::Exited { exit_code, signal } => {
                    self.view.keep_screen();
                    return Ok(Step::End(Ended::Exited {
                        code: exit_code,
                        signal,
                    }));
                }
                EventKind::Resized { cols, rows } => self.session_sized(bounded(cols, rows)),
                EventKind::Unreachable => {
                    self.owner_unreachable = Some(Instant::now());
                    self.refresh_status();
                }
                EventKind::Reachable => {
                    self.owner_unreachable = None;
                    self.refresh_status();
                }
                // Its program died with its node's restart.
                EventKind::Lost => return Ok(self.end_lost()),
                EventKind::Detached { keep } if keep != self.tag => {
                    return Ok(Step::End(Ended::TakenOver))
                }
                _ => {}
            },
            ServerMsg::Error {
                id, code, message, ..
            } => return self.on_error(id, code, message),
            _ => {}
        }
        Ok(Step::Continue)
    }

    fn end_lost(&mut self) -> Step {
        self.view.keep_screen();
        Step::End(Ended::Lost)
    }

    /// A local event; `online`: a link is up to send on.
    pub fn on_outside(&mut self, event: Outside, online: bool) -> Option<Ended> {
        match event {
            Outside::Keys(chunk) => {
                let mut take_size = false;
                let mut typed = false;
                let mut scroll = false;
                let mut wants = Vec::new();
                for key in self.keys.feed(&chunk) {
                    match key {
                        Key::Input(bytes) if self.view.scrolling() => {
                            wants.push(self.view.scroll_keys(&bytes));
                            wants.extend(self.view.scroll_more());
                        }
                        Key::Input(bytes) if self.scroll_wanted.is_some() => {
                            if let Some(kept) = self.scroll_wanted.as_mut() {
                                let room = 4096usize.saturating_sub(kept.len());
                                kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
                            }
                        }
                        Key::Input(_) if self.read_only => self.notify(self.read_only_note.into()),
                        Key::Input(bytes) => {
                            let (bytes, wheel_up) = self.view.map_input(bytes);
                            if wheel_up && self.scroll_wanted.is_none() {
                                // The wheel opens the scroll mode, a
                                // wheel's worth up.
                                scroll = true;
                                self.scroll_wanted = Some(b"\x1b[<64;1;1M".to_vec());
                            }
                            typed = true;
                            self.stdin.typed(&bytes);
                            self.view.typed(&bytes, self.last_seq.unwrap_or(0));
                            let room = MAX_PENDING_INPUT.saturating_sub(self.pending_input.len());
                            self.pending_input
                                .extend_from_slice(&bytes[..bytes.len().min(room)]);
                        }
                        Key::Detach => return Some(Ended::Detached),
                        Key::TakeSize if self.read_only => {
                            self.notify("read-only: the size is not sent".into());
                        }
                        Key::TakeSize => {
                            take_size = true;
                            self.notify("the session takes this terminal's size".into());
                        }
                        Key::Scroll if !self.view.scrolling() && self.scroll_wanted.is_none() => {
                            scroll = true;
                            self.scroll_wanted = Some(Vec::new());
                        }
                        Key::Scroll => {}
                        Key::Help => self.notify(self.help()),
                    }
                }
                if online {
                    // Typing makes this the most recently active viewer:
                    // the session takes its size back from another one.
                    if take_size || (typed && self.size_taken_elsewhere()) {
                        self.send_size();
                    }
                    if scroll {
                        self.notify("loading the history".into());
                        self.ask_newest();
                    }
                    for want in wants {
                        self.ask_scroll(Some(want));
                    }
                } else if scroll {
                    self.scroll_wanted = None;
                    self.notify("the scroll mode needs the link".into());
                }
            }
            Outside::StdinEnded => self.stdin.ended(self.read_only),
            Outside::WindowChanged(term) => {
                self.term = term;
                self.view.term_resized(term.unwrap_or(DEFAULT_TERM));
                self.schedule_redraw();
                if online && !self.read_only {
                    self.send_size();
                }
            }
            Outside::Signal(n) => return Some(Ended::Signal(n)),
        }
        None
    }

    fn schedule_redraw(&mut self) {
        self.redraw_at = self.view.due();
    }

    /// Sends the keys typed so far, unless the link is down or quiet:
    /// bytes written into a link that has gone silent may never arrive, so
    /// they wait for a sign of life or for the next subscription.
    pub fn flush_input(&mut self) {
        let waiting = self.quiet_for.is_some() || self.offline_since.is_some();
        if self.pending_input.is_empty() || self.read_only || waiting {
            return;
        }
        let data = std::mem::take(&mut self.pending_input);
        let session = self.opts.session.clone();
        self.send(ClientMsg::Input { session, data });
    }

    /// The session has a new size: the view takes it, and the node's
    /// screen in place of the model's.
    fn session_sized(&mut self, (cols, rows): (u16, u16)) {
        self.session_size = Some((cols, rows));
        self.view.session_resized(cols, rows);
        self.schedule_redraw();
        if !self.opts.raw {
            // The node's model may have pulled rows back from its history:
            // take its screen.
            let id = self.next_screen_id;
            self.next_screen_id += 1;
            self.resync = Some(Resync::new(id, self.last_seq.unwrap_or(0)));
            self.send(ClientMsg::Screen {
                id,
                session: self.opts.session.clone(),
                scrollback: Some(0),
            });
        }
    }

    /// The session has a size another viewer gave it, not this terminal's,
    /// or this connection never said its size (the node does not know it
    /// as a sizer).
    fn size_taken_elsewhere(&self) -> bool {
        let own = self.term.map(|(c, r)| bounded(c, r));
        own.is_some()
            && (!self.claimed || (self.session_size.is_some() && own != self.session_size))
    }

    /// Sends this terminal's size, within the node's bounds (a larger
    /// terminal shows the session at the largest size, top-left); never
    /// from a piped attach.
    fn send_size(&mut self) {
        if self.stdin.is_piped() {
            return;
        }
        if let Some((cols, rows)) = self.term {
            let (cols, rows) = (cols.clamp(1, MAX_COLS), rows.clamp(1, MAX_ROWS));
            self.claimed = true;
            self.quiet_claim = self.session_size == Some((cols, rows));
            let session = self.opts.session.clone();
            self.send(ClientMsg::Resize {
                session,
                cols: cols.into(),
                rows: rows.into(),
            });
        }
    }
}

/// A size from the node, within the bounds a node keeps (a model of a
/// wrong, huge size would take the client's memory).
fn bounded(cols: u16, rows: u16) -> (u16, u16) {
    (cols.clamp(1, MAX_COLS), rows.clamp(1, MAX_ROWS))
}
