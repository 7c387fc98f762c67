//! How the store actor applies a batch: in chunks of at most `CHUNK`
//! writes, each one transaction, in order, so that a crash keeps a prefix
//! of the batch as it keeps a prefix of batches, and no transaction grows
//! with a burst (a restart's records, a thousand creates at once).

use super::{Store, StoreError, Stored, Write};

/// Writes in a chunk.
const CHUNK: usize = 1024;

/// What applying a batch did.
#[derive(Debug)]
pub(super) struct Applied {
    /// A session record was among the writes applied.
    pub record: bool,
    pub result: Result<(), StoreError>,
}

/// Applies `writes` to `store` chunk by chunk, telling `told` of every
/// stored event; stops at the first chunk that fails (the chunks before
/// it stay applied).
pub(super) fn apply(
    store: &mut Store,
    mut writes: Vec<Write>,
    mut told: impl FnMut(Stored),
) -> Applied {
    let mut applied = Applied {
        record: false,
        result: Ok(()),
    };
    while !writes.is_empty() {
        let rest = writes.split_off(writes.len().min(CHUNK));
        let chunk = std::mem::replace(&mut writes, rest);
        let record = chunk.iter().any(|w| matches!(w, Write::Record { .. }));
        match store.apply(chunk) {
            Ok(stored) => {
                stored.into_iter().for_each(&mut told);
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

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn event(session: &str) -> Write {
        Write::Event {
            session: session.into(),
            at_ms: 7,
            data: Bytes::from_static(br#"{"kind":"resized"}"#),
        }
    }

    #[test]
    fn a_batch_is_stored_in_order_across_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let mut writes: Vec<Write> = (0..CHUNK + 20).map(|_| event("s")).collect();
        writes.push(Write::SeqMark {
            session: "s".into(),
            seq: 20,
        });
        let mut told = Vec::new();
        let applied = apply(&mut store, writes, |s| told.push(s.entry.n));
        assert!(applied.result.is_ok());
        assert_eq!(told, (1..=(CHUNK as u64 + 20)).collect::<Vec<_>>());
        assert_eq!(store.events_after("s", 0, 5000).unwrap().len(), CHUNK + 20);
        assert_eq!(store.seq_mark("s").unwrap(), 20);
    }

    #[test]
    fn a_failed_chunk_keeps_the_chunks_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        // A chunk of events, then one whose id cannot be a key.
        let mut writes: Vec<Write> = (0..CHUNK).map(|_| event("s")).collect();
        writes.push(event(""));
        writes.extend((0..4).map(|_| event("s")));
        let applied = apply(&mut store, writes, |_| {});
        assert!(matches!(applied.result, Err(StoreError::BadId(_))));
        let stored = store.events_after("s", 0, 5000).unwrap();
        assert_eq!(stored.len(), CHUNK, "the chunk before the failed one");
    }
}
