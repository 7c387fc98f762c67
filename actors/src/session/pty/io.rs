//! A session's PTY I/O without threads or descriptors of its own: the
//! master is non-blocking and registered once with the runtime of its
//! session's thread (its home, where the session's actor runs); the
//! session's reader, writer and exit waiter are tasks there, so ten
//! thousand sessions cost ten thousand sets of tasks and one descriptor
//! each (the master), not thirty thousand threads or four descriptors
//! each, and an echo is read, logged and applied by its session without
//! another thread woken in between.
//!
//! - The reader reads into a buffer whose filled part is split off as the
//!   frame (no copy between the read and every subscriber), and passes it
//!   on through a bounded channel: when the session falls behind, the
//!   reader waits, the kernel buffer fills and the program's writes block.
//!   After a read, whatever is already waiting joins the same frame, up to
//!   `READ_CHUNK`. It reads only what the kernel already holds (`reads`:
//!   a read that finds nothing would hold the thread until the
//!   terminal's flush worker ran), and when its reads since the line
//!   discipline was last empty filled it, it waits up to `spin::SPIN` on
//!   its CPU for the worker's next push rather than parking (`spin`;
//!   not while someone types into another program): at home a flood's
//!   frame is what the reader takes while the program prints, up to
//!   `READ_CHUNK`, and an echo goes out as read. On the bulk thread a frame reads on for up to `LINGER`
//!   until it holds `BULK_FRAME` (`reads::gather`; a key brings the reads
//!   home and the frame out at once). Each frame gets its seq and is in the
//!   output log before it is queued (`seqs`): a node killed with frames
//!   queued loses none. After a large frame the reader yields, so a
//!   flood's reads take turns with the other sessions on the same thread.
//!   The reader alone holds the master's registration (for readability);
//!   while its session is bulk (`Lane`) it runs on the node's one bulk
//!   thread (`pty-io-bulk`, `PtyIo`; nice +10 while someone types on the
//!   node: `weight`), taking the registration
//!   there between two frames, and comes home the same way.
//! - The writer (`writes`) drains the input channel that connections hold senders
//!   of (a key nothing waits ahead of is written by its sender instead:
//!   `input`), so keystrokes never wait behind output work; a program
//!   that does not read its input makes only its own writer wait (on a
//!   copy of the master registered for writability while the terminal is
//!   full: the one moment a session holds a second descriptor). A key
//!   written brings the reader home.
//! - The waiter learns of the exit without reaping, so the program's pid,
//!   and with it its process group id, stays reserved by the zombie; it
//!   reaps only when the session drops its `ReapGuard`, after which the
//!   session never signals the group again. For the node's own child the
//!   exit comes from the node's SIGCHLD pass (`reaper`) and the waiter
//!   reaps; for a program the keeper holds, the keeper tells of the exit
//!   and reaps when the waiter releases it. A detached guard (the node
//!   stops) ends the tasks and leaves a kept program running.

use std::io::ErrorKind;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use tokio::io::Interest;
use tokio::sync::{mpsc, oneshot, watch};

use super::input::Queue;
use super::reads::{self, read_ready, Gathered};
use super::seqs::Sequencer;
use super::spin::Spin;
use super::weight;
use super::writes;
use super::{reaper, released, ExitInfo, Let, PtyEvent, Registered, Terminal};
use crate::keeper::Kept;
use crate::session::bulk::Typed;

/// Largest read from the PTY, and so the largest frame.
pub const READ_CHUNK: usize = 64 * 1024;
/// On the bulk thread a frame gathers its flood's reads up to this size
/// (`reads::gather`), or for at most `LINGER`. A frame of what one
/// wake-up found was 7 KiB on average (before `spin`), and each pays its
/// log write and every subscriber's and connection's work once: on a
/// connection that also shows a session someone types into, that work
/// stood in front of the echoes (docs/benchmarks.md, issue 32, sixteenth
/// stop). At home frames go out as read: there a flood is under a second
/// old or typed into (within its burst: `bulk`), and a frame held back
/// there stalls the read, ship and ack pipeline a short flood's rate
/// depends on (the same stop).
pub const BULK_FRAME: usize = 32 * 1024;
/// How long a bulk frame waits for more: its viewers see it about this
/// much later (tokio's timer ticks in milliseconds, and the bulk thread
/// runs at a lower weight while someone types).
pub const LINGER: std::time::Duration = std::time::Duration::from_millis(2);
/// First read size: an idle session touches no more memory than this.
const MIN_CHUNK: usize = 4 * 1024;

/// What a node's PTYs share: the bulk readers' thread, started with the
/// first bulk session, and the counts for the node's metrics. Every task
/// holds a clone, so the thread ends once the node has let go and the
/// last session's tasks have ended: two nodes in one process share none.
#[derive(Clone, Debug, Default)]
pub struct PtyIo(Arc<Threads>);

#[derive(Debug, Default)]
struct Threads {
    /// The thread bulk sessions' readers run on (`weight`), and the
    /// sender whose drop ends it.
    bulk: Mutex<Option<(tokio::runtime::Handle, oneshot::Sender<()>)>>,
    /// The readers on it now (`termesh_bulk_sessions`).
    on_bulk: Arc<AtomicI64>,
    /// Input bytes written to terminals (`termesh_input_written_bytes_total`).
    written: Arc<AtomicU64>,
    /// When input last reached any of the node's programs (`bulk::Flow`).
    typed: Typed,
}

impl PtyIo {
    /// What a node's PTYs share, counting the readers on the bulk thread
    /// in `on_bulk` and the input written in `written` (the node's
    /// metrics).
    pub fn counting(on_bulk: Arc<AtomicI64>, written: Arc<AtomicU64>) -> PtyIo {
        PtyIo(Arc::new(Threads {
            on_bulk,
            written,
            ..Default::default()
        }))
    }

    /// The runtime of the bulk readers' thread.
    fn bulk_runtime(&self) -> std::io::Result<tokio::runtime::Handle> {
        let mut bulk = self.0.bulk.lock().unwrap_or_else(|p| p.into_inner());
        if bulk.is_none() {
            *bulk = Some(bulk_thread()?);
        }
        Ok(bulk.as_ref().expect("started above").0.clone())
    }

    /// The node's count of input bytes written to terminals.
    pub(super) fn written(&self) -> Arc<AtomicU64> {
        self.0.written.clone()
    }

    /// When input last reached any of the node's programs.
    pub fn typed(&self) -> Typed {
        self.0.typed.clone()
    }
}

/// The bulk readers' thread (`pty-io-bulk`, lowered while someone types:
/// `weight`), running a current-thread
/// runtime until its sender is dropped (with the last `PtyIo`).
fn bulk_thread() -> std::io::Result<(tokio::runtime::Handle, oneshot::Sender<()>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let handle = rt.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("pty-io-bulk".into())
        .spawn(move || {
            weight::start();
            let _ = rt.block_on(stopped);
        })?;
    Ok((handle, stop))
}

/// Whose child the program is.
pub enum Child {
    /// The node's: the node's SIGCHLD pass sees its exit, the waiter reaps.
    Own,
    /// The keeper's: it tells of the exit and reaps on release.
    Kept(Kept),
}

/// Starts the reader and writer on `terminal` (non-blocking) and the
/// waiter for `pid`, on `home`.
pub fn start(
    (io, home): (&PtyIo, &tokio::runtime::Handle),
    terminal: &Terminal,
    pid: i32,
    child: Child,
    (events, seqs): (
        mpsc::Sender<PtyEvent>,
        watch::Receiver<Option<Arc<Sequencer>>>,
    ),
    input: Queue,
    release: watch::Receiver<Let>,
) -> std::io::Result<()> {
    if matches!(child, Child::Own) {
        reaper::start()?;
    }
    let rt = home.clone();
    let _in_runtime = rt.enter();
    let master = crate::os::register_owned(terminal.descriptor(), Interest::READABLE)?;
    let reader = Reader {
        io: io.clone(),
        home: rt.clone(),
        on_bulk: false,
        lane: terminal.lane().0.subscribe(),
        tx: events.clone(),
        release: release.clone(),
        seqs,
        given: None,
        want: MIN_CHUNK,
        spin: Spin::default(),
        typed: input.1.typed.clone(),
    };
    rt.spawn(held(io, read_task(reader, master)));
    let writer = (
        terminal.descriptor(),
        terminal.lane().clone(),
        io.0.written.clone(),
    );
    rt.spawn(held(io, writes::write_task(writer, input, release.clone())));
    match child {
        Child::Own => rt.spawn(held(io, wait_task(pid, events, release))),
        Child::Kept(kept) => rt.spawn(held(io, wait_kept(kept, events, release))),
    };
    Ok(())
}

/// `task`, keeping the node's bulk thread alive while it runs.
fn held<F: std::future::Future<Output = ()>>(
    io: &PtyIo,
    task: F,
) -> impl std::future::Future<Output = ()> {
    let io = io.clone();
    async move {
        task.await;
        drop(io);
    }
}

/// What a session's reader carries from one thread to another.
struct Reader {
    io: PtyIo,
    /// The runtime the session's writer and waiter run on.
    home: tokio::runtime::Handle,
    /// Reading on the bulk thread.
    on_bulk: bool,
    lane: watch::Receiver<bool>,
    tx: mpsc::Sender<PtyEvent>,
    release: watch::Receiver<Let>,
    seqs: watch::Receiver<Option<Arc<Sequencer>>>,
    given: Option<Arc<Sequencer>>,
    /// The next read's size.
    want: usize,
    /// When it waits on its CPU for the terminal's next push (`spin`).
    spin: Spin,
    /// When keys for this program last came.
    typed: Typed,
}

impl Reader {
    /// The runtime of the thread `bulk` asks for.
    fn runtime(&self, bulk: bool) -> std::io::Result<tokio::runtime::Handle> {
        if bulk {
            self.io.bulk_runtime()
        } else {
            Ok(self.home.clone())
        }
    }

    /// Goes on reading here with the master registered anew: a hang-up
    /// it saw is over (`reads::read_ready`).
    fn renew(self, master: Registered) {
        let bulk = self.on_bulk;
        self.move_to(tokio::runtime::Handle::current(), master, bulk);
    }

    /// Goes on reading on `rt`: the registration leaves this runtime's
    /// reactor (no readiness wakes this thread for the flood any more) and
    /// joins the other's.
    fn move_to(mut self, rt: tokio::runtime::Handle, master: Registered, bulk: bool) {
        let fd = master.into_inner();
        self.on_bulk = bulk;
        let io = self.io.clone();
        rt.spawn(held(&io, async move {
            match crate::os::register_owned(fd, Interest::READABLE) {
                Ok(master) => read_task(self, master).await,
                // Registration fails only without memory for it: the
                // program's output has nowhere to go, as at EOF.
                Err(e) => {
                    tracing::error!("cannot register a PTY for reading: {e}");
                    let _ = self.tx.send(PtyEvent::Eof).await;
                }
            }
        }));
    }
}

/// Ends at EOF, or once the session lets go (`ReapGuard`): a background
/// job that keeps the terminal open after the session finished does not
/// keep its master open with it. Moves to the thread its lane asks for
/// between frames, or while it waits.
async fn read_task(mut r: Reader, master: Registered) {
    let _counted = r.on_bulk.then(|| Counted::new(&r.io.0.on_bulk));
    let mut buf = BytesMut::new();
    loop {
        let bulk = *r.lane.borrow_and_update();
        if bulk != r.on_bulk {
            match r.runtime(bulk) {
                Ok(rt) => return r.move_to(rt, master, bulk),
                Err(e) => {
                    // The reads stay here and stop following the lane.
                    tracing::warn!("the bulk PTY reader thread did not start: {e}");
                    r.lane = watch::channel(r.on_bulk).1;
                }
            }
        }
        if r.on_bulk {
            weight::weigh(&r.io.0.typed);
        }
        buf.clear();
        // On the bulk thread a frame gathers up to `BULK_FRAME`: room for
        // it at once, not a copy at each doubling.
        let room = if r.on_bulk {
            r.want.max(BULK_FRAME)
        } else {
            r.want
        };
        buf.resize(room, 0);
        let got = tokio::select! {
            got = read_ready(&master, &mut buf) => got,
            _ = released(&mut r.release) => return,
            _ = lane_changed(&mut r.lane) => continue,
        };
        let mut filled = match got {
            Err(e) if e.kind() == ErrorKind::WouldBlock => return r.renew(master),
            // Linux reports EIO once the last slave fd closes: that is EOF.
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        r.want = if filled == r.want {
            (r.want * 2).min(READ_CHUNK)
        } else if filled < r.want / 4 {
            (r.want / 2).max(MIN_CHUNK)
        } else {
            r.want
        };
        // Someone types into another program: a wait here would hold a
        // CPU their echo needs.
        r.spin.allow(!r.io.0.typed.elsewhere_since(&r.typed));
        r.spin.took(filled);
        reads::take_waiting(&master, &mut buf, &mut filled, (READ_CHUNK, &mut r.spin));
        // On the bulk thread a frame waits a moment for more of its flood
        // (its viewers see it about `LINGER` later).
        let mut end = Gathered::Frame;
        if r.on_bulk && filled < BULK_FRAME {
            let until = tokio::time::Instant::now() + LINGER;
            end = tokio::select! {
                end = reads::gather(
                    &master,
                    &mut buf,
                    &mut filled,
                    (BULK_FRAME, until, &mut r.spin),
                ) => end,
                // Released, or typed into (its reads go home): what was
                // read goes out now.
                _ = released(&mut r.release) => Gathered::Frame,
                _ = lane_changed(&mut r.lane) => Gathered::Frame,
            };
        }
        let data = buf.split_to(filled).freeze();
        termesh_transport::hops::pass("out_read", &data);
        if r.given.is_none() {
            // The session hands over its seqs as it takes the PTY.
            r.given = match r.seqs.wait_for(Option::is_some).await {
                Ok(set) => set.clone(),
                Err(_) => return,
            };
        }
        let Some(seq) = r.given.as_ref().expect("waited for some").log(&data).await else {
            // A later run took over.
            return;
        };
        if r.tx.send(PtyEvent::Output { seq, data }).await.is_err() {
            return;
        }
        match end {
            Gathered::Frame => {}
            Gathered::End => break,
            Gathered::Renew => return r.renew(master),
        }
        if filled >= READ_CHUNK / 2 {
            // A flood's reads take turns with the other sessions' tasks on
            // this thread (a keystroke waits at most one frame's reads,
            // with their waits for the terminal's pushes, and its log, not
            // a run of frames until tokio's budget is spent).
            tokio::task::yield_now().await;
        }
    }
    let _ = r.tx.send(PtyEvent::Eof).await;
}

/// One more while it lives.
struct Counted(Arc<AtomicI64>);

impl Counted {
    fn new(count: &Arc<AtomicI64>) -> Counted {
        count.fetch_add(1, Ordering::Relaxed);
        Counted(count.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Once the lane changes (never, once nobody can change it).
async fn lane_changed(lane: &mut watch::Receiver<bool>) {
    if lane.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Tells the session of the exit, then reaps once it lets go of its guard.
/// Dropped before it reaped (its session's thread stopped with its node),
/// it leaves the reaping to the process's reaper.
async fn wait_task(pid: i32, tx: mpsc::Sender<PtyEvent>, mut release: watch::Receiver<Let>) {
    let unreaped = Unreaped(pid);
    let info = reaper::exited(pid).await.unwrap_or(ExitInfo {
        code: 1,
        signal: None,
    });
    let _ = tx.send(PtyEvent::Exited(info)).await;
    // Wait until the session lets go of its guard (or is gone), then reap
    // the zombie: at once, as the reaper saw it exit (an answer without an
    // exit only comes when the reaper is gone, and then so is the node).
    released(&mut release).await;
    std::mem::forget(unreaped);
    while let Err(nix::errno::Errno::EINTR) = waitpid(Pid::from_raw(pid), None) {}
}

/// The node's own child, not reaped yet by its waiter.
struct Unreaped(i32);

impl Drop for Unreaped {
    fn drop(&mut self) {
        reaper::orphan(self.0);
    }
}

/// Tells the session of the exit the keeper reports (or that the keeper,
/// and the program with it, is gone), then releases the program to the
/// keeper once the session lets go; a detach leaves it with the keeper.
async fn wait_kept(mut kept: Kept, tx: mpsc::Sender<PtyEvent>, mut release: watch::Receiver<Let>) {
    let ended = tokio::select! {
        exit = kept.exit() => Ok(match exit {
            Some(exit) => PtyEvent::Exited(exit.into()),
            None => PtyEvent::Lost,
        }),
        how = released(&mut release) => Err(how),
    };
    let event = match ended {
        Ok(event) => event,
        Err(how) => {
            if how == Let::Released {
                release_off_thread(kept);
            }
            return;
        }
    };
    let _ = tx.send(event).await;
    drop(tx);
    if released(&mut release).await == Let::Released {
        release_off_thread(kept);
    }
}

/// Releases a kept program on a blocking thread: telling the keeper can
/// wait up to its socket timeout, and this thread runs its sessions' actors
/// and their PTYs' reads and writes.
fn release_off_thread(kept: Kept) {
    drop(tokio::task::spawn_blocking(move || kept.release()));
}
