//! Key to glyph over a slow link (issue 18's predictive echo): attach and
//! `attach --predict` through a relay that holds every chunk 50 ms each
//! way, to bash at its prompt, a key at a time: from the key written into
//! the PTY until its glyph shows on the PTY's screen (underlined or not),
//! and until it shows confirmed (not underlined). Beside them, the limits
//! in the same run: the relay's round trip (a bare TCP echo through it)
//! and the same keystroke through attach on loopback.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use termesh_node::client::Target;

use super::common::pty::{row_text, Pty};
use super::common::relay::Relay;
use super::{figures, new_session, PAUSE};

/// Each way: a 100 ms round trip, a transatlantic link.
const DELAY: Duration = Duration::from_millis(50);
const PROMPT: &str = "bench$ ";
/// Keys on one line before it is cleared (Ctrl-U, untimed).
const LINE: usize = 40;

/// An attach to bash at its prompt, and the keys typed on its line.
struct Typist {
    pty: Pty,
    /// The prompt's row.
    row: usize,
    typed: String,
}

/// One key's times from the key's write: its glyph on the screen, the
/// glyph not underlined, and whether the first glyph was a guess.
struct Stroke {
    glyph: Duration,
    confirmed: Duration,
    guessed: bool,
}

impl Typist {
    fn attach(target: &Target, state: &Path, args: &[&str]) -> Typist {
        // A session each: an attach's keys echo in every attach.
        let script = format!("PS1='{PROMPT}' exec bash --norc --noprofile -i");
        let session = new_session(target, (100, 30), &script);
        let mut pty = Pty::attach(target, &session, state, (100, 30), args);
        pty.wait_until("the prompt", at_prompt);
        let row = pty.screen.cursor().row;
        Typist {
            pty,
            row,
            typed: String::new(),
        }
    }

    /// Types one key after a pause and waits for its glyph, then for its
    /// glyph confirmed; a full line is cleared first.
    fn stroke(&mut self) -> Stroke {
        if self.typed.len() == LINE {
            self.typed.clear();
            self.pty.type_keys(b"\x15");
            self.pty.wait_until("the line cleared", at_prompt);
        }
        std::thread::sleep(PAUSE);
        let key = char::from(b'a' + (self.typed.len() % 26) as u8);
        let (row, col) = (self.row, PROMPT.len() + self.typed.len());
        self.typed.push(key);
        let mut guessed = false;
        let sent = Instant::now();
        self.pty.type_keys(&[key as u8]);
        let glyph = self.pty.wait_until("the glyph", |s| {
            let pen = cell(s, row, col, key);
            guessed = pen.is_some_and(|underlined| underlined);
            pen.is_some()
        });
        let confirmed = self
            .pty
            .wait_until("the echo", |s| cell(s, row, col, key) == Some(false));
        Stroke {
            glyph: glyph - sent,
            confirmed: confirmed - sent,
            guessed,
        }
    }
}

/// The cursor is just after the prompt, on an otherwise empty line.
fn at_prompt(s: &avt::Terminal) -> bool {
    let cursor = s.cursor();
    row_text(s, cursor.row) == PROMPT.trim_end() && cursor.col == PROMPT.len()
}

/// Whether the cell at (`row`, `col`) shows `key` underlined; `None` when
/// it does not show `key`.
fn cell(s: &avt::Terminal, row: usize, col: usize, key: char) -> Option<bool> {
    let line = s.screen().visible_lines().nth(row)?;
    let cell = line.cells().get(col)?;
    (cell.char() == key).then(|| cell.pen().is_underline())
}

/// A TCP echo server on loopback, one connection at a time.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            let _ = conn.set_nodelay(true);
            let mut buf = [0u8; 1024];
            while let Ok(n @ 1..) = conn.read(&mut buf) {
                if conn.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    });
    addr
}

/// One byte there and back over `conn`.
fn tcp_echo(conn: &mut TcpStream) -> Duration {
    let start = Instant::now();
    conn.write_all(b"k").unwrap();
    conn.read_exact(&mut [0u8]).unwrap();
    start.elapsed()
}

pub fn key_to_glyph(target: &Target, state: &Path, rounds: usize) {
    let upstream: SocketAddr = target
        .url
        .strip_prefix("http://")
        .and_then(|a| a.parse().ok())
        .expect("the node listens on http://ADDR");
    let relay = Relay::start(upstream, DELAY);
    let slow = Target {
        url: format!("http://{}", relay.addr),
        ..target.clone()
    };
    let echo_relay = Relay::start(echo_server(), DELAY);
    let mut link = TcpStream::connect(echo_relay.addr).unwrap();
    link.set_nodelay(true).unwrap();
    let mut typists = [
        Typist::attach(target, state, &[]),
        Typist::attach(&slow, state, &[]),
        Typist::attach(&slow, state, &["--predict"]),
    ];
    // Warm-up: the page cache, the node, and --predict's round trip (its
    // first probe goes at attach): keys until one is drawn as a guess.
    for typist in &mut typists[..2] {
        for _ in 0..5 {
            typist.stroke();
        }
    }
    let mut first_guess = None;
    for n in 1..=50 {
        if typists[2].stroke().guessed {
            first_guess.get_or_insert(n);
        }
        if n >= 5 && first_guess.is_some() {
            break;
        }
    }
    let mut link_t = Vec::new();
    let mut t: [Vec<Stroke>; 3] = Default::default();
    for _ in 0..rounds {
        link_t.push(tcp_echo(&mut link));
        for (typist, t) in typists.iter_mut().zip(t.iter_mut()) {
            t.push(typist.stroke());
        }
    }
    for typist in typists {
        typist.pty.detach();
    }
    println!(
        "key to glyph over a slow link: a relay holding each chunk {DELAY:?} each way, bash in a 100x30 PTY, {rounds} keys ({PAUSE:?} pause before each, each after the last echo):"
    );
    println!("limits of this machine, same run:");
    figures(
        "TCP echo through the relay",
        &mut link_t,
        "(the link's round trip)",
    );
    let [loopback, plain, predict] = &mut t;
    let glyphs = |strokes: &[Stroke]| strokes.iter().map(|s| s.glyph).collect::<Vec<_>>();
    figures(
        "attach on loopback, no relay",
        &mut glyphs(loopback),
        "(no link)",
    );
    println!("through the relay, key to glyph (underlined or not):");
    figures("attach", &mut glyphs(plain), "");
    let guessed = predict.iter().filter(|s| s.guessed).count();
    let first = first_guess.map_or("none in 50".into(), |n| format!("from key {n}"));
    figures(
        "attach --predict",
        &mut glyphs(predict),
        &format!("({guessed} of {rounds} drawn before the echo; warm-up guesses {first})"),
    );
    let mut confirmed: Vec<_> = predict.iter().map(|s| s.confirmed).collect();
    figures(
        "attach --predict, confirmed",
        &mut confirmed,
        "(the underline gone)",
    );
}
