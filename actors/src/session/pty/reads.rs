//! Reads of a session's PTY master that never hold its thread in the
//! kernel.
//!
//! A read of the master that finds its line discipline empty waits, even
//! non-blocking, for the terminal's flush worker to move over what the
//! program wrote (Linux's `n_tty_read` flushes that work before it
//! answers `EAGAIN`). Under a flood that is every read after the first
//! of a wake-up: tens of microseconds each, once per 4 KiB, in which no
//! other session on the thread runs (measured: 19,000 such waits in three
//! 64 MiB rounds, a third of the reader's time). So a read is made only
//! while the line discipline holds something (`FIONREAD`); the flush
//! worker's push of the rest wakes the reader again, and until then its
//! thread does other work. A read that gets anything returns at once
//! (the master's `VMIN` is 1).

use std::io::ErrorKind;
use std::sync::Arc;

use filedescriptor::FileDescriptor;
use tokio::io::unix::AsyncFd;

/// The master, registered for one kind of readiness with the runtime of
/// the task that waits on it.
pub type Registered = AsyncFd<Arc<FileDescriptor>>;

/// Whether the line discipline holds bytes to read now (`true` when the
/// kernel will not say: the read then is as it was).
fn waiting(fd: &FileDescriptor) -> bool {
    rustix::io::ioctl_fionread(fd).map_or(true, |n| n > 0)
}

fn read(fd: &FileDescriptor, buf: &mut [u8]) -> std::io::Result<usize> {
    Ok(rustix::io::read(fd, buf)?)
}

/// One read once the PTY holds something, or has closed (a hang-up is
/// read, whatever waits behind it flushed by that read).
pub async fn read_ready(master: &Registered, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        let mut ready = master.readable().await?;
        if !ready.ready().is_read_closed() && !waiting(master.get_ref()) {
            // The worker's push wakes this again. Cleared only if no
            // readiness came since it was seen, so none is lost.
            ready.clear_ready();
            continue;
        }
        match ready.try_io(|fd| read(fd.get_ref(), buf)) {
            Ok(Err(e)) if e.kind() == ErrorKind::Interrupted => {}
            Ok(result) => return result,
            // Would block: readiness was cleared, wait for the next edge.
            Err(_would_block) => {}
        }
    }
}

/// What is already waiting, without waiting for more: `Ok(0)` when
/// nothing is (and at the end, which `read_ready` then reads).
pub fn read_waiting(master: &Registered, buf: &mut [u8]) -> std::io::Result<usize> {
    let fd = master.get_ref();
    loop {
        if !waiting(fd) {
            return Ok(0);
        }
        match read(fd, buf) {
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(0),
            result => return result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh raw terminal: its master registered for reading, and its
    /// slave.
    fn terminal() -> (Registered, std::os::fd::OwnedFd) {
        let (master, slave) = crate::session::pty::raw_terminal();
        let master = crate::os::register_owned(Arc::new(master), tokio::io::Interest::READABLE);
        (master.unwrap(), slave)
    }

    /// Reads as the session's reader does (a wake-up, then what waits)
    /// until the end, bounded.
    async fn read_to_end(master: &Registered) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        let deadline = std::time::Duration::from_secs(60);
        tokio::time::timeout(deadline, async {
            loop {
                match read_ready(master, &mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
                loop {
                    match read_waiting(master, &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no end after {} bytes", got.len()));
        got
    }

    #[tokio::test(flavor = "current_thread")]
    async fn reads_take_only_what_waits_and_everything_before_the_hang_up() {
        let (master, slave) = terminal();
        let mut buf = [0u8; 16];
        assert_eq!(read_waiting(&master, &mut buf).unwrap(), 0, "nothing waits");

        // A program that writes 4 MiB and closes its terminal, while the
        // reader (on this thread) comes and goes: every byte arrives, in
        // order, and then the end.
        let data: Vec<u8> = (0..4u32 << 20).map(|i| b'a' + (i % 23) as u8).collect();
        let written = data.clone();
        let writer = std::thread::spawn(move || {
            let mut file = std::fs::File::from(slave);
            std::io::Write::write_all(&mut file, &written).unwrap();
        });
        let got = read_to_end(&master).await;
        writer.join().unwrap();
        assert_eq!(got.len(), data.len());
        assert!(got == data, "the bytes came out of order");
    }
}
