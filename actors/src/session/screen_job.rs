//! Screen work done off the session's actor thread: bring the cached model
//! up to date with the ring (or rebuild it from the ring when the cache fell
//! behind the replay window) and answer every waiting request from one pass,
//! so a reconnect storm costs one catch-up, not one per client.

use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;

use super::messages::{ScreenOut, ScreenResult, ScreenWant};
use crate::output::ring::{Frame, Ring};
use crate::session::screen::{ResizeMark, ScreenModel};

/// Fault injection for tests of the failure path: this many upcoming jobs
/// panic as a bug in the emulator would. Zero (always, outside such tests)
/// costs one relaxed load per job.
#[doc(hidden)]
pub static FAIL_SCREEN_JOBS: AtomicU32 = AtomicU32::new(0);

/// Everything a job needs, cloned out of the session (frames are shared
/// buffers, so this is cheap).
pub struct Job {
    pub model: Box<ScreenModel>,
    pub frames: Vec<Frame>,
    pub marks: Vec<ResizeMark>,
    /// The ring's last seq: the model stands there after the frames.
    pub through: u64,
    pub modes: String,
    /// Distinct requests: each is computed once per pass.
    pub wants: Vec<ScreenWant>,
}

pub struct Done {
    pub model: Box<ScreenModel>,
    pub results: Vec<ScreenResult>,
}

impl Job {
    /// Prepares a job: reuses `cached` when it is still contiguous with the
    /// ring, else starts a blank model at the ring's start, sized as the
    /// terminal was then.
    pub fn prepare(
        cached: Option<Box<ScreenModel>>,
        ring: &Ring,
        marks: &[ResizeMark],
        initial_size: (u16, u16),
        modes: String,
        wants: Vec<ScreenWant>,
    ) -> Job {
        let start = ring.oldest_seq().saturating_sub(1);
        let model = match cached {
            Some(model) if model.seq() >= start => model,
            _ => {
                let before: Option<&ResizeMark> = marks.iter().rfind(|m| m.after_seq <= start);
                let (cols, rows) = before.map_or(initial_size, |m| (m.cols, m.rows));
                Box::new(ScreenModel::new(
                    cols,
                    rows,
                    start,
                    before.map_or(0, |m| m.id),
                ))
            }
        };
        let frames = ring.held_after(model.seq()).cloned().collect();
        Job {
            model,
            frames,
            through: ring.last_seq(),
            marks: marks.to_vec(),
            modes,
            wants,
        }
    }

    pub fn run(mut self) -> Done {
        let inject = FAIL_SCREEN_JOBS
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if inject.is_ok() {
            panic!("injected screen job failure (FAIL_SCREEN_JOBS)");
        }
        self.model.advance(&self.frames, &self.marks);
        // Past the frames held: seqs skipped after a crash.
        self.model.reach(self.through, &self.marks);
        let (cols, rows) = self.model.size();
        let seq = self.model.seq();
        let results = self
            .wants
            .iter()
            .map(|want| {
                let out = match *want {
                    ScreenWant::Snapshot { scrollback } => ScreenOut::Snapshot(Bytes::from(
                        self.model.snapshot(scrollback, &self.modes).into_bytes(),
                    )),
                    ScreenWant::Lines { max } => ScreenOut::Lines(self.model.lines(max)),
                    ScreenWant::Text => ScreenOut::Text(self.model.text()),
                };
                ScreenResult {
                    seq,
                    cols,
                    rows,
                    out,
                }
            })
            .collect();
        Done {
            model: self.model,
            results,
        }
    }
}
