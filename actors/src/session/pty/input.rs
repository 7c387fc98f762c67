//! A program's input: the queue connections and peers hold senders of
//! (`InputTx`, bounded in bytes), and the key written at once by its
//! sender while nothing waits ahead of it.
//!
//! The writer task (`io`) drains the queue on its session's thread. A key
//! sent while the queue is empty and nothing is half written is written
//! to the terminal by the thread that took it (the connection's, or the
//! peer link's): a non-blocking write of a few bytes, which wakes the
//! program itself, where a queued key would first wake the writer's
//! thread. On a machine whose cores sleep between keys every such wake-up
//! waits for a CPU to wake too (docs/benchmarks.md, issue 32). What the
//! terminal does not take at once (a program that does not read its
//! input) is queued, and everything after it queues behind it, so the
//! order of keys and sizes is kept: a sender writes at once or queues
//! while holding the `gate`, so a key written in part is queued before
//! anyone else's message.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::Bytes;
use filedescriptor::FileDescriptor;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use super::Lane;
use crate::session::bulk::Typed;

/// Input queued for the writer, in bytes: a burst of keystrokes (hundreds
/// of tiny messages at once, forwarded through a peer) fits; a client
/// flooding a program that does not read its input is refused past it.
pub const INPUT_QUEUE_BYTES: usize = 4 << 20;
/// ...and in messages (each at most 64 KiB).
pub(super) const INPUT_QUEUE: usize = 16_384;

/// What goes to the program's terminal, in the order it was asked for: a
/// size set before the keys sent after it, so a program that reads a key
/// and then its size sees the size asked for first.
#[derive(Debug)]
pub enum ToTerminal {
    Keys(Bytes),
    /// Keys whose writer says when the last byte is written (`send`).
    Typed {
        data: Bytes,
        done: tokio::sync::oneshot::Sender<()>,
    },
    Size {
        cols: u16,
        rows: u16,
    },
}

/// What a program's input queue holds, shared by its senders and its
/// writer.
#[derive(Debug, Default)]
pub struct Backlog {
    /// Bytes queued and not yet taken by the writer (bounded by
    /// `INPUT_QUEUE_BYTES`).
    bytes: AtomicUsize,
    /// Messages queued and not yet carried out (the last byte written,
    /// the size set): while there are any, a key queues behind them.
    messages: AtomicUsize,
    /// When keys for this run of the program last came (its reader
    /// reads it: `spin`).
    pub(super) typed: Typed,
}

impl Backlog {
    /// The writer took `n` bytes off the queue.
    pub(super) fn taken(&self, n: usize) {
        self.bytes.fetch_sub(n, Ordering::AcqRel);
    }

    /// The writer carried out one message.
    pub(super) fn done(&self) {
        self.messages.fetch_sub(1, Ordering::Release);
    }
}

/// The writer's end of a program's input queue.
pub(super) type Queue = (mpsc::Receiver<ToTerminal>, Arc<Backlog>);

/// The terminal a key nothing waits ahead of is written to at once.
#[derive(Debug)]
pub(super) struct Direct {
    /// Not held open by this: a finished session's master closes when its
    /// session and tasks let go of it (hanging up its background jobs),
    /// though the directory keeps the session's input sender.
    terminal: Weak<FileDescriptor>,
    lane: Lane,
    /// The node's count of bytes written to its programs.
    written: Arc<AtomicU64>,
    /// Held by a sender while it writes at once or queues.
    gate: Mutex<()>,
}

impl Direct {
    pub(super) fn new(terminal: &Arc<FileDescriptor>, lane: Lane, written: Arc<AtomicU64>) -> Self {
        Direct {
            terminal: Arc::downgrade(terminal),
            lane,
            written,
            gate: Mutex::new(()),
        }
    }

    /// Writes what the terminal takes of `data` now: how much that is
    /// (none once the master is closed).
    fn write(&self, data: &[u8]) -> usize {
        let Some(terminal) = self.terminal.upgrade() else {
            return 0;
        };
        termesh_transport::hops::pass("in_pty", data);
        // A key brings the reads home, as the writer's does.
        self.lane.set_bulk(false);
        let mut done = 0;
        while done < data.len() {
            match rustix::io::write(&*terminal, &data[done..]) {
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                // Full (the rest queues), or gone (the writer says so).
                Err(_) => break,
            }
        }
        self.written.fetch_add(done as u64, Ordering::Relaxed);
        done
    }
}

/// The sending side of a program's input queue, bounded in bytes.
#[derive(Debug, Clone)]
pub struct InputTx {
    tx: mpsc::Sender<ToTerminal>,
    backlog: Arc<Backlog>,
    /// When keys were last queued (the session reads it: `bulk`), and
    /// when they were last queued on any of the node's programs.
    typed: Typed,
    node_typed: Typed,
    /// Where a key nothing waits ahead of is written at once (none: every
    /// key queues).
    direct: Option<Arc<Direct>>,
}

impl InputTx {
    /// A queue of `INPUT_QUEUE` messages and its backlog, whose keys are
    /// written at once where `direct` is given and mark `node_typed`.
    pub(super) fn new(direct: Option<Direct>, node_typed: Typed) -> (InputTx, Queue) {
        let (tx, rx) = mpsc::channel(INPUT_QUEUE);
        let backlog = Arc::new(Backlog::default());
        let input = InputTx {
            tx,
            backlog: backlog.clone(),
            typed: Default::default(),
            node_typed,
            direct: direct.map(Arc::new),
        };
        (input, (rx, backlog))
    }

    /// A queue whose program is gone (a session restored without one).
    pub fn closed() -> InputTx {
        InputTx::new(None, Typed::default()).0
    }

    /// Keys queued here mark `typed` (the session's, so it outlives this
    /// run of the program).
    pub fn share_typed(&mut self, typed: &Typed) {
        self.typed = typed.clone();
    }

    /// Writes `data` to the terminal at once when nothing waits ahead of
    /// it, else queues it without waiting; `Full` past
    /// `INPUT_QUEUE_BYTES` (one message always fits an empty queue).
    pub fn try_send(&self, data: Bytes) -> Result<(), TrySendError<()>> {
        let Some(direct) = &self.direct else {
            return self.push(data.len(), ToTerminal::Keys(data));
        };
        let _gate = direct.gate.lock().unwrap_or_else(PoisonError::into_inner);
        if self.backlog.messages.load(Ordering::Acquire) > 0 || self.tx.is_closed() {
            return self.queue(data.len(), ToTerminal::Keys(data));
        }
        self.mark_typed();
        let written = direct.write(&data);
        if written == data.len() {
            return Ok(());
        }
        // The rest goes first in the queue: the gate is held.
        self.queue(
            data.len() - written,
            ToTerminal::Keys(data.slice(written..)),
        )
    }

    /// Queues `data` as `try_send` does; the receiver resolves once all of
    /// it is written to the terminal (an error: the program is gone).
    pub fn try_send_typed(
        &self,
        data: Bytes,
    ) -> Result<tokio::sync::oneshot::Receiver<()>, TrySendError<()>> {
        let (done, written) = tokio::sync::oneshot::channel();
        self.push(data.len(), ToTerminal::Typed { data, done })?;
        Ok(written)
    }

    /// Queues a new size behind the keys queued so far; `false` when the
    /// queue cannot take it (full, or the program is gone).
    pub fn resize(&self, cols: u16, rows: u16) -> bool {
        self.push(0, ToTerminal::Size { cols, rows }).is_ok()
    }

    /// One mark for the node, this run and the session: equal for the
    /// same key (the reader compares the first two: `spin`).
    fn mark_typed(&self) {
        Typed::now_all(&[&self.node_typed, &self.backlog.typed, &self.typed]);
    }

    /// Queues `msg` of `n` bytes, holding the gate.
    fn push(&self, n: usize, msg: ToTerminal) -> Result<(), TrySendError<()>> {
        let _gate = self
            .direct
            .as_ref()
            .map(|d| d.gate.lock().unwrap_or_else(PoisonError::into_inner));
        self.queue(n, msg)
    }

    /// Queues `msg` of `n` bytes (the caller holds the gate).
    fn queue(&self, n: usize, msg: ToTerminal) -> Result<(), TrySendError<()>> {
        let queued = self.backlog.bytes.load(Ordering::Acquire);
        // A size always fits.
        if n > 0 && queued > 0 && queued + n > INPUT_QUEUE_BYTES {
            return Err(TrySendError::Full(()));
        }
        self.backlog.bytes.fetch_add(n, Ordering::AcqRel);
        self.backlog.messages.fetch_add(1, Ordering::AcqRel);
        if n > 0 {
            self.mark_typed();
        }
        self.tx.try_send(msg).map_err(|e| {
            self.backlog.bytes.fetch_sub(n, Ordering::AcqRel);
            self.backlog.messages.fetch_sub(1, Ordering::AcqRel);
            match e {
                TrySendError::Full(_) => TrySendError::Full(()),
                TrySendError::Closed(_) => TrySendError::Closed(()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_input_queue_takes_a_burst_of_keys_and_refuses_past_its_bytes() {
        let (input, _rx) = InputTx::new(None, Typed::default());
        // Thousands of keystrokes nobody has written yet all wait.
        for i in 0..5_000 {
            input.try_send(Bytes::from(format!("k{i}\n"))).unwrap();
        }
        // Big pastes fill the bytes; one more is refused, not queued.
        let paste = Bytes::from(vec![b'x'; 64 << 10]);
        let mut taken = 0;
        while input.try_send(paste.clone()).is_ok() {
            taken += 1;
            assert!(taken <= INPUT_QUEUE_BYTES / paste.len(), "bounded in bytes");
        }
        assert!(taken >= INPUT_QUEUE_BYTES / paste.len() - 1);
    }

    #[test]
    fn a_key_written_or_queued_marks_its_session_and_the_node() {
        let (node, session) = (Typed::default(), Typed::default());
        let (mut input, _rx) = InputTx::new(None, node.clone());
        input.share_typed(&session);
        input.resize(100, 30);
        assert_eq!((node.at(), session.at()), (0, 0), "a size is no key");
        input.try_send(Bytes::from_static(b"k")).unwrap();
        assert!(node.recent() && session.recent(), "queued");

        let (mut input, (mut rx, _), _master, _slave) = on_terminal();
        let (node, session) = (Typed::default(), Typed::default());
        input.node_typed = node.clone();
        input.share_typed(&session);
        input.try_send(Bytes::from_static(b"k")).unwrap();
        assert!(rx.try_recv().is_err(), "written at once, not queued");
        assert!(node.recent() && session.recent(), "written at once");
    }

    /// An input queue on a fresh raw terminal, with keys written at once,
    /// and the terminal's master (the test holds it open) and slave.
    fn on_terminal() -> (InputTx, Queue, Arc<FileDescriptor>, std::os::fd::OwnedFd) {
        let (master, slave) = crate::session::pty::raw_terminal();
        let master = Arc::new(master);
        let direct = Direct::new(&master, Lane::default(), Arc::default());
        let (input, queue) = InputTx::new(Some(direct), Typed::default());
        (input, queue, master, slave)
    }

    /// The next `n` bytes the terminal gives its program (bounded: the
    /// kernel passes a master's writes on to the slave on a worker).
    fn read_exactly(slave: &std::os::fd::OwnedFd, n: usize) -> Vec<u8> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut got = vec![0u8; n];
        let mut filled = 0;
        while filled < n {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(!left.is_zero(), "{filled} of {n} bytes read");
            let mut fds = [nix::poll::PollFd::new(
                std::os::fd::AsFd::as_fd(slave),
                nix::poll::PollFlags::POLLIN,
            )];
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            if nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)).unwrap() > 0 {
                let fd = std::os::fd::AsRawFd::as_raw_fd(slave);
                filled += nix::unistd::read(fd, &mut got[filled..]).unwrap();
            }
        }
        got
    }

    #[test]
    fn a_key_nothing_waits_ahead_of_is_written_at_once_and_the_rest_keeps_its_order() {
        let (input, (mut rx, backlog), master, slave) = on_terminal();
        input.try_send(Bytes::from_static(b"abc")).unwrap();
        assert!(rx.try_recv().is_err(), "written at once, not queued");
        assert_eq!(read_exactly(&slave, 3), b"abc");

        // A paste larger than the terminal takes: what it does not take
        // is queued, and a key and a size after it queue behind it.
        let paste: Vec<u8> = (0..1_000_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        input.try_send(Bytes::from(paste.clone())).unwrap();
        input.try_send(Bytes::from_static(b"z")).unwrap();
        assert!(input.resize(100, 40));
        let Ok(ToTerminal::Keys(rest)) = rx.try_recv() else {
            panic!("the paste's rest first");
        };
        let written = paste.len() - rest.len();
        assert!(written > 0 && !rest.is_empty(), "{written} written at once");
        assert_eq!(&paste[written..], &rest[..]);
        // The program reads what was written: the terminal has room, but a
        // key still queues behind what waits.
        assert_eq!(read_exactly(&slave, written), paste[..written]);
        input.try_send(Bytes::from_static(b"y")).unwrap();
        for want in [&b"z"[..], b"size", b"y"] {
            match rx.try_recv() {
                Ok(ToTerminal::Keys(k)) => assert_eq!(&k[..], want),
                Ok(ToTerminal::Size { cols, rows }) => {
                    assert_eq!((want, cols, rows), (&b"size"[..], 100, 40))
                }
                other => panic!("{other:?} where {want:?} was queued"),
            }
        }
        // Until the writer has carried them all out, keys still queue.
        backlog.taken(rest.len() + 2);
        for _ in 0..3 {
            backlog.done();
        }
        input.try_send(Bytes::from_static(b"w")).unwrap();
        assert!(matches!(rx.try_recv(), Ok(ToTerminal::Keys(k)) if &k[..] == b"w"));
        backlog.taken(1);
        backlog.done();
        backlog.done();
        // Nothing waits: written at once again.
        input.try_send(Bytes::from_static(b"x")).unwrap();
        assert!(rx.try_recv().is_err());
        assert_eq!(read_exactly(&slave, 1), b"x");

        // The sender does not hold the master open: once the session and
        // its tasks let go of it, a key goes to the queue (whose writer
        // ends with the master, and the key is refused).
        drop(master);
        input.try_send(Bytes::from_static(b"v")).unwrap();
        assert!(matches!(rx.try_recv(), Ok(ToTerminal::Keys(k)) if &k[..] == b"v"));
    }
}
