//! The node's session threads: one actix arbiter per core, taken in turn.
//! A session's actor and its PTY's reader, writer and exit waiter all run
//! on the session's thread, so an echo is read, logged and applied by the
//! session with no other thread woken in between (on a host that halts
//! its idle CPUs, each thread woken costs a CPU's wake-up; a keystroke's
//! tail was made of those).

use actix::{Arbiter, ArbiterHandle};

/// One session thread: its arbiter (for the actor) and its runtime (for
/// the PTY's tasks, spawned from other threads).
#[derive(Clone, Debug)]
pub struct Home {
    /// Where the session's actor starts.
    pub arbiter: ArbiterHandle,
    /// Where its PTY's reader, writer and exit waiter are spawned.
    pub runtime: tokio::runtime::Handle,
}

/// The session threads, and whose turn it is.
pub(crate) struct Homes {
    all: Vec<(Arbiter, tokio::runtime::Handle)>,
    next: usize,
}

/// What the threads are called (`top -H`, `/proc/<pid>/task/*/comm`).
pub const THREAD_NAME: &str = "sessions";

impl Homes {
    /// `count` threads (at least one), started now.
    pub(crate) fn start(count: usize) -> Homes {
        Homes {
            all: (0..count.max(1)).map(|_| home_thread()).collect(),
            next: 0,
        }
    }

    /// The thread the next session runs on.
    pub(crate) fn next(&mut self) -> Home {
        let (arbiter, runtime) = &self.all[self.next % self.all.len()];
        self.next = self.next.wrapping_add(1);
        Home {
            arbiter: arbiter.handle(),
            runtime: runtime.clone(),
        }
    }
}

/// The threads end with the node's registry: a node stopped in a process
/// that goes on (tests, an embedding program) leaves none behind. A PTY
/// waiter dropped with its thread before it reaped leaves its program to
/// the process's reaper (`pty::reaper::orphan`).
impl Drop for Homes {
    fn drop(&mut self) {
        for (arbiter, _) in &self.all {
            arbiter.stop();
        }
    }
}

/// An arbiter on a runtime whose handle it sends back as it starts (the
/// PTY's tasks are spawned on it from the threads that start programs).
/// Panics as `Arbiter::new` does when no thread or runtime can be made:
/// a node cannot run sessions without them.
fn home_thread() -> (Arbiter, tokio::runtime::Handle) {
    let (tx, rx) = std::sync::mpsc::channel();
    let arbiter = Arbiter::with_tokio_rt(move || {
        let _ = rustix::thread::set_name(
            &std::ffi::CString::new(THREAD_NAME).expect("no NUL in the name"),
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .expect("a session thread's runtime");
        let _ = tx.send(runtime.handle().clone());
        runtime
    });
    let runtime = rx
        .recv()
        .expect("a session thread sends its runtime as it starts");
    (arbiter, runtime)
}
