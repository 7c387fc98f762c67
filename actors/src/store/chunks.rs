//! How the store actor applies a batch: in chunks, each atomic, in order,
//! so that a crash keeps a prefix of the batch as it keeps a prefix of
//! batches, and so that a batch of typing never holds a core for long.
//!
//! sled takes 10-20 us of CPU per small frame, so 100 ms of a fast
//! typist's echoes is a few milliseconds of work, and a thread woken
//! meanwhile on that core (the terminal's kernel worker, the program, a
//! client, the node's own) waited for the scheduler to take the core from
//! the store's thread: echo p99 through a mirror over 1 ms, seen with
//! `perf sched`. So a batch of typing (some output, less than
//! `PAUSE_BELOW`) is applied `TYPING_CHUNK` writes at a time, and the
//! thread sleeps `PAUSE` after every `RUN_FOR` of work. A flood's batches,
//! and batches without output (a restart's records), run unpaused in
//! larger chunks, at the store's full rate.

use std::time::{Duration, Instant};

use super::{Store, StoreError, Stored, Write};

/// Writes in a chunk of a typing batch.
const TYPING_CHUNK: usize = 8;
/// Writes in a chunk of any other batch (one transaction each when they
/// are not all output).
const CHUNK: usize = 1024;
/// A chunk ends once it holds this much output.
const CHUNK_BYTES: usize = 256 << 10;
/// A batch with less output than this (and some) is typing.
const PAUSE_BELOW: u64 = 1 << 20;
/// Work between two pauses of a typing batch.
const RUN_FOR: Duration = Duration::from_micros(100);
/// One pause: the thread sleeps about twice this (Linux's default timer
/// slack is 50 us), so a typing batch takes the store's thread about a
/// half of the time it runs, and a woken thread on its core waits at most
/// about `RUN_FOR` plus one small chunk.
const PAUSE: Duration = Duration::from_micros(50);

/// What applying a batch did.
#[derive(Debug)]
pub(super) struct Applied {
    /// Output bytes of the writes applied (all of them when `result` is
    /// `Ok`).
    pub output_bytes: u64,
    /// A session record was among the writes applied.
    pub record: bool,
    pub result: Result<(), StoreError>,
}

/// Applies `writes` to `store` chunk by chunk, telling `told` of every
/// stored event; stops at the first chunk that fails (the chunks before
/// it stay applied).
pub(super) fn apply(
    store: &mut Store,
    writes: Vec<Write>,
    mut told: impl FnMut(Stored),
) -> Applied {
    let mut applied = Applied {
        output_bytes: 0,
        record: false,
        result: Ok(()),
    };
    for chunk in Chunks::new(writes) {
        let bytes: usize = chunk.iter().map(Write::output_len).sum();
        let record = chunk.iter().any(|w| matches!(w, Write::Record { .. }));
        match store.apply(chunk) {
            Ok(stored) => {
                stored.into_iter().for_each(&mut told);
                applied.output_bytes += bytes as u64;
                applied.record |= record;
            }
            Err(e) => {
                applied.result = Err(e);
                break;
            }
        }
    }
    applied
}

/// A batch's writes in chunks, with a pause between chunks of a typing
/// batch once the store has worked `RUN_FOR` without one.
struct Chunks {
    writes: std::vec::IntoIter<Write>,
    typing: bool,
    since_pause: Instant,
}

impl Chunks {
    fn new(writes: Vec<Write>) -> Self {
        let output: u64 = writes.iter().map(|w| w.output_len() as u64).sum();
        let any_output = writes.iter().any(|w| matches!(w, Write::Output { .. }));
        Chunks {
            writes: writes.into_iter(),
            typing: any_output && output < PAUSE_BELOW,
            since_pause: Instant::now(),
        }
    }
}

impl Iterator for Chunks {
    type Item = Vec<Write>;

    fn next(&mut self) -> Option<Vec<Write>> {
        let first = self.writes.next()?;
        if self.typing && self.since_pause.elapsed() >= RUN_FOR {
            std::thread::sleep(PAUSE);
            self.since_pause = Instant::now();
        }
        let most = if self.typing { TYPING_CHUNK } else { CHUNK };
        let mut bytes = first.output_len();
        let mut chunk = vec![first];
        while chunk.len() < most && bytes < CHUNK_BYTES {
            let Some(next) = self.writes.next() else {
                break;
            };
            bytes += next.output_len();
            chunk.push(next);
        }
        Some(chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn output(session: &str, seq: u64, len: usize) -> Write {
        Write::Output {
            session: session.into(),
            seq,
            at_ms: 7,
            data: Bytes::from(vec![b'x'; len]),
        }
    }

    fn event(session: &str) -> Write {
        Write::Event {
            session: session.into(),
            at_ms: 7,
            data: Bytes::from_static(br#"{"kind":"resized"}"#),
        }
    }

    #[test]
    fn a_typing_batch_is_applied_in_small_chunks_in_order() {
        let writes: Vec<Write> = (0..100).map(|seq| output("s", seq, 5)).collect();
        let chunks: Vec<Vec<Write>> = Chunks::new(writes.clone()).collect();
        let sizes: Vec<usize> = chunks.iter().map(Vec::len).collect();
        assert_eq!(sizes, [8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 4]);
        assert_eq!(chunks.concat(), writes, "every write, in order");
    }

    #[test]
    fn a_flood_or_a_batch_without_output_goes_in_large_chunks_unpaused() {
        // A flood: chunks end at CHUNK_BYTES.
        let frames: Vec<Write> = (0..40).map(|seq| output("s", seq, 100 << 10)).collect();
        let chunks = Chunks::new(frames);
        assert!(!chunks.typing);
        let sizes: Vec<usize> = chunks.map(|c| c.len()).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 40);
        assert!(sizes.iter().all(|n| *n == 3 || *n == 1), "{sizes:?}");
        // A restart's records and events: no output, no pauses, one chunk.
        let events: Vec<Write> = (0..500).map(|_| event("s")).collect();
        let chunks = Chunks::new(events);
        assert!(!chunks.typing);
        assert_eq!(chunks.count(), 1);
    }

    #[test]
    fn a_mixed_batch_is_stored_through_both_paths() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        // Output alone in the first chunks (one tree), then chunks with
        // events and a seq mark (the transaction).
        let mut writes: Vec<Write> = (1..=20).map(|seq| output("s", seq, 3)).collect();
        writes.push(event("s"));
        writes.push(Write::SeqMark {
            session: "s".into(),
            seq: 20,
        });
        writes.extend((21..=30).map(|seq| output("s", seq, 3)));
        let mut told = Vec::new();
        let applied = apply(&mut store, writes, |s| told.push(s));
        assert!(applied.result.is_ok());
        assert_eq!(applied.output_bytes, 90);
        let seqs: Vec<u64> = store
            .output_after("s", 0, usize::MAX)
            .unwrap()
            .iter()
            .map(|e| e.n)
            .collect();
        assert_eq!(seqs, (1..=30).collect::<Vec<_>>());
        assert_eq!(told.len(), 1, "the event was told");
        assert_eq!(store.events_after("s", 0, 10).unwrap().len(), 1);
        assert_eq!(store.seq_mark("s").unwrap(), 20);
    }

    #[test]
    fn a_failed_chunk_keeps_the_chunks_before_it_and_counts_what_was_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        // 16 frames (two chunks), then one whose id cannot be a key.
        let mut writes: Vec<Write> = (1..=16).map(|seq| output("s", seq, 4)).collect();
        writes.push(output("", 1, 4));
        writes.extend((17..=20).map(|seq| output("s", seq, 4)));
        let applied = apply(&mut store, writes, |_| {});
        assert!(matches!(applied.result, Err(StoreError::BadId(_))));
        assert_eq!(applied.output_bytes, 64, "two chunks of 8 frames stored");
        let stored = store.output_after("s", 0, usize::MAX).unwrap();
        assert_eq!(stored.len(), 16, "the prefix before the failed chunk");
    }
}
