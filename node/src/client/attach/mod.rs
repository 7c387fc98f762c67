//! `termesh attach`: a raw-mode terminal client. It draws the session from
//! its own screen model (or passes its bytes through, `--raw`), forwards
//! keystrokes and window-size changes, acks output as it takes it, and
//! after a dropped or silent connection reconnects with jittered backoff
//! and resumes with `from_seq`: nothing missed, keys typed meanwhile
//! delivered. A status row tells of the link. The prefix key (default
//! Ctrl-]) then `d` detaches, `[` scrolls; on the way out the terminal is
//! left as it was found.

mod backoff;
mod display;
mod frame;
mod keys;
mod mouse;
mod outer;
mod predict;
mod raw;
mod resync;
pub mod scan;
mod scroll;
mod state;
mod view;

use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::mpsc;

use super::{Client, Fatal, Target};
use state::{State, Step};

/// How long one connection attempt may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct AttachOptions {
    /// The session's id.
    pub session: String,
    /// How notices name it: `id (name)`.
    pub label: String,
    pub prefix: u8,
    pub scrollback: u64,
    /// Send no input and no size.
    pub read_only: bool,
    /// Pass the session's bytes through instead of drawing it.
    pub raw: bool,
    /// The outer terminal's title while attached: the session's name.
    pub title: String,
    /// `-d`: other `termesh attach` clients of the session are detached.
    pub take: bool,
    /// Predictive local echo on a slow link.
    pub predict: bool,
    /// The wheel scrolls while the program has not asked for the mouse.
    pub mouse: bool,
    /// Open in the scroll mode with output seq `at` at the bottom (a
    /// `grep` hit's).
    pub at: Option<u64>,
}

/// Why the attach ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Detached,
    /// Another terminal took the session (`attach -d`).
    TakenOver,
    Exited {
        code: u32,
        signal: Option<String>,
    },
    Removed,
    /// The session's program died with its node (a restart): its screen
    /// and history are kept, nothing runs.
    Lost,
    /// This client was told to stop by a signal (its number).
    Signal(i32),
    /// Its piped input ended and was sent; the session keeps running.
    InputSent,
}

impl Ended {
    pub fn exit_code(&self) -> i32 {
        match self {
            Ended::Detached | Ended::TakenOver | Ended::InputSent => 0,
            Ended::Exited { code, .. } => *code as i32,
            Ended::Removed | Ended::Lost => 1,
            Ended::Signal(n) => 128 + n,
        }
    }

    fn note(&self, label: &str) -> String {
        match self {
            Ended::Detached => {
                format!("[termesh: detached from {label}; `termesh attach` returns to it]")
            }
            Ended::TakenOver => format!(
                "[termesh: detached from {label}: another terminal took it (attach -d)]"
            ),
            Ended::Exited { code, signal: None } => {
                format!("[termesh: session exited with code {code}]")
            }
            Ended::Exited {
                code,
                signal: Some(name),
            } => format!("[termesh: session ended by signal {name} (exit code {code})]"),
            Ended::Removed => format!("[termesh: session {label} was removed]"),
            Ended::Lost => format!(
                "[termesh: session {label} was lost: its program ended with its node's restart; `termesh revive` runs it again]"
            ),
            Ended::InputSent => {
                format!("[termesh: input ended and was sent; session {label} keeps running]")
            }
            Ended::Signal(n) => format!(
                "[termesh: stopped by signal {}; session {label} keeps running]",
                signal_name(*n)
            ),
        }
    }
}

fn signal_name(n: i32) -> String {
    nix::sys::signal::Signal::try_from(n)
        .map(|s| s.as_str().trim_start_matches("SIG").to_string())
        .unwrap_or_else(|_| n.to_string())
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

/// What happens around the connection: keys, window size, signals.
pub(crate) enum Outside {
    Keys(Vec<u8>),
    /// Stdin ended (a file or /dev/null, not a terminal): input stops, the
    /// attach goes on showing output; errors still surface.
    StdinEnded,
    /// The outer terminal's new size.
    WindowChanged(Option<(u16, u16)>),
    Signal(i32),
}

struct Inputs {
    stdin: mpsc::Receiver<Vec<u8>>,
    stdin_done: bool,
    winch: Signal,
    /// SIGTERM, SIGHUP, SIGINT, SIGQUIT: restore the terminal and stop.
    stops: Vec<(i32, Signal)>,
}

impl Inputs {
    fn new() -> anyhow::Result<Inputs> {
        let mut stops = Vec::new();
        for (n, kind) in [
            (libc::SIGTERM, SignalKind::terminate()),
            (libc::SIGHUP, SignalKind::hangup()),
            (libc::SIGINT, SignalKind::interrupt()),
            (libc::SIGQUIT, SignalKind::quit()),
        ] {
            stops.push((n, signal(kind)?));
        }
        Ok(Inputs {
            stdin: stdin_reader(),
            stdin_done: false,
            winch: signal(SignalKind::window_change())?,
            stops,
        })
    }

    async fn next(&mut self) -> Outside {
        let stops = futures_util::future::select_all(
            self.stops
                .iter_mut()
                .map(|(n, s)| Box::pin(async move { s.recv().await.map(|_| *n) })),
        );
        tokio::select! {
            chunk = self.stdin.recv(), if !self.stdin_done => match chunk {
                Some(chunk) => Outside::Keys(chunk),
                None => {
                    self.stdin_done = true;
                    Outside::StdinEnded
                }
            },
            _ = self.winch.recv() => Outside::WindowChanged(term_size()),
            (n, _, _) = stops => Outside::Signal(n.unwrap_or(libc::SIGTERM)),
        }
    }
}

pub async fn attach(target: &Target, opts: AttachOptions) -> anyhow::Result<Ended> {
    // Fail early, before raw mode, when the node cannot be reached.
    let first = Client::connect(target).await?;
    let mut inputs = Inputs::new()?;
    let _raw = RawMode::enable();
    let label = opts.label.clone();
    let mut st = State::new(opts, term_size());
    if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        st.input_is_piped();
    }
    let result = run(target, first, &mut inputs, &mut st).await;
    let note = match &result {
        Ok(end) => end.note(&label),
        Err(_) => String::new(),
    };
    st.view.restore(&note);
    st.view.flush()?;
    result
}

async fn run(
    target: &Target,
    first: Client,
    inputs: &mut Inputs,
    st: &mut State,
) -> anyhow::Result<Ended> {
    let mut next = Some(first);
    loop {
        let mut conn = match next.take() {
            Some(conn) => conn,
            None => match reconnect(target, inputs, st).await? {
                Ok(conn) => conn,
                Err(end) => return Ok(end),
            },
        };
        match session(&mut conn, inputs, st).await {
            Ok(end) => {
                // Bounded: the close handshake makes sure typed input landed.
                let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
                return Ok(end);
            }
            // Before the session was ever shown, a failure is worth reporting.
            Err(e) if Fatal::is(&e) || !st.shown() => return Err(e),
            Err(e) => {
                tracing::debug!("link lost: {e:#}");
                st.link_lost(&e);
            }
        }
    }
}

/// Waits out the backoff, then connects; keys and signals are handled all
/// along (the detach key works offline; typed keys are kept).
async fn reconnect(
    target: &Target,
    inputs: &mut Inputs,
    st: &mut State,
) -> anyhow::Result<Result<Client, Ended>> {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        let retry_at = tokio::time::Instant::now() + st.next_delay();
        st.set_retry_at(Some(retry_at.into_std()));
        let connect = async {
            tokio::time::sleep_until(retry_at).await;
            tokio::time::timeout(CONNECT_TIMEOUT, Client::connect(target)).await
        };
        tokio::pin!(connect);
        loop {
            st.refresh_status();
            st.view.flush()?;
            tokio::select! {
                result = &mut connect => match result {
                    Ok(Ok(conn)) => return Ok(Ok(conn)),
                    Ok(Err(e)) if Fatal::is(&e) => return Err(e),
                    _ => break,
                },
                event = inputs.next() => {
                    if let Some(end) = st.on_outside(event, false) {
                        return Ok(Err(end));
                    }
                }
                _ = tick.tick() => {
                    if Instant::now() >= retry_at.into_std() {
                        st.set_retry_at(None);
                    }
                }
            }
        }
    }
}

/// One connection: subscribe (resuming after the last seq shown), then
/// relay until the session ends, the user leaves, or the link fails.
async fn session(conn: &mut Client, inputs: &mut Inputs, st: &mut State) -> anyhow::Result<Ended> {
    st.subscribe();
    let mut tick = tokio::time::interval(st.tick_period(conn.ping_interval()));
    loop {
        let redraw_at = st.redraw_at();
        let step = tokio::select! {
            msg = conn.recv() => st.on_message(msg?)?,
            event = inputs.next() => match st.on_outside(event, true) {
                Some(end) => Step::End(end),
                None => Step::Continue,
            },
            _ = tick.tick() => {
                let silent = conn.last_heard().elapsed();
                if st.stale(silent) {
                    // Frames this loop had no time to read are not silence.
                    match futures_util::FutureExt::now_or_never(conn.recv()) {
                        Some(msg) => st.on_message(msg?)?,
                        None => anyhow::bail!("no word from the node for {}s", silent.as_secs()),
                    }
                } else {
                    st.on_tick(silent);
                    Step::Continue
                }
            }
            _ = tokio::time::sleep_until(redraw_at.unwrap_or_else(far_future).into()), if redraw_at.is_some() => {
                st.view.redraw();
                Step::Continue
            }
        };
        if let Step::End(end) = step {
            // Keys typed before the detach key go; none into a session that
            // ended or was taken. Best effort: a link failing now must not
            // turn the end into a reconnect.
            if end == Ended::Detached {
                st.flush_input();
            }
            for msg in st.take_outbox() {
                if conn.send(&msg).await.is_err() {
                    break;
                }
            }
            return Ok(end);
        }
        st.flush_input();
        for msg in st.take_outbox() {
            conn.send(&msg).await?;
        }
        if st.input_sent() {
            return Ok(Ended::InputSent);
        }
        st.refresh_status();
        st.view.flush()?;
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// The outer terminal's size; `None` when stdout is no terminal.
fn term_size() -> Option<(u16, u16)> {
    crossterm::terminal::size().ok()
}

/// Reads stdin on a plain thread (blocking reads), chunk by chunk.
fn stdin_reader() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::spawn(move || {
        use std::io::Read;
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
