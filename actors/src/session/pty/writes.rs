//! A session's PTY writer: keys and sizes to the terminal in the order
//! they were queued (`input`), waiting only on its own terminal when it
//! is full (a program that does not read its input), never on output.

use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use filedescriptor::FileDescriptor;
use tokio::io::Interest;
use tokio::sync::watch;

use super::input::Queue;
use super::{released, Lane, Let, Registered, ToTerminal};

/// Between two tries at a full terminal when no descriptor is left to
/// wait on it with.
const FULL_RETRY: std::time::Duration = std::time::Duration::from_millis(5);

fn write(fd: &FileDescriptor, buf: &[u8]) -> std::io::Result<usize> {
    Ok(rustix::io::write(fd, buf)?)
}

/// Writes keys and sets sizes in the order they were queued; a key
/// written brings the reads home from the bulk thread. Ends when every
/// sender of input is gone, or the session lets go.
pub(super) async fn write_task(
    (master, lane, written): (Arc<FileDescriptor>, Lane, Arc<AtomicU64>),
    (mut rx, backlog): Queue,
    mut release: watch::Receiver<Let>,
) {
    loop {
        let next = tokio::select! {
            next = rx.recv() => next,
            _ = released(&mut release) => return,
        };
        let data = match next {
            None => return,
            Some(ToTerminal::Size { cols, rows }) => {
                let size = rustix::termios::Winsize {
                    ws_row: rows,
                    ws_col: cols,
                    ws_xpixel: 0,
                    ws_ypixel: 0,
                };
                // The kernel sends SIGWINCH on a change.
                let _ = rustix::termios::tcsetwinsize(master.as_fd(), size);
                backlog.done();
                continue;
            }
            Some(ToTerminal::Keys(data)) => (data, None),
            Some(ToTerminal::Typed { data, done }) => (data, Some(done)),
        };
        let (data, done) = data;
        backlog.taken(data.len());
        lane.set_bulk(false);
        termesh_transport::hops::pass("in_pty", &data);
        if let Err(e) = write_all(&master, &data).await {
            // The terminal is gone: input has nowhere to go.
            tracing::debug!("the terminal takes no more input: {e}");
            return;
        }
        written.fetch_add(data.len() as u64, Ordering::Relaxed);
        backlog.done();
        if let Some(done) = done {
            let _ = done.send(());
        }
    }
}

/// Writes all of `data`: at once while the terminal takes it; when it is
/// full (a program that does not read its input), through a copy of the
/// master registered for writability while it lasts (the reader holds
/// the master's registration, and may be on another thread).
async fn write_all(master: &Arc<FileDescriptor>, data: &[u8]) -> std::io::Result<()> {
    let mut rest = data;
    let mut waiting: Option<Registered> = None;
    while !rest.is_empty() {
        let Some(registered) = &waiting else {
            match write(master, rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => match writability(master) {
                    Ok(registered) => waiting = Some(registered),
                    // No descriptor to spare (the node at its limit): the
                    // terminal is tried again a little later.
                    Err(e) => {
                        tracing::debug!("writing to a full terminal without a wait for it: {e}");
                        tokio::time::sleep(FULL_RETRY).await;
                    }
                },
                Err(e) => return Err(e),
            }
            continue;
        };
        let mut ready = registered.writable().await?;
        match ready.try_io(|fd| write(fd.get_ref(), rest)) {
            Ok(Ok(n)) => rest = &rest[n..],
            Ok(Err(e)) if e.kind() == ErrorKind::Interrupted => {}
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => {}
        }
    }
    Ok(())
}

/// A copy of `master` registered for writability.
fn writability(master: &FileDescriptor) -> std::io::Result<Registered> {
    let copy = Arc::new(master.try_clone().map_err(std::io::Error::other)?);
    crate::os::register_owned(copy, Interest::WRITABLE)
}
