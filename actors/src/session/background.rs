//! The node's background screen thread: screen passes nobody waits for
//! (warming a watched session's model, catching up an idle one) run on
//! one thread of their own in the idle scheduling class
//! (`os::idle_thread`; nice +10 where that is refused), so on a saturated
//! machine they never take a core from a keystroke's path: a
//! flood's screen work once took half a core at normal priority beside
//! the echo of the session being typed into (docs/benchmarks.md, issue
//! 32). Passes someone waits for (a snapshot, `screen`, `history`, a look
//! at an agent's state) stay on the blocking pool at normal priority; one
//! that finds a background pass of its session running waits for that
//! pass at most `screens::OVERTAKE_AFTER`, then runs its own: a machine
//! kept busy may not run this thread for as long as it stays busy.
//!
//! Each session runs at most one background pass at a time, so the queue
//! holds at most one job per session.

use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use tokio::sync::oneshot;

type Work = Box<dyn FnOnce() + Send>;

/// Fault injection for tests of a starved background thread (a machine
/// kept busy runs nothing in the idle class): while set, every job waits
/// before it starts, and `HELD_BACKGROUND_JOBS` counts the jobs that
/// waited. Built only with the `fault-injection` feature (the node's tests
/// turn it on).
#[cfg(feature = "fault-injection")]
pub static HOLD_BACKGROUND: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);
#[cfg(feature = "fault-injection")]
pub static HELD_BACKGROUND_JOBS: std::sync::atomic::AtomicU32 =
    std::sync::atomic::AtomicU32::new(0);

#[cfg(feature = "fault-injection")]
fn held() {
    use std::sync::atomic::Ordering;
    if HOLD_BACKGROUND.load(Ordering::SeqCst) {
        HELD_BACKGROUND_JOBS.fetch_add(1, Ordering::SeqCst);
        while HOLD_BACKGROUND.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// How much lower than the node the thread runs where the idle class is
/// refused.
const NICE_STEPS: i32 = 10;

/// Runs `work` on the background screen thread; its result comes on the
/// receiver (closed if the thread could not be started: the pass fails
/// and is tried again, as any failed pass).
pub fn run<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> oneshot::Receiver<T> {
    let (done, result) = oneshot::channel();
    let job: Work = Box::new(move || {
        let _ = done.send(work());
    });
    if let Some(queue) = queue() {
        let _ = queue.lock().map(|q| q.send(job));
    }
    result
}

fn queue() -> Option<&'static Mutex<mpsc::Sender<Work>>> {
    static QUEUE: OnceLock<Option<Mutex<mpsc::Sender<Work>>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Work>();
            let started = std::thread::Builder::new()
                .name("screen-bg".into())
                .spawn(move || {
                    if let Some(group) = super::cpu_group::bulk_group() {
                        group.enter_thread();
                    }
                    crate::os::idle_thread(NICE_STEPS);
                    for job in rx {
                        #[cfg(feature = "fault-injection")]
                        held();
                        // A pass that panics fails alone (its receiver
                        // closes); the thread goes on.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                });
            match started {
                Ok(_) => Some(Mutex::new(tx)),
                Err(e) => {
                    tracing::error!("cannot start the background screen thread: {e}");
                    None
                }
            }
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_on_an_idle_class_thread_and_survives_a_panic() {
        let failed = run(|| panic!("a pass that fails"));
        assert!(
            failed.await.is_err(),
            "a panicking pass closes its receiver"
        );
        let (name, idle) = run(|| {
            let name = std::thread::current().name().map(str::to_string);
            (name, crate::os::in_idle_class())
        })
        .await
        .unwrap();
        assert_eq!(name.as_deref(), Some("screen-bg"));
        assert!(idle, "the idle scheduling class");
    }
}
