//! A session's PTY I/O without threads of its own: the master is
//! non-blocking, and each session's reader, writer and exit waiter are
//! tasks on one small runtime the node shares (`PTY_IO_THREADS` threads),
//! so ten thousand sessions cost ten thousand sets of tasks, not thirty
//! thousand threads.
//!
//! - The reader reads into a buffer whose filled part is split off as the
//!   frame (no copy between the read and every subscriber), and passes it
//!   on through a bounded channel: when the session falls behind, the
//!   reader waits, the kernel buffer fills and the program's writes block.
//!   After a read, whatever is already waiting joins the same frame, up to
//!   `READ_CHUNK`, so a flood becomes a few large frames while interactive
//!   output goes out at once.
//! - The writer drains the input channel that connections hold senders
//!   of, so keystrokes never wait behind output work; a program that does
//!   not read its input makes only its own writer wait.
//! - The waiter watches a pidfd (Linux 5.4 and later; a thread per session
//!   on older kernels) and learns of the exit without reaping (`WNOWAIT`),
//!   so the program's pid, and with it its process group id, stays
//!   reserved by the zombie; it reaps only when the session drops its
//!   `ReapGuard`, after which the session never signals the group again.

use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::OnceLock;

use bytes::{Bytes, BytesMut};
use filedescriptor::FileDescriptor;
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::net::unix::pipe;
use tokio::sync::mpsc;

use super::{ExitInfo, PtyEvent};

/// Largest read from the PTY, and so the largest frame.
pub const READ_CHUNK: usize = 64 * 1024;
/// First read size: an idle session touches no more memory than this.
const MIN_CHUNK: usize = 4 * 1024;
/// Threads that run every session's PTY tasks: reads and writes are short
/// non-blocking calls, so one keeps up with floods that the session actors
/// (which run elsewhere) cannot follow anyway; a second keeps a flood's
/// reads from delaying another session's keystrokes.
const PTY_IO_THREADS: usize = 2;

/// The runtime every session's PTY tasks run on.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(PTY_IO_THREADS)
            .thread_name("pty-io")
            .enable_io()
            .build()
            .expect("the PTY I/O runtime starts")
    })
}

/// A raw descriptor lent to `FileDescriptor::dup`, which copies it.
struct Lent(RawFd);

impl AsRawFd for Lent {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Starts the reader and writer on duplicates of `master` (made
/// non-blocking, which the master shares) and the waiter for `pid`.
/// The duplicates are registered with the runtime as pipe ends, which
/// tokio allows for any pollable descriptor (`*_unchecked`): a PTY master
/// reads and writes like one.
pub fn start(
    master: RawFd,
    pid: i32,
    events: mpsc::Sender<PtyEvent>,
    input: mpsc::Receiver<Bytes>,
    release: mpsc::Receiver<()>,
) -> std::io::Result<()> {
    let mut fd = FileDescriptor::dup(&Lent(master)).map_err(std::io::Error::other)?;
    fd.set_non_blocking(true).map_err(std::io::Error::other)?;
    let (read_fd, write_fd) = (
        fd.as_fd().try_clone_to_owned()?,
        fd.as_fd().try_clone_to_owned()?,
    );
    let rt = runtime();
    let _in_runtime = rt.enter();
    let reader = pipe::Receiver::from_owned_fd_unchecked(read_fd)?;
    let writer = pipe::Sender::from_owned_fd_unchecked(write_fd)?;
    rt.spawn(read_task(reader, events.clone()));
    rt.spawn(write_task(writer, input));
    let pidfd = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| std::io::Error::other("no pid"))
        .and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
                .map_err(std::io::Error::from)
        });
    match pidfd.and_then(pipe::Receiver::from_owned_fd_unchecked) {
        Ok(pidfd) => {
            rt.spawn(wait_task(pidfd, events, release));
        }
        Err(e) => {
            tracing::debug!(pid, "no pidfd ({e}): the exit is waited for by a thread");
            std::thread::Builder::new()
                .name("pty-wait".into())
                .spawn(move || wait_thread(pid, events, release))?;
        }
    }
    Ok(())
}

async fn read_task(rx: pipe::Receiver, tx: mpsc::Sender<PtyEvent>) {
    let mut buf = BytesMut::new();
    let mut want = MIN_CHUNK;
    loop {
        buf.clear();
        buf.resize(want, 0);
        let mut filled = match read_ready(&rx, &mut buf).await {
            // Linux reports EIO once the last slave fd closes: that is EOF.
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        want = if filled == want {
            (want * 2).min(READ_CHUNK)
        } else if filled < want / 4 {
            (want / 2).max(MIN_CHUNK)
        } else {
            want
        };
        // What is already waiting joins the frame; the buffer grows only
        // while it is full and more comes (a keystroke's echo never makes
        // a small frame hold a 64 KiB allocation while it sits in the ring).
        while filled < READ_CHUNK {
            if filled == buf.len() {
                buf.resize((buf.len() * 2).min(READ_CHUNK), 0);
            }
            match rx.try_read(&mut buf[filled..]) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // Nothing more waiting (or the end, which the next read sees).
                Ok(0) | Err(_) => break,
                Ok(n) => filled += n,
            }
        }
        let frame = buf.split_to(filled).freeze();
        if tx.send(PtyEvent::Output(frame)).await.is_err() {
            return;
        }
    }
    let _ = tx.send(PtyEvent::Eof).await;
}

/// One read once the PTY is readable.
async fn read_ready(rx: &pipe::Receiver, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        rx.readable().await?;
        match rx.try_read(buf) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            result => return result,
        }
    }
}

async fn write_task(tx: pipe::Sender, mut rx: mpsc::Receiver<Bytes>) {
    while let Some(data) = rx.recv().await {
        let mut rest = &data[..];
        while !rest.is_empty() {
            if tx.writable().await.is_err() {
                return;
            }
            match tx.try_write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                // The terminal is gone: input has nowhere to go.
                Err(_) => return,
            }
        }
    }
}

/// `pidfd` is registered for readiness as a pipe's reading end (it is
/// never read; `waitid` takes it).
async fn wait_task(
    pidfd: pipe::Receiver,
    tx: mpsc::Sender<PtyEvent>,
    mut release: mpsc::Receiver<()>,
) {
    // A pidfd is readable once its process has exited.
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
    let info = loop {
        if pidfd.readable().await.is_err() {
            break None;
        }
        // The look is made inside `try_io`, so readiness is forgotten only
        // for the look that found the program alive (an exit after it is a
        // new edge), never for one that raced an exit.
        let looked = pidfd.try_io(|| match waitid(Id::PIDFd(pidfd.as_fd()), flags) {
            Ok(WaitStatus::StillAlive) => Err(ErrorKind::WouldBlock.into()),
            other => Ok(other),
        });
        match looked {
            Ok(Err(nix::errno::Errno::EINTR)) | Err(_) => {}
            Ok(result) => break exit_info(result),
        }
    };
    let _ = tx
        .send(PtyEvent::Exited(info.unwrap_or(ExitInfo {
            code: 1,
            signal: None,
        })))
        .await;
    // Wait until the session lets go of its guard (or is gone), then reap.
    while release.recv().await.is_some() {}
    while let Err(nix::errno::Errno::EINTR) = waitid(Id::PIDFd(pidfd.as_fd()), WaitPidFlag::WEXITED)
    {
    }
}

/// The waiter on kernels without pidfds: a thread per session.
fn wait_thread(pid: i32, tx: mpsc::Sender<PtyEvent>, mut release: mpsc::Receiver<()>) {
    let info = loop {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(Pid::from_raw(pid)), flags) {
            Err(nix::errno::Errno::EINTR) => continue,
            result => {
                break exit_info(result).unwrap_or(ExitInfo {
                    code: 1,
                    signal: None,
                })
            }
        }
    };
    let _ = tx.blocking_send(PtyEvent::Exited(info));
    while release.blocking_recv().is_some() {}
    while let Err(nix::errno::Errno::EINTR) = waitpid(Pid::from_raw(pid), None) {}
}

/// How the program ended, from `waitid`; `None` while it has not (a
/// `WNOHANG` look too early).
fn exit_info(result: nix::Result<WaitStatus>) -> Option<ExitInfo> {
    match result {
        Ok(WaitStatus::Exited(_, code)) => Some(ExitInfo {
            code: code as u32,
            signal: None,
        }),
        Ok(WaitStatus::Signaled(_, signal, _)) => Some(ExitInfo {
            code: 128 + signal as u32,
            signal: Some(signal),
        }),
        Ok(_) => None,
        Err(nix::errno::Errno::EINTR) => None,
        // The child is gone some other way: an exit the session can report.
        Err(_) => Some(ExitInfo {
            code: 1,
            signal: None,
        }),
    }
}
