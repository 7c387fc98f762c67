//! The machine's floor for any program that ships a terminal's output to
//! another process over a socket: one thread reads a bare PTY (64 KiB
//! reads) and writes each read to a loopback TCP connection, another
//! thread drains it. No framing, no store, no acks, no screen: a relay
//! server can only be slower than this (raw PTY reading is the floor of
//! reading alone; this one adds what shipping costs on the same cores).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// `cat` of `path` through a bare PTY and a loopback socket: the bytes
/// drained and the time from the program's start to the last of them.
pub fn relay_pty(path: &Path) -> (usize, Duration) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let drain = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0;
        while let Ok(n) = conn.read(&mut buf) {
            if n == 0 {
                break;
            }
            total += n;
        }
        (total, Instant::now())
    });
    let mut out = TcpStream::connect(addr).unwrap();
    out.set_nodelay(true).unwrap();
    let (start, mut child, mut reader) = super::flood::cat_in_pty(path);
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = reader.read(&mut buf) {
        if n == 0 || out.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    drop(out);
    let (total, end) = drain.join().unwrap();
    let _ = child.wait();
    (total, end - start)
}
