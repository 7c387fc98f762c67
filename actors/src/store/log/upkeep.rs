//! The output log's own threads: group sync (`log-sync`) and the deletion
//! of trimmed segments' files (`log-trim`), both below the node's
//! priority, so neither a reader that appends nor a session's thread
//! ever waits for the file system's slow operations.

use std::io;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Weak};
use std::time::Duration;

use super::{session, OutputLog, SYNC_EVERY};

/// Work for the `log-trim` thread.
#[derive(Debug)]
pub(super) enum Trim {
    /// Files of trimmed segments, to delete in order.
    Delete(Vec<PathBuf>),
    /// Answer once everything sent before is deleted.
    Settle(mpsc::SyncSender<()>),
}

/// How long a clean stop waits for trimmed segments to be deleted.
const SETTLE_WAIT: Duration = Duration::from_secs(10);
/// Trims waiting for the `log-trim` thread, at most: past it (the thread
/// starved, or the file system slow to delete) the appending thread
/// deletes its own, so the disk never holds more than this many segments
/// beyond what the log counts.
pub(super) const QUEUED_TRIMS: usize = 16;

impl OutputLog {
    /// Deletes trimmed segments' files: on the `log-trim` thread once it
    /// runs, here before (or if it is gone).
    pub(super) fn delete(&self, files: Vec<PathBuf>) {
        if files.is_empty() {
            return;
        }
        let job = match self.trimmer.get() {
            Some(tx) => match tx.try_send(Trim::Delete(files)) {
                Ok(()) => return,
                Err(mpsc::TrySendError::Full(job) | mpsc::TrySendError::Disconnected(job)) => job,
            },
            None => Trim::Delete(files),
        };
        if let Trim::Delete(files) = job {
            delete_files(&files);
        }
    }

    /// Waits (a while at most) until the segments trimmed so far are
    /// deleted: a clean stop leaves the log on disk as it counts it.
    pub(super) fn settle_trims(&self) {
        let Some(tx) = self.trimmer.get() else {
            return;
        };
        let (done, settled) = mpsc::sync_channel(1);
        // Waits for room in the queue too (the thread is taking from it).
        if tx.send(Trim::Settle(done)).is_ok() && settled.recv_timeout(SETTLE_WAIT).is_err() {
            tracing::warn!(dir = %self.dir.display(), "output log: trimmed segments are still being deleted");
        }
    }

    /// Deletes trimmed segments' files on a thread of their own, below
    /// the node's priority, until the log is dropped: unlinking a segment
    /// of a few MiB with its pages cached takes tenths of a millisecond,
    /// more when it waits for the file system's journal, which the reader
    /// that trims (and every session whose reads share its thread) would
    /// otherwise wait for.
    pub fn start_trimming(log: &OutputLog) -> io::Result<()> {
        let (tx, rx) = mpsc::sync_channel(QUEUED_TRIMS);
        std::thread::Builder::new()
            .name("log-trim".into())
            .spawn(move || {
                crate::os::lower_priority(&[], 10);
                // Ends once the log, and with it the sender, is dropped.
                for job in rx {
                    match job {
                        Trim::Delete(files) => delete_files(&files),
                        Trim::Settle(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            })?;
        // Started once: a second call leaves the first thread in charge
        // (its sender is kept; this one's thread ends at once).
        let _ = log.trimmer.set(tx);
        Ok(())
    }

    /// Syncs the log every `SYNC_EVERY` on a thread of its own, below the
    /// node's priority, until the log is dropped.
    pub fn start_syncing(log: &Arc<OutputLog>) -> io::Result<()> {
        let weak: Weak<OutputLog> = Arc::downgrade(log);
        std::thread::Builder::new()
            .name("log-sync".into())
            .spawn(move || {
                crate::os::lower_priority(&[], 10);
                loop {
                    std::thread::sleep(SYNC_EVERY);
                    let Some(log) = weak.upgrade() else {
                        return;
                    };
                    if let Err(e) = log.sync() {
                        log.sync_failed(&e);
                    }
                }
            })
            .map(|_| ())
    }
}

impl Drop for OutputLog {
    fn drop(&mut self) {
        self.settle_trims();
    }
}

/// Deletes trimmed segments' files in order; one that cannot be deleted
/// is said (it stays on disk, outside the log, until a restart finds it
/// and trims it again).
fn delete_files(files: &[PathBuf]) {
    for file in files {
        if let Err(e) = session::remove_if_there(file) {
            tracing::warn!(path = %file.display(), "output log: a trimmed segment cannot be deleted: {e}");
        }
    }
}
