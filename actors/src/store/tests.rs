//! The store against a simple in-memory model: random events, records,
//! removes, purges, vacuums and reopens on a real sled directory (output
//! has its own model test, in `log`).

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

#[derive(Debug, Default, Clone)]
struct Session {
    record: Option<Vec<u8>>,
    removed: bool,
    /// Removed while this store was open: its later writes are dropped.
    gone: bool,
    events: BTreeMap<u64, (u64, Vec<u8>)>,
    last_event: u64,
}

#[derive(Debug, Clone)]
enum Op {
    Event { s: usize, len: usize },
    Record { s: usize },
    Remove { s: usize },
    Purge { s: usize },
    Vacuum,
    Reopen,
    Clock(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..3, 1usize..50).prop_map(|(s, len)| Op::Event { s, len }),
        2 => (0usize..3).prop_map(|s| Op::Record { s }),
        1 => (0usize..3).prop_map(|s| Op::Remove { s }),
        1 => (0usize..3).prop_map(|s| Op::Purge { s }),
        1 => Just(Op::Vacuum),
        1 => Just(Op::Reopen),
        2 => (1u64..5_000).prop_map(Op::Clock),
    ]
}

const KEEP: Retention = Retention {
    output_bytes: 2_000,
    event_age_ms: 10_000,
    events: 8,
};

fn id(s: usize) -> String {
    format!("session{s}")
}

/// The model's vacuum: removed sessions go whole; the rest are trimmed
/// (the vacuum goes by records: output of a session without one stays).
fn vacuum(model: &mut BTreeMap<String, Session>, now: u64) {
    model.retain(|_, s| !s.removed);
    for s in model.values_mut().filter(|s| s.record.is_some()) {
        let newest: Vec<u64> = s.events.keys().rev().take(KEEP.events).copied().collect();
        s.events.retain(|n, (at, _)| {
            newest.contains(n) && now.saturating_sub(*at) <= KEEP.event_age_ms
        });
    }
}

fn check(store: &Store, model: &BTreeMap<String, Session>) -> Result<(), TestCaseError> {
    let records: BTreeMap<String, (Bytes, bool)> = store
        .records()
        .unwrap()
        .into_iter()
        .map(|(id, r, removed)| (id, (r, removed)))
        .collect();
    for (name, s) in model {
        if let Some(r) = &s.record {
            let (got, removed) = records.get(name).expect("a stored record");
            prop_assert_eq!(&got[..], &r[..]);
            prop_assert_eq!(*removed, s.removed);
        }
        let ev = store.events_after(name, 0, usize::MAX).unwrap();
        let want: Vec<(u64, u64, Vec<u8>)> = s
            .events
            .iter()
            .map(|(n, (at, d))| (*n, *at, d.clone()))
            .collect();
        let got: Vec<(u64, u64, Vec<u8>)> =
            ev.iter().map(|e| (e.n, e.at_ms, e.data.to_vec())).collect();
        prop_assert_eq!(got, want);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn the_store_agrees_with_a_model(ops in proptest::collection::vec(op(), 1..120)) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let mut model: BTreeMap<String, Session> = BTreeMap::new();
        let mut now = 1_000u64;
        let mut fill = 0u8;
        for op in ops {
            fill = fill.wrapping_add(1);
            match op {
                Op::Event { s, len } => {
                    let m = model.entry(id(s)).or_default();
                    let data = vec![fill; len];
                    let stored = store.apply(vec![Write::Event { session: id(s).into(), at_ms: now, data: Bytes::from(data.clone()) }]).unwrap();
                    if m.gone {
                        prop_assert!(stored.is_empty(), "an event after the remove is dropped");
                        continue;
                    }
                    m.last_event += 1;
                    prop_assert_eq!(stored.len(), 1);
                    prop_assert_eq!(stored[0].entry.n, m.last_event);
                    m.events.insert(m.last_event, (now, data));
                }
                Op::Record { s } => {
                    let data = vec![fill; 10];
                    store.apply(vec![Write::Record { session: id(s).into(), data: Bytes::from(data.clone()) }]).unwrap();
                    let m = model.entry(id(s)).or_default();
                    if !m.gone {
                        m.record = Some(data);
                    }
                }
                Op::Remove { s } => {
                    if let Some(m) = model.get_mut(&id(s)).filter(|m| m.record.is_some()) {
                        store.remove(&id(s), now).unwrap();
                        m.removed = true;
                        m.gone = true;
                    }
                }
                Op::Purge { s } => {
                    store.purge(&id(s)).unwrap();
                    if let Some(m) = model.get_mut(&id(s)) {
                        m.events.clear();
                    }
                }
                Op::Vacuum => {
                    store.vacuum(now, KEEP).unwrap();
                    vacuum(&mut model, now);
                }
                Op::Reopen => {
                    store.flush().unwrap();
                    drop(store);
                    store = reopen(dir.path());
                    for m in model.values_mut() {
                        m.gone = false;
                    }
                }
                Op::Clock(ms) => now += ms,
            }
            check(&store, &model)?;
        }
    }
}

/// Opens a store just dropped: sled's flusher thread may hold the file
/// lock for a moment after the drop, so `Locked` is retried (bounded).
fn open_released(path: &std::path::Path) -> Result<Store, StoreError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match Store::open(path) {
            Err(StoreError::Locked { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

fn reopen(path: &std::path::Path) -> Store {
    open_released(path).unwrap()
}

#[test]
fn a_second_open_of_the_same_dir_is_refused_as_locked() {
    let dir = tempfile::tempdir().unwrap();
    let _first = Store::open(dir.path()).unwrap();
    match Store::open(dir.path()) {
        Err(StoreError::Locked { path }) => {
            assert!(path.contains(&dir.path().display().to_string()))
        }
        Err(other) => panic!("expected Locked, got {other}"),
        Ok(_) => panic!("a second open succeeded"),
    }
}

#[test]
fn a_damaged_store_is_refused_not_opened_short() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let mut store = Store::open(&path).unwrap();
    for s in 0..3 {
        store
            .apply(vec![Write::Record {
                session: id(s).into(),
                data: Bytes::from_static(b"record"),
            }])
            .unwrap();
    }
    store.flush().unwrap();
    store.write_manifest().unwrap();
    drop(store);
    // Reopens as it was.
    assert_eq!(reopen(&path).records().unwrap().len(), 3);
    // The head of sled's log overwritten: sled alone may open it empty.
    {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(path.join("db"))
            .unwrap();
        f.write_all(&[b'X'; 64]).unwrap();
    }
    match open_released(&path) {
        Err(StoreError::Damaged {
            expected, found, ..
        }) => assert_eq!((expected, found), (3, 0)),
        Err(StoreError::Open { cause, .. }) => println!("sled refused it itself: {cause}"),
        Err(other) => panic!("{other}"),
        Ok(s) => panic!(
            "a damaged store opened with {} records",
            s.records().unwrap().len()
        ),
    }
}

#[test]
fn a_store_that_reads_back_fewer_records_than_written_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let mut store = Store::open(&path).unwrap();
    store
        .apply(vec![Write::Record {
            session: id(0).into(),
            data: Bytes::from_static(b"record"),
        }])
        .unwrap();
    store.flush().unwrap();
    drop(store);
    // As if two more had been flushed and sled had lost them since.
    manifest::write(&manifest::path_for(&path), 3).unwrap();
    match open_released(&path) {
        Err(e @ StoreError::Damaged { .. }) => {
            let text = e.to_string();
            assert!(text.contains("3 session records") && text.contains("1 can be read"));
            assert!(text.contains(&path.display().to_string()), "{text}");
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("opened"),
    }
}

/// Durability asked for by many at once costs one flush, not one each:
/// creates and seq reservations asked for together share fsyncs.
#[test]
fn flushes_asked_for_together_are_committed_together() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = Arc::new(crate::metrics::Metrics::default());
    actix_rt::System::new().block_on(async {
        let (handle, _) =
            StoreHandle::open(&dir.path().join("store"), 1 << 20, 1 << 30, metrics.clone())
                .unwrap();
        let before = metrics
            .store_flushes
            .load(std::sync::atomic::Ordering::Relaxed);
        let session: Arc<str> = "s1".into();
        let mut asked = Vec::new();
        for i in 0..16u64 {
            asked.push(Box::pin(handle.reserve(&session, 4096 * (i + 1)))
                as std::pin::Pin<
                    Box<dyn std::future::Future<Output = Result<(), String>>>,
                >);
            asked.push(Box::pin(async { handle.flush().await }));
        }
        for done in futures_util::future::join_all(asked).await {
            done.unwrap();
        }
        let flushes = metrics
            .store_flushes
            .load(std::sync::atomic::Ordering::Relaxed)
            - before;
        assert!(flushes < 32, "32 requests took {flushes} flushes");
        drop(handle);
        actix_rt::System::current().stop();
    });
    assert_eq!(
        reopen(&dir.path().join("store")).seq_mark("s1").unwrap(),
        4096 * 16,
        "the highest reservation is the mark"
    );
}
