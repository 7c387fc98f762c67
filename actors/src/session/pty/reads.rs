//! Reads of a session's PTY master that do not wait for the terminal's
//! flush worker.
//!
//! A read of the master that finds its line discipline empty waits, even
//! non-blocking, for the terminal's flush worker to move over what the
//! program wrote (Linux's `n_tty_read` flushes that work before it
//! answers `EAGAIN`). A flood's reader drained each wake-up with reads
//! until `EAGAIN`, so it waited there about once per 5 KiB, 110 us each,
//! with every other session on its thread waiting too (docs/benchmarks.md,
//! issue 32, fifteenth stop: 2.9 s of such waits in three 64 MiB rounds).
//! So a read is made only while the line discipline holds something
//! (`FIONREAD`); the worker's push of the rest wakes the reader again, and
//! until then its thread does other work. A read that gets anything
//! returns at once (the master's `VMIN` is 1). What is left: `epoll`'s
//! own poll of the master flushes the same way when it finds the line
//! discipline empty (a wake-up for bytes a read here already took): 0.67 s
//! in the same rounds.

use std::io::ErrorKind;

use filedescriptor::FileDescriptor;

use super::Registered;

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
        let master = std::sync::Arc::new(master);
        let master = crate::os::register_owned(master, tokio::io::Interest::READABLE);
        (master.unwrap(), slave)
    }

    /// Reads as the session's reader does (a wake-up, then what waits)
    /// until the end, bounded: the bytes, and how it ended.
    async fn read_to_end(master: &Registered) -> (Vec<u8>, std::io::Result<usize>) {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        let deadline = std::time::Duration::from_secs(60);
        let end = tokio::time::timeout(deadline, async {
            loop {
                match read_ready(master, &mut buf).await {
                    Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                    end => return end,
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
        (got, end)
    }

    /// A program that writes `data` to its terminal and closes it, on a
    /// thread of its own; the terminal's reader reads it all.
    async fn written_and_read(data: &[u8], read_while_written: bool) {
        let (master, slave) = terminal();
        let written = data.to_vec();
        let (done, finished) = std::sync::mpsc::channel();
        let writer = std::thread::spawn(move || {
            let mut file = std::fs::File::from(slave);
            std::io::Write::write_all(&mut file, &written).unwrap();
            drop(file);
            let _ = done.send(());
        });
        if !read_while_written {
            // All of it is in the terminal's buffers (most not yet moved to
            // the line discipline) when the hang-up comes.
            let bound = std::time::Duration::from_secs(60);
            finished
                .recv_timeout(bound)
                .expect("the terminal took it unread");
        }
        let (got, end) = read_to_end(&master).await;
        writer.join().unwrap();
        assert_eq!(got.len(), data.len());
        assert!(got == data, "the bytes came out of order");
        // Linux answers the last slave's close with EIO on the master.
        assert_eq!(end.unwrap_err().raw_os_error(), Some(libc::EIO));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn reads_take_everything_written_before_the_hang_up_in_order() {
        let (master, _slave) = terminal();
        let mut buf = [0u8; 16];
        assert_eq!(read_waiting(&master, &mut buf).unwrap(), 0, "nothing waits");
        // Written while the reader (on this thread) comes and goes.
        let flood: Vec<u8> = (0..4u32 << 20).map(|i| b'a' + (i % 23) as u8).collect();
        written_and_read(&flood, true).await;
        // Written and hung up before the first read: the line discipline
        // holds 4 KiB, the rest waits in the terminal's buffer (which
        // takes about 18 KiB unread).
        written_and_read(&flood[..8 << 10], false).await;
    }
}
