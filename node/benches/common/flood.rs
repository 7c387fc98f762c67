//! A flood's throughput: the payload file, the machine's raw PTY rate
//! (`cat` in a PTY read by a plain reader) and the same file shipped
//! through termesh to a client that reads and acks it.

use std::io::{Read, Write};

use portable_pty::CommandBuilder;
use std::path::Path;
use std::time::{Duration, Instant};

use termesh_node::client::{Client, Target};
use termesh_transport::{ClientMsg, ServerMsg};

use super::{create_on, subscribe, WINDOW};

pub fn payload(path: &Path, mib: usize) {
    let line =
        b"termesh benchmark payload: the quick brown fox jumps over the lazy dog 0123456789\n";
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut written = 0;
    while written < mib << 20 {
        f.write_all(line).unwrap();
        written += line.len();
    }
}

/// The machine's own limit: a local reader draining `cat` through a PTY.
pub fn raw_pty(path: &Path) -> (usize, Duration) {
    let (start, mut child, mut reader) = cat_in_pty(path);
    let total = drain(&mut reader);
    let elapsed = start.elapsed();
    let _ = child.wait();
    (total, elapsed)
}

/// Reads `from` to its end (or an error) in 64 KiB reads: the bytes read.
pub fn drain(from: &mut impl Read) -> usize {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0;
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        total += n;
    }
    total
}

/// `cat` of `path` in a fresh raw PTY: when it started, the program, and
/// the master's reader (the raw-PTY and relay floors read it).
pub fn cat_in_pty(
    path: &Path,
) -> (
    Instant,
    Box<dyn portable_pty::Child + Send + Sync>,
    Box<dyn Read + Send>,
) {
    let pair = super::pty::open(120, 30);
    let mut cmd = CommandBuilder::new("sh");
    cmd.args([
        "-c",
        &format!("stty raw -echo; exec cat {}", path.display()),
    ]);
    let start = Instant::now();
    let child = pair.slave.spawn_command(cmd).unwrap();
    drop(pair.slave);
    let reader = pair.master.try_clone_reader().unwrap();
    (start, child, reader)
}

/// Same payload through a node to a WebSocket client that acks per protocol.
/// `None` when the client fell a whole ring behind the program (a resync:
/// the node does not slow a program for its viewers), so the round has no
/// time to give.
pub async fn through_termesh(
    target: &Target,
    on: Option<&str>,
    path: &Path,
    expected: usize,
) -> Option<Duration> {
    let mut c = Client::connect(target).await.unwrap();
    let session = create_on(
        &mut c,
        on,
        &format!("stty raw -echo; read go; exec cat {}", path.display()),
    )
    .await;
    subscribe(&mut c, &session, Some(0)).await;
    let start = Instant::now();
    c.send(&ClientMsg::Input {
        session: session.clone(),
        data: b"\n".to_vec(),
    })
    .await
    .unwrap();
    read_all(c, session, expected)
        .await
        .then(|| start.elapsed())
}

/// Reads `expected` bytes of `session`'s output, acking per protocol;
/// false when a resync came first (the program's bytes never all come, so
/// it reads until the program exits).
pub async fn read_all(mut c: Client, session: String, expected: usize) -> bool {
    let (mut got, mut unacked, mut resynced) = (0usize, 0u64, false);
    while got < expected {
        match c.recv().await.unwrap() {
            ServerMsg::Output { seq, data, .. } => {
                got += data.len();
                unacked += data.len() as u64;
                if unacked >= WINDOW / 4 {
                    unacked = 0;
                    c.send(&ClientMsg::Ack {
                        session: session.clone(),
                        seq,
                    })
                    .await
                    .unwrap();
                }
            }
            ServerMsg::ResyncRequired { .. } => resynced = true,
            ServerMsg::Event {
                event: termesh_transport::EventKind::Exited { .. },
                ..
            } if resynced => return false,
            _ => {}
        }
    }
    !resynced
}
