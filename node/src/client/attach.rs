//! `termesh attach`: a raw-mode terminal client. It shows the session's
//! screen (with scrollback) on attach, forwards keystrokes and window-size
//! changes, acks output as it writes it, and after a dropped connection
//! reconnects and resumes with `from_seq`: no screen clear, nothing missed.
//! The detach key (default Ctrl-]) leaves the session running.

use std::io::Read;
use std::time::Duration;

use anyhow::{bail, Context};
use termesh_transport::{ClientMsg, ErrorCode, EventKind, ServerMsg};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::{Client, Target};

/// Keystrokes kept while disconnected; more are dropped (and rung for).
const MAX_PENDING_INPUT: usize = 64 * 1024;
/// The window this client asks for; it acks every quarter of it.
const WINDOW: u64 = 1 << 20;

#[derive(Debug, Clone)]
pub struct AttachOptions {
    pub session: String,
    pub detach_key: u8,
    pub scrollback: u64,
}

/// Why the attach ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Detached,
    Exited(u32),
}

struct RawMode(bool);

impl RawMode {
    fn enable() -> RawMode {
        RawMode(crossterm::terminal::enable_raw_mode().is_ok())
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if self.0 {
            let _ = crossterm::terminal::disable_raw_mode();
        }
    }
}

struct State {
    opts: AttachOptions,
    /// Stdin ended (a file or /dev/null, not a terminal): the attach goes
    /// on showing output until the session ends; errors still surface.
    stdin_done: bool,
    /// Seq of the last output or snapshot written; `None` before the first.
    last_seq: Option<u64>,
    reset_next_snapshot: bool,
    unacked: u64,
    pending_input: Vec<u8>,
    stdout: tokio::io::Stdout,
}

enum Step {
    Continue,
    End(Ended),
}

pub async fn attach(target: &Target, opts: AttachOptions) -> anyhow::Result<Ended> {
    // Fail early, before raw mode, when the node cannot be reached.
    let mut client = Some(Client::connect(target).await?);
    let _raw = RawMode::enable();
    let mut input = stdin_reader();
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
        .context("cannot watch window-size changes")?;
    let mut state = State {
        opts,
        stdin_done: false,
        last_seq: None,
        reset_next_snapshot: false,
        unacked: 0,
        pending_input: Vec::new(),
        stdout: tokio::io::stdout(),
    };
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut conn = match client.take() {
            Some(c) => c,
            None => match Client::connect(target).await {
                Ok(c) => {
                    backoff = Duration::from_millis(100);
                    c
                }
                Err(_) => {
                    // Keep taking keystrokes (the detach key works offline).
                    let sleep = tokio::time::sleep(jitter(backoff));
                    tokio::pin!(sleep);
                    loop {
                        tokio::select! {
                            _ = &mut sleep => break,
                            chunk = input.recv(), if !state.stdin_done => {
                                if let Some(end) = state.take_input(chunk) {
                                    return state.finish(end).await;
                                }
                            }
                        }
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            },
        };
        // A dropped connection (Err) is retried once the session has been
        // shown; before that it is an error worth reporting.
        match session_loop(&mut conn, &mut state, &mut input, &mut winch).await {
            Ok(end) => return state.finish(end).await,
            Err(_) if state.last_seq.is_some() => continue,
            Err(e) => return Err(e),
        }
    }
}

async fn session_loop(
    conn: &mut Client,
    state: &mut State,
    input: &mut mpsc::Receiver<Vec<u8>>,
    winch: &mut tokio::signal::unix::Signal,
) -> anyhow::Result<Ended> {
    let session = state.opts.session.clone();
    conn.send(&ClientMsg::Subscribe {
        id: 1,
        session: session.clone(),
        from_seq: state.last_seq,
        window: Some(WINDOW),
        scrollback: Some(state.opts.scrollback),
    })
    .await?;
    state.unacked = 0;
    loop {
        tokio::select! {
            msg = conn.recv() => {
                if let Step::End(end) = state.on_message(conn, msg?).await? {
                    return Ok(end);
                }
            }
            chunk = input.recv(), if !state.stdin_done => {
                if let Some(end) = state.take_input(chunk) {
                    return Ok(end);
                }
                state.flush_input(conn).await?;
            }
            _ = winch.recv() => state.send_size(conn).await?,
        }
    }
}

impl State {
    async fn on_message(&mut self, conn: &mut Client, msg: ServerMsg) -> anyhow::Result<Step> {
        match msg {
            ServerMsg::Subscribed { cols, rows, .. } => {
                if let Ok((c, r)) = crossterm::terminal::size() {
                    if (c, r) != (cols, rows) {
                        self.send_size(conn).await?;
                    }
                }
                self.flush_input(conn).await?;
            }
            ServerMsg::Snapshot { seq, data, .. } => {
                // A fresh attach or a resync starts from a reset terminal; a
                // resume never gets here (it continues with output).
                if self.last_seq.is_none() || std::mem::take(&mut self.reset_next_snapshot) {
                    self.stdout.write_all(b"\x1bc").await?;
                }
                self.stdout.write_all(&data).await?;
                self.stdout.flush().await?;
                self.last_seq = Some(seq);
            }
            ServerMsg::ResyncRequired { .. } => self.reset_next_snapshot = true,
            ServerMsg::Output { session, seq, data } => {
                self.stdout.write_all(&data).await?;
                self.stdout.flush().await?;
                self.last_seq = Some(seq);
                self.unacked += data.len() as u64;
                if self.unacked >= WINDOW / 4 {
                    self.unacked = 0;
                    conn.send(&ClientMsg::Ack { session, seq }).await?;
                }
            }
            ServerMsg::Event {
                event: EventKind::Exited { exit_code, .. },
                ..
            } => {
                return Ok(Step::End(Ended::Exited(exit_code)));
            }
            ServerMsg::Error {
                code: ErrorCode::NotFound,
                message,
                ..
            } => {
                bail!("{message}");
            }
            _ => {}
        }
        Ok(Step::Continue)
    }

    /// Takes a stdin chunk; returns `Some` when the detach key was pressed.
    /// The end of stdin (only possible when it is not a terminal) stops
    /// input, not the attach: output and errors still show.
    fn take_input(&mut self, chunk: Option<Vec<u8>>) -> Option<Ended> {
        let Some(chunk) = chunk else {
            self.stdin_done = true;
            return None;
        };
        let (before, detach) = match chunk.iter().position(|b| *b == self.opts.detach_key) {
            Some(at) => (&chunk[..at], true),
            None => (&chunk[..], false),
        };
        let room = MAX_PENDING_INPUT.saturating_sub(self.pending_input.len());
        self.pending_input
            .extend_from_slice(&before[..before.len().min(room)]);
        detach.then_some(Ended::Detached)
    }

    async fn flush_input(&mut self, conn: &mut Client) -> anyhow::Result<()> {
        if self.pending_input.is_empty() {
            return Ok(());
        }
        let data = std::mem::take(&mut self.pending_input);
        let session = self.opts.session.clone();
        conn.send(&ClientMsg::Input { session, data }).await
    }

    async fn send_size(&mut self, conn: &mut Client) -> anyhow::Result<()> {
        if let Ok((cols, rows)) = crossterm::terminal::size() {
            let session = self.opts.session.clone();
            conn.send(&ClientMsg::Resize {
                session,
                cols: cols.into(),
                rows: rows.into(),
            })
            .await?;
        }
        Ok(())
    }

    async fn finish(&mut self, end: Ended) -> anyhow::Result<Ended> {
        let note = match end {
            Ended::Detached => "\r\n[termesh: detached]\r\n".to_string(),
            Ended::Exited(code) => format!("\r\n[termesh: session exited with code {code}]\r\n"),
        };
        self.stdout.write_all(note.as_bytes()).await?;
        self.stdout.flush().await?;
        Ok(end)
    }
}

/// Reads stdin on a plain thread (blocking reads), chunk by chunk.
fn stdin_reader() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    rx
}

fn jitter(base: Duration) -> Duration {
    let spread = base.as_millis() as u64 / 2 + 1;
    base + Duration::from_millis(rand::random::<u64>() % spread)
}
