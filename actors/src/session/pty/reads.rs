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
use std::time::Duration;

use bytes::BytesMut;
use filedescriptor::FileDescriptor;

use super::spin::{Spin, SPIN};
use super::Registered;

/// What the line discipline holds now (`None` when the kernel will not
/// say).
fn held(fd: &FileDescriptor) -> Option<u64> {
    rustix::io::ioctl_fionread(fd).ok()
}

/// Whether the line discipline holds bytes to read now (`true` when the
/// kernel will not say: the read then is as it was).
fn waiting(fd: &FileDescriptor) -> bool {
    held(fd).is_none_or(|n| n > 0)
}

fn read(fd: &FileDescriptor, buf: &mut [u8]) -> std::io::Result<usize> {
    Ok(rustix::io::read(fd, buf)?)
}

/// One read once the PTY holds something, or has closed (a hang-up is
/// read, whatever waits behind it flushed by that read).
///
/// `ErrorKind::WouldBlock` when a hang-up seen is over (the program
/// closed its terminal and opened it again before the hang-up was read):
/// tokio keeps a registration's "closed" for good, so `master` would be
/// ready at once forever and its reader spin; the caller registers the
/// master anew.
pub async fn read_ready(master: &Registered, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        let mut ready = master.readable().await?;
        let closed = ready.ready().is_read_closed();
        if !closed && !waiting(master.get_ref()) {
            // The worker's push wakes this again. Cleared only if no
            // readiness came since it was seen, so none is lost.
            ready.clear_ready();
            continue;
        }
        match ready.try_io(|fd| read(fd.get_ref(), buf)) {
            Ok(Err(e)) if e.kind() == ErrorKind::Interrupted => {}
            Ok(result) => return result,
            Err(_would_block) if closed => return Err(ErrorKind::WouldBlock.into()),
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

/// Adds what is already waiting to `buf[..*filled]`, growing `buf` (up
/// to `limit`) only while it is full and more comes (a keystroke's echo
/// never makes a small frame hold a large allocation while it sits in the
/// ring). When the reads since the line discipline was last empty filled
/// it, waits up to `SPIN` on this CPU for the flush worker's next push
/// (`spin`). Stops at the end too, which the next `read_ready` reads.
pub fn take_waiting(
    master: &Registered,
    buf: &mut BytesMut,
    filled: &mut usize,
    (limit, spin): (usize, &mut Spin),
) {
    take_waiting_within(master, buf, filled, (limit, spin, SPIN));
}

fn take_waiting_within(
    master: &Registered,
    buf: &mut BytesMut,
    filled: &mut usize,
    (limit, spin, bound): (usize, &mut Spin, Duration),
) {
    while *filled < limit {
        grow(buf, *filled, limit);
        match read_waiting(master, &mut buf[*filled..]) {
            Err(_) => return,
            Ok(0) => {
                if !spin.worth_waiting() {
                    return;
                }
                // A kernel that will not say ends the wait as a miss.
                let mut last = Some(0);
                let pushed = super::spin::within(bound, || {
                    last = held(master.get_ref());
                    last != Some(0)
                }) && last.is_some();
                spin.waited(pushed);
                if !pushed {
                    return;
                }
            }
            Ok(n) => {
                *filled += n;
                spin.took(n);
            }
        }
    }
}

/// Room to read into past `filled`: a full `buf` doubles, up to `limit`.
fn grow(buf: &mut BytesMut, filled: usize, limit: usize) {
    if filled == buf.len() {
        buf.resize((buf.len() * 2).clamp(1, limit), 0);
    }
}

/// What `gather` ended on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gathered {
    /// `want` bytes, or the deadline passed first.
    Frame,
    /// The PTY ended (EOF, or EIO at a hang-up): what was read goes out,
    /// and reading stops.
    End,
    /// A hang-up seen is over: what was read goes out, and the master is
    /// registered anew (`read_ready`).
    Renew,
}

/// Reads on, as the program prints, until `buf[..*filled]` holds `want`
/// bytes or `until` has passed: a flood's frame is many wake-ups' bytes,
/// not one's, so each frame's cost (its log write, every subscriber's
/// delivery, each connection's message) is paid once per `want` bytes.
pub async fn gather(
    master: &Registered,
    buf: &mut BytesMut,
    filled: &mut usize,
    (want, until, spin): (usize, tokio::time::Instant, &mut Spin),
) -> Gathered {
    while *filled < want {
        grow(buf, *filled, want);
        match tokio::time::timeout_at(until, read_ready(master, &mut buf[*filled..])).await {
            Err(_elapsed) => return Gathered::Frame,
            Ok(Err(e)) if e.kind() == ErrorKind::WouldBlock => return Gathered::Renew,
            Ok(Ok(0) | Err(_)) => return Gathered::End,
            Ok(Ok(n)) => {
                *filled += n;
                spin.took(n);
            }
        }
        // Waits end by the frame's time, as the reads do.
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        take_waiting_within(master, buf, filled, (want, spin, SPIN.min(left)));
    }
    Gathered::Frame
}

#[cfg(test)]
mod tests {
    use super::super::spin::LDISC;
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

    /// A program that writes `pieces` KiB, a KiB at a time with a pause
    /// after each (so each is its own wake-up), and says so when it has;
    /// then waits for `done` and closes its terminal.
    fn printer(
        slave: std::os::fd::OwnedFd,
        pieces: usize,
    ) -> (
        std::thread::JoinHandle<Vec<u8>>,
        std::sync::mpsc::Receiver<()>,
        std::sync::mpsc::Sender<()>,
    ) {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let (written, all_written) = std::sync::mpsc::channel::<()>();
        let writer = std::thread::spawn(move || {
            let mut file = std::fs::File::from(slave);
            let mut all = Vec::new();
            for i in 0..pieces {
                let piece = vec![b'a' + (i % 26) as u8; 1024];
                std::io::Write::write_all(&mut file, &piece).unwrap();
                all.extend_from_slice(&piece);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let _ = written.send(());
            let _ = wait.recv_timeout(std::time::Duration::from_secs(120));
            all
        });
        (writer, all_written, done)
    }

    /// `gather` until `after` (it must end by itself well before the
    /// test's bound).
    async fn gathered(
        master: &Registered,
        want: usize,
        after: std::time::Duration,
    ) -> (Vec<u8>, Gathered) {
        let mut buf = BytesMut::new();
        buf.resize(1024, 0);
        let mut filled = 0;
        let until = tokio::time::Instant::now() + after;
        let bound = std::time::Duration::from_secs(60);
        let mut spin = Spin::default();
        let end = tokio::time::timeout(
            bound,
            gather(master, &mut buf, &mut filled, (want, until, &mut spin)),
        )
        .await
        .expect("gather ended by itself");
        (buf[..filled].to_vec(), end)
    }

    const BOUND: std::time::Duration = std::time::Duration::from_secs(60);

    #[tokio::test(flavor = "current_thread")]
    async fn a_frame_gathers_many_wake_ups_until_it_is_full() {
        let (master, slave) = terminal();
        let (writer, _, done) = printer(slave, 48);
        let (got, end) = gathered(&master, 32 << 10, std::time::Duration::from_secs(600)).await;
        assert_eq!(end, Gathered::Frame);
        assert_eq!(got.len(), 32 << 10, "exactly as much as was wanted");
        // The rest is read before the writer is waited for: the terminal
        // may not take it all unread.
        let _ = done.send(());
        let (rest, _) = read_to_end(&master).await;
        let all = writer.join().unwrap();
        assert!([got, rest].concat() == all, "in order, nothing lost");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_frame_goes_out_at_its_time_or_at_the_end() {
        // Its time: what was read goes out, short of the size wanted.
        let (master, slave) = terminal();
        let (writer, all_written, done) = printer(slave, 10);
        all_written.recv_timeout(BOUND).expect("written in time");
        let (got, end) = gathered(&master, 32 << 10, std::time::Duration::from_secs(1)).await;
        assert_eq!(end, Gathered::Frame);
        assert!(!got.is_empty(), "what was there was read");
        // The rest (none, unless the terminal was slow to hand it over) is
        // read after it, up to the end.
        let _ = done.send(());
        let (rest, _) = read_to_end(&master).await;
        let all = writer.join().unwrap();
        assert!([got, rest].concat() == all, "in order, nothing lost");

        // The end: what was read goes out, and the end is said.
        let (master, slave) = terminal();
        let (writer, _, done) = printer(slave, 5);
        let _ = done.send(());
        let all = writer.join().unwrap();
        let (got, end) = gathered(&master, 32 << 10, std::time::Duration::from_secs(600)).await;
        assert_eq!(end, Gathered::End);
        assert!(got == all, "all {} bytes before the end", all.len());
    }

    /// A program that closes its terminal and opens it again before the
    /// hang-up is read: the reader is told (not left ready at once
    /// forever, which would spin it), and a new registration reads on.
    #[tokio::test(flavor = "current_thread")]
    async fn a_hang_up_that_is_over_asks_for_a_new_registration() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let (master, slave) = terminal();
        let path = std::fs::read_link(format!("/proc/self/fd/{}", slave.as_raw_fd())).unwrap();
        drop(slave);
        tokio::time::timeout(BOUND, async {
            while !master.readable().await.unwrap().ready().is_read_closed() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the hang-up seen");
        let mut slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(&path)
            .unwrap();
        let mut buf = [0u8; 64];
        let said = tokio::time::timeout(BOUND, read_ready(&master, &mut buf))
            .await
            .expect("an answer, not a spin");
        assert_eq!(said.unwrap_err().kind(), ErrorKind::WouldBlock);

        let fd = master.into_inner();
        let master = crate::os::register_owned(fd, tokio::io::Interest::READABLE).unwrap();
        std::io::Write::write_all(&mut slave, b"again").unwrap();
        let n = tokio::time::timeout(BOUND, read_ready(&master, &mut buf))
            .await
            .expect("read after the new registration")
            .unwrap();
        assert_eq!(&buf[..n], b"again");
    }

    /// What `take_waiting` adds after a wake-up's first read, with a wait
    /// for the flush worker bounded by `bound`, and how many waits it made.
    async fn taken(master: &Registered, bound: Duration) -> (Vec<u8>, usize) {
        let mut buf = BytesMut::new();
        buf.resize(64 << 10, 0);
        let mut filled = tokio::time::timeout(BOUND, read_ready(master, &mut buf))
            .await
            .expect("the first bytes came")
            .unwrap();
        let mut spin = Spin::default();
        spin.took(filled);
        take_waiting_within(master, &mut buf, &mut filled, (64 << 10, &mut spin, bound));
        (buf[..filled].to_vec(), spin.waits)
    }

    /// A raw terminal's slave with `data` written to it, and the master
    /// once its line discipline holds `first` bytes of it (the terminal
    /// takes about 9 KiB unread: a write that would block fails the test).
    fn written(data: &[u8], first: u64) -> (Registered, std::fs::File) {
        use std::io::Write;
        let (master, slave) = terminal();
        let mut slave = std::fs::File::from(slave);
        let flags = rustix::fs::fcntl_getfl(&slave).unwrap();
        rustix::fs::fcntl_setfl(&slave, flags | rustix::fs::OFlags::NONBLOCK).unwrap();
        assert_eq!(
            slave.write(data).unwrap(),
            data.len(),
            "taken unread at once"
        );
        let start = std::time::Instant::now();
        while held(master.get_ref()) != Some(first) {
            let waited = start.elapsed();
            assert!(
                waited < BOUND,
                "the line discipline never held {first} bytes"
            );
            std::thread::yield_now();
        }
        (master, slave)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_reader_that_empties_a_full_line_discipline_waits_for_the_next_push() {
        // Two full line disciplines and a bit (the terminal takes about
        // 9 KiB unread): the first read takes one, the flush worker
        // moves the rest over only once it is read.
        let data: Vec<u8> = (0..2 * LDISC + 100)
            .map(|i| b'a' + (i % 26) as u8)
            .collect();
        let (master, _slave) = written(&data, LDISC as u64);
        // The push comes within the bound, however loaded the machine
        // (milliseconds at worst); a run that reaches the last bytes may
        // end in a wait for nothing, to the bound.
        let (got, waits) = taken(&master, Duration::from_secs(2)).await;
        assert!(got.len() > LDISC, "only {} bytes: no wait", got.len());
        assert!(data.starts_with(&got), "in order");
        assert!(waits >= 1, "{waits} waits");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_echo_never_waits_for_more() {
        let (master, _slave) = written(b"echo", 4);
        let (got, waits) = taken(&master, Duration::from_secs(2)).await;
        assert_eq!(got, b"echo");
        assert_eq!(waits, 0, "a read that did not fill the line discipline");
    }
}
