//! A program in a fresh PTY (an attach, or a bare program for a floor) and
//! what a terminal would show of its output: the bytes are fed to a screen
//! model, and waits are on the screen, not on the bytes. The attach
//! renderer writes cells, so a text is contiguous in its bytes only within
//! one run of changed cells; a screen is what a person sees.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use portable_pty::{native_pty_system, Child, CommandBuilder, MasterPty, PtyPair, PtySize};
use termesh_actors::session::screen::Utf8Decoder;
use termesh_node::client::Target;

/// Bound on one wait for the screen, or for the program's exit.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A fresh PTY of `cols` x `rows`.
pub fn open(cols: u16, rows: u16) -> PtyPair {
    native_pty_system()
        .openpty(PtySize {
            rows,
            cols,
            pixel_width: 0,
            pixel_height: 0,
        })
        .expect("open a PTY")
}

pub struct Pty {
    child: Box<dyn Child + Send + Sync>,
    writer: Box<dyn Write + Send>,
    rx: mpsc::Receiver<Vec<u8>>,
    /// What the terminal shows; no scrollback, as a flood would fill it.
    pub screen: avt::Terminal,
    decoder: Utf8Decoder,
    /// Bytes the program has written to the terminal so far.
    pub bytes: u64,
    /// When the program was spawned.
    pub started: Instant,
    /// Held so that the PTY stays open while the program runs.
    _master: Box<dyn MasterPty + Send>,
}

impl Pty {
    pub fn spawn(cmd: CommandBuilder, (cols, rows): (u16, u16)) -> Pty {
        let pair = open(cols, rows);
        let mut reader = pair.master.try_clone_reader().unwrap();
        let writer = pair.master.take_writer().unwrap();
        let (tx, rx) = mpsc::channel::<Vec<u8>>();
        std::thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        let started = Instant::now();
        let child = pair.slave.spawn_command(cmd).expect("spawn in the PTY");
        drop(pair.slave);
        Pty {
            child,
            writer,
            rx,
            screen: avt::Terminal::new(cols.into(), rows.into()).unwrap(),
            decoder: Utf8Decoder::default(),
            bytes: 0,
            started,
            _master: pair.master,
        }
    }

    /// `termesh attach --scrollback 0 ARGS.. SESSION` in a PTY of `size`.
    pub fn attach(
        target: &Target,
        session: &str,
        state: &Path,
        size: (u16, u16),
        args: &[&str],
    ) -> Pty {
        let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_termesh"));
        cmd.args(["attach", "--scrollback", "0"]);
        cmd.args(args);
        cmd.arg(session);
        cmd.env("TERMESH_URL", &target.url);
        cmd.env("TERMESH_TOKEN", target.token.as_deref().unwrap_or_default());
        cmd.env("XDG_STATE_HOME", state);
        cmd.env("TERM", "xterm-256color");
        Pty::spawn(cmd, size)
    }

    /// Reads the program's output until `done` holds of the screen; the
    /// instant it first did.
    pub fn wait_until(
        &mut self,
        what: &str,
        mut done: impl FnMut(&avt::Terminal) -> bool,
    ) -> Instant {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if done(&self.screen) {
                return Instant::now();
            }
            let chunk = self
                .rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|e| {
                    let rows = self.screen.screen().text();
                    panic!("waiting for {what}: {e}; the screen: {rows:#?}")
                });
            self.feed(&chunk);
        }
    }

    /// Until `text` shows on a row of the screen.
    pub fn wait_for_text(&mut self, text: &str) -> Instant {
        self.wait_until(text, |screen| shows(screen, text))
    }

    fn feed(&mut self, chunk: &[u8]) {
        self.bytes += chunk.len() as u64;
        let text = self.decoder.decode(chunk);
        self.screen.feed(text.as_ref());
    }

    pub fn type_keys(&mut self, keys: &[u8]) {
        self.writer.write_all(keys).unwrap();
        self.writer.flush().unwrap();
    }

    /// The text of the cursor's row, blanks at its end cut.
    pub fn cursor_row(&self) -> String {
        row_text(&self.screen, self.screen.cursor().row)
    }

    /// The program's CPU time so far, user and system, all its threads
    /// (`/proc/PID/stat`, in clock ticks of 10 ms).
    pub fn cpu(&self) -> Duration {
        let pid = self.child.process_id().expect("a child has a pid");
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // The fields after the command's name, which may hold spaces:
        // state is the first, utime the 12th, stime the 13th.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        // USER_HZ, the unit of /proc, is 100 in Linux's ABI.
        Duration::from_millis(ticks * 10)
    }

    /// The prefix key, then d; waits for the exit, draining the output
    /// (the detach note must be read, or the exit could block on it).
    pub fn detach(mut self) {
        self.type_keys(b"\x1dd");
        self.wait_exit();
    }

    /// Ends a program that is not an attach (SIGKILL), waited for.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        self.wait_exit();
    }

    fn wait_exit(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        // An exit has no event here but the drain's end; poll it.
        while self.child.try_wait().unwrap().is_none() {
            let _ = self.rx.recv_timeout(Duration::from_millis(20));
            assert!(Instant::now() < deadline, "the program did not exit");
        }
    }
}

/// `text` shows on one row of `screen`.
pub fn shows(screen: &avt::Terminal, text: &str) -> bool {
    screen
        .screen()
        .visible_lines()
        .any(|line| line.text().contains(text))
}

/// Row `row` of `screen`, blanks at its end cut.
pub fn row_text(screen: &avt::Terminal, row: usize) -> String {
    screen
        .screen()
        .visible_lines()
        .nth(row)
        .map(|line| line.text().trim_end().to_string())
        .unwrap_or_default()
}
