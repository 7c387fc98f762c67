//! Screen work done off the session's actor thread: bring the cached model
//! up to date with the ring (or rebuild it from the ring when the cache fell
//! behind the replay window) and answer every waiting request from one pass,
//! so a reconnect storm costs one catch-up, not one per client.

#[cfg(feature = "fault-injection")]
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;

use super::messages::{ScreenOut, ScreenResult, ScreenWant};
use crate::output::ring::{Frame, Ring};
use crate::session::screen::{ResizeMark, ScreenModel};

/// Fault injection for tests of the failure path: this many upcoming jobs
/// panic as a bug in the emulator would. Built only with the
/// `fault-injection` feature (the node's tests turn it on).
#[cfg(feature = "fault-injection")]
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
    /// Output bytes in `frames`.
    pub fed: u64,
    /// The model has not seen the whole ring (a bounded rebuild).
    pub partial: bool,
}

pub struct Done {
    pub model: Box<ScreenModel>,
    /// One per want; `None` for a snapshot that wants more history than a
    /// model that has not seen the whole ring holds: it is asked again
    /// with `whole`.
    pub results: Vec<Option<ScreenResult>>,
}

/// The most output a pass feeds a model before it answers a snapshot: a
/// model further behind (or none at all) is rebuilt from the newest this
/// many bytes of the ring instead of from all of it, so no snapshot costs
/// more than this much emulation (about 15 ms on the reference machine).
/// The screen such a rebuild shows is the one the last half megabyte drew;
/// background warming keeps a watched session's model from falling that
/// far behind. A `history` request (lines) still gets a model that has
/// seen the whole ring: it is the only one that shows all of it; so does a
/// snapshot that asked for more history than a bounded rebuild found.
pub const MAX_CATCHUP: u64 = 512 << 10;

/// How much of the ring a pass may feed its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Requests: at most `MAX_CATCHUP` (history lines: the whole ring).
    Bounded,
    /// Requests that need a model that saw the whole ring.
    Whole,
    /// A background pass: at most this many bytes.
    Step(u64),
}

impl Job {
    /// Prepares a job: reuses `cached` when it is still contiguous with the
    /// ring and at most `MAX_CATCHUP` behind, else starts a blank model
    /// where the ring's newest `MAX_CATCHUP` bytes start (`step` bytes for
    /// a background pass, which then ends at the ring's end), sized as the
    /// terminal was then. For history lines the model must have seen the
    /// whole ring, however far behind (`Reach::Whole`: also for snapshots
    /// that came back short). `Reach::Step` bounds the output this pass
    /// feeds (a background pass; the model then stands short of the end).
    pub fn prepare(
        cached: Option<Box<ScreenModel>>,
        ring: &Ring,
        marks: &[ResizeMark],
        initial_size: (u16, u16),
        modes: String,
        wants: Vec<ScreenWant>,
        reach: Reach,
    ) -> Job {
        let step = match reach {
            Reach::Step(step) => Some(step),
            _ => None,
        };
        let whole =
            reach == Reach::Whole || wants.iter().any(|w| matches!(w, ScreenWant::Lines { .. }));
        let ring_start = ring.oldest_seq().saturating_sub(1);
        let (bound, window) = if whole {
            (u64::MAX, u64::MAX)
        } else {
            (MAX_CATCHUP, step.unwrap_or(MAX_CATCHUP).min(MAX_CATCHUP))
        };
        // A model that has not seen the output from its start (one
        // brought back from a snapshot, or a bounded rebuild) holds only
        // part of the history a resize may pull onto the screen (a taller
        // or rewrapped terminal shows rows from above). Where the ring
        // holds the whole output within `MAX_CATCHUP`, a size change is
        // applied to a model rebuilt from its start, in any pass, exactly
        // as a model kept all along would; past that, to the model as it
        // is (a bounded rebuild could show a screen drawn too long ago).
        let whole_output = ring_start == 0 && ring.bytes() as u64 <= MAX_CATCHUP;
        let resized_short = |m: &ScreenModel| {
            let (cols, rows) = m.size();
            whole_output
                && m.origin() > ring_start
                && marks
                    .iter()
                    .any(|k| k.id > m.resize_id() && (k.rows > rows || k.cols != cols))
        };
        let from_start = cached.as_deref().is_some_and(resized_short);
        let usable = |m: &ScreenModel| {
            lag(ring, m.seq()).is_some_and(|l| l <= bound) && (!whole || m.origin() <= ring_start)
        };
        let model = match cached {
            Some(model) if !from_start && usable(&model) => model,
            _ => {
                let start = if from_start {
                    ring_start
                } else {
                    rebuild_start(ring, window)
                };
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
        let mut frames: Vec<Frame> = Vec::new();
        let mut fed = 0u64;
        let mut through = ring.last_seq();
        for frame in ring.held_after(model.seq()) {
            if step.is_some_and(|s| fed >= s) {
                through = frame.seq - 1;
                break;
            }
            fed += frame.data.len() as u64;
            frames.push(frame.clone());
        }
        Job {
            partial: model.origin() > ring_start,
            model,
            frames,
            through,
            marks: marks.to_vec(),
            modes,
            wants,
            fed,
        }
    }

    pub fn run(self) -> Done {
        #[cfg(feature = "fault-injection")]
        if FAIL_SCREEN_JOBS
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            panic!("injected screen job failure (FAIL_SCREEN_JOBS)");
        }
        self.run_here()
    }

    /// `run` without the fault hook: a small job the session's actor makes
    /// itself (`attention::look_here`), which injected failures of screen
    /// passes are not meant for.
    pub fn run_here(mut self) -> Done {
        self.model.advance(&self.frames, &self.marks);
        // Past the frames held: seqs skipped after a crash.
        self.model.reach(self.through, &self.marks);
        let (cols, rows) = self.model.size();
        let seq = self.model.seq();
        let history = self.model.history_rows();
        let results = self
            .wants
            .iter()
            .map(|want| {
                let out = match *want {
                    ScreenWant::Snapshot { scrollback } if self.partial && scrollback > history => {
                        return None
                    }
                    ScreenWant::Snapshot { scrollback } => ScreenOut::Snapshot(Bytes::from(
                        self.model.snapshot(scrollback, &self.modes).into_bytes(),
                    )),
                    ScreenWant::Lines { max } => ScreenOut::Lines(self.model.lines(max)),
                    ScreenWant::Text => ScreenOut::Text(self.model.text()),
                    ScreenWant::Look => {
                        let (col, row, _) = self.model.cursor();
                        ScreenOut::Look(self.model.text(), (col, row))
                    }
                };
                Some(ScreenResult {
                    seq,
                    cols,
                    rows,
                    out,
                })
            })
            .collect();
        Done {
            model: self.model,
            results,
        }
    }
}

/// Output in the ring after `seq`, if the ring holds all of it.
pub fn lag(ring: &Ring, seq: u64) -> Option<u64> {
    if seq + 1 < ring.oldest_seq() {
        return None;
    }
    let from = ring.offset_after(seq).unwrap_or(ring.end_offset());
    Some(ring.end_offset().saturating_sub(from))
}

/// The seq a rebuilt model stands at: just before the oldest frame among
/// the newest `window` bytes (the newest frame alone if it is larger).
fn rebuild_start(ring: &Ring, window: u64) -> u64 {
    let end = ring.end_offset();
    let mut start = ring.last_seq();
    for (i, frame) in ring.iter().rev().enumerate() {
        if i > 0 && end - frame.start_offset() > window {
            break;
        }
        start = frame.seq - 1;
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring_of(frames: usize, each: usize) -> Ring {
        let mut ring = Ring::new(64 << 20, 1 << 20);
        for i in 0..frames {
            let line = format!("{i:0width$}\r\n", width = each - 2);
            ring.push(Bytes::from(line));
        }
        ring
    }

    fn prepare(
        cached: Option<Box<ScreenModel>>,
        ring: &Ring,
        wants: Vec<ScreenWant>,
        reach: Reach,
    ) -> Job {
        Job::prepare(cached, ring, &[], (80, 24), String::new(), wants, reach)
    }

    fn job(cached: Option<Box<ScreenModel>>, ring: &Ring, step: Option<u64>) -> Job {
        prepare(
            cached,
            ring,
            Vec::new(),
            step.map_or(Reach::Bounded, Reach::Step),
        )
    }

    /// Frames of 4 KiB in `MAX_CATCHUP`.
    const N: u64 = MAX_CATCHUP / 4096;

    #[test]
    fn a_rebuild_feeds_only_the_newest_bytes() {
        // 4 MiB in 4 KiB frames: a blank model starts N frames from the end.
        let ring = ring_of(1024, 4096);
        let j = job(None, &ring, None);
        let fed: u64 = j.frames.iter().map(|f| f.data.len() as u64).sum();
        assert_eq!(fed, MAX_CATCHUP);
        assert_eq!(j.model.seq(), 1024 - N);
        assert_eq!(j.through, 1024);
        let done = j.run();
        assert_eq!(done.model.seq(), 1024);
    }

    #[test]
    fn a_model_close_behind_catches_up_and_one_far_behind_is_rebuilt() {
        let ring = ring_of(1024, 4096);
        let near = Box::new(ScreenModel::new(80, 24, 1000, 0));
        let j = job(Some(near), &ring, None);
        assert_eq!((j.model.seq(), j.frames.len()), (1000, 24));
        let far = Box::new(ScreenModel::new(80, 24, 100, 0));
        let j = job(Some(far), &ring, None);
        assert_eq!(j.model.seq(), 1024 - N, "rebuilt, not caught up");
        let small = ring_of(10, 100);
        let j = job(None, &small, None);
        assert_eq!(
            (j.model.seq(), j.frames.len()),
            (0, 10),
            "all of a small ring"
        );
        let huge = {
            let mut r = Ring::new(64 << 20, 1 << 20);
            r.push(Bytes::from(vec![b'x'; 3 << 20]));
            r
        };
        let j = job(None, &huge, None);
        assert_eq!(
            (j.model.seq(), j.frames.len()),
            (0, 1),
            "one frame larger than the bound"
        );
    }

    #[test]
    fn history_lines_come_from_a_model_that_saw_the_whole_ring() {
        let ring = ring_of(1024, 4096);
        let lines = vec![ScreenWant::Lines { max: 10_000 }];
        let j = prepare(None, &ring, lines.clone(), Reach::Bounded);
        assert_eq!((j.model.seq(), j.frames.len()), (0, 1024));
        // A model rebuilt from the newest bytes is rebuilt again for lines,
        // one that started at the ring's start is reused however far behind.
        let partial = Box::new(ScreenModel::new(80, 24, 1000, 0));
        let j = prepare(Some(partial), &ring, lines.clone(), Reach::Bounded);
        assert_eq!(j.model.seq(), 0);
        let full = Box::new(ScreenModel::new(80, 24, 0, 0));
        let j = prepare(Some(full), &ring, lines, Reach::Bounded);
        assert_eq!((j.model.origin(), j.frames.len()), (0, 1024));
    }

    #[test]
    fn a_snapshot_short_of_history_after_a_bounded_rebuild_is_asked_again() {
        // 4 MiB of lines: the newest 512 KiB hold about 6,500 of them.
        let mut ring = Ring::new(64 << 20, 1 << 20);
        for i in 0..52_000 {
            ring.push(Bytes::from(format!("line {i:075}\r\n")));
        }
        let wants = vec![
            ScreenWant::Snapshot { scrollback: 100 },
            ScreenWant::Snapshot { scrollback: 9_000 },
        ];
        let pass = |reach| prepare(None, &ring, wants.clone(), reach);
        let done = pass(Reach::Bounded).run();
        assert!(done.results[0].is_some());
        assert!(done.results[1].is_none(), "short: asked again with whole");
        let done = pass(Reach::Whole).run();
        assert!(done.results.iter().all(Option::is_some));
    }

    #[test]
    fn a_model_from_a_snapshot_is_resized_as_one_kept_all_along() {
        // 60 lines at 40x10: 50 of them in history.
        let mut ring = Ring::new(64 << 20, 1 << 20);
        for i in 0..60 {
            ring.push(Bytes::from(format!("line {i}\r\n")));
        }
        let kept = kept_again(&ring);
        // Brought back from a snapshot with no history (`screen`).
        let snap = kept.snapshot(0, "");
        let seeded = || Box::new(ScreenModel::from_snapshot(40, 10, 60, 0, snap.as_bytes()));
        let taller = [ResizeMark {
            id: 1,
            after_seq: 60,
            cols: 40,
            rows: 30,
        }];
        let text = |cached: Box<ScreenModel>, marks: &[ResizeMark]| {
            let j = Job::prepare(
                Some(cached),
                &ring,
                marks,
                (40, 10),
                String::new(),
                vec![ScreenWant::Text],
                Reach::Bounded,
            );
            match j.run().results.remove(0).unwrap().out {
                ScreenOut::Text(t) => t,
                _ => unreachable!(),
            }
        };
        let want = text(kept, &taller);
        assert!(want.first().is_some_and(|l| l == "line 31"), "{want:?}");
        assert_eq!(
            text(seeded(), &taller),
            want,
            "the rows a taller screen pulls"
        );
        // Narrower: rewrapped; a background step rebuilds from the start.
        let narrower = [ResizeMark {
            id: 1,
            after_seq: 60,
            cols: 4,
            rows: 10,
        }];
        assert_eq!(
            text(seeded(), &narrower),
            text(kept_again(&ring), &narrower)
        );
        let step = Job::prepare(
            Some(seeded()),
            &ring,
            &taller,
            (40, 10),
            String::new(),
            vec![],
            Reach::Step(64 << 10),
        );
        assert_eq!(step.model.origin(), 0, "a background pass rebuilds too");
        // Without a resize the seeded model is used as it is.
        let j = Job::prepare(
            Some(seeded()),
            &ring,
            &[],
            (40, 10),
            String::new(),
            vec![],
            Reach::Bounded,
        );
        assert_eq!((j.model.origin(), j.frames.len()), (60, 0));
    }

    fn kept_again(ring: &Ring) -> Box<ScreenModel> {
        let mut kept = Box::new(ScreenModel::new(40, 10, 0, 0));
        kept.advance(ring.iter(), &[]);
        kept
    }

    #[test]
    fn past_max_catchup_a_resized_model_is_kept_as_it_is() {
        // A ring that does not fit one pass: a rebuild would start from
        // its newest bytes, so the model brought back is resized as it is.
        let ring = ring_of(1024, 4096);
        let seeded = Box::new(ScreenModel::new(80, 24, 1024, 0));
        let taller = [ResizeMark {
            id: 1,
            after_seq: 1024,
            cols: 80,
            rows: 50,
        }];
        let j = Job::prepare(
            Some(seeded),
            &ring,
            &taller,
            (80, 24),
            String::new(),
            vec![],
            Reach::Bounded,
        );
        assert_eq!(j.model.origin(), 1024);
    }

    #[test]
    fn a_background_rebuild_starts_a_step_from_the_end() {
        let ring = ring_of(1024, 4096);
        let j = job(None, &ring, Some(64 << 10));
        assert_eq!((j.model.seq(), j.frames.len(), j.through), (1008, 16, 1024));
    }

    #[test]
    fn a_background_step_stops_short_of_the_end() {
        let ring = ring_of(1024, 4096);
        let near = Box::new(ScreenModel::new(80, 24, 900, 0));
        let j = job(Some(near), &ring, Some(64 << 10));
        assert_eq!(j.frames.len(), 16);
        assert_eq!(j.through, 916);
        assert_eq!(j.run().model.seq(), 916);
    }
}
