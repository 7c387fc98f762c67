//! The machine's floor for any program that ships a terminal's output to
//! another process over a socket: one thread reads a bare PTY (64 KiB
//! reads) and writes each read to a loopback TCP connection, another
//! thread drains it. No framing, no store, no acks, no screen: a relay
//! server can only be slower than this (raw PTY reading is the floor of
//! reading alone; this one adds what shipping costs on the same cores).
//! With two hops a third thread forwards from one loopback connection to
//! another, as a second node does for a client of its mirror: the floor
//! for output that crosses two processes on the same cores.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// How many loopback connections the output crosses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hops {
    One,
    Two,
}

/// `cat` of `path` through a bare PTY and `hops` loopback connections:
/// the bytes drained and the time from the program's start to the last
/// of them.
pub fn relay_pty(path: &Path, hops: Hops) -> (usize, Duration) {
    let (listener, addr) = listen();
    let drain = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        (super::flood::drain(&mut conn), Instant::now())
    });
    let (mut out, middle) = match hops {
        Hops::One => (connect(addr), None),
        Hops::Two => {
            let (listener, middle_addr) = listen();
            let middle = std::thread::spawn(move || {
                let (mut from, _) = listener.accept().unwrap();
                let mut to = connect(addr);
                forward(&mut from, &mut to);
            });
            (connect(middle_addr), Some(middle))
        }
    };
    let (start, mut child, mut reader) = super::flood::cat_in_pty(path);
    forward(&mut reader, &mut out);
    drop(out);
    if let Some(middle) = middle {
        middle.join().unwrap();
    }
    let (total, end) = drain.join().unwrap();
    let _ = child.wait();
    (total, end - start)
}

fn listen() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let out = TcpStream::connect(addr).unwrap();
    out.set_nodelay(true).unwrap();
    out
}

/// Each read (64 KiB at most) written on, until the end or an error.
fn forward(from: &mut impl Read, to: &mut impl Write) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
}
