//! The output log against a model: random appends over a few sessions
//! with small segments, reopens (clean, and after a tail torn at a random
//! byte), trims, seals and purges, on real files; every read (forwards,
//! backwards, by page) must answer what the model holds.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const SEGMENT: u64 = 4 << 10;

#[derive(Debug, Clone)]
enum Op {
    Append {
        s: usize,
        len: usize,
    },
    Reopen,
    /// Cut the newest segment of a session `cut` bytes short (a crash in
    /// the middle of a write): the last frames are lost, as the model says.
    Tear {
        s: usize,
        cut: u64,
    },
    Trim,
    Seal {
        s: usize,
    },
    Purge {
        s: usize,
    },
    Sync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0usize..3, prop::sample::select(vec![1usize, 30, 200, 700, 3000, 9000]))
            .prop_map(|(s, len)| Op::Append { s, len }),
        1 => Just(Op::Reopen),
        1 => (0usize..3, 1u64..400).prop_map(|(s, cut)| Op::Tear { s, cut }),
        1 => Just(Op::Trim),
        1 => (0usize..3).prop_map(|s| Op::Seal { s }),
        1 => (0usize..3).prop_map(|s| Op::Purge { s }),
        1 => Just(Op::Sync),
    ]
}

fn id(s: usize) -> String {
    // One plain id, one that needs its folder name encoded.
    match s {
        0 => "plain-0".into(),
        1 => "../odd id".into(),
        _ => format!("s{s}"),
    }
}

type Model = BTreeMap<String, BTreeMap<u64, Vec<u8>>>;

fn check(log: &OutputLog, model: &Model) {
    for s in 0..3 {
        let id = id(s);
        let want: Vec<(u64, Vec<u8>)> = model
            .get(&id)
            .map(|m| m.iter().map(|(k, v)| (*k, v.clone())).collect())
            .unwrap_or_default();
        let got: Vec<(u64, Vec<u8>)> = log
            .after(&id, 0, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|f| (f.seq, f.data.to_vec()))
            .collect();
        assert_eq!(got, want, "{id}: all of it");
        assert_eq!(log.last_seq(&id), want.last().map_or(0, |w| w.0), "{id}");
        // Backwards in pages of ~5 KiB: the same frames, each once.
        let mut pages = Vec::new();
        let mut before = u64::MAX;
        for _ in 0..10_000 {
            let page = log.before(&id, before, 5_000).unwrap();
            if let Some(first) = page.frames.first() {
                before = first.seq;
            }
            let more = page.more;
            pages.splice(
                0..0,
                page.frames.into_iter().map(|f| (f.seq, f.data.to_vec())),
            );
            if !more {
                break;
            }
        }
        assert_eq!(pages, want, "{id}: paged backwards");
        // From the middle, forwards, in small reads.
        if let Some((mid, _)) = want.get(want.len() / 2) {
            let got = log.after(&id, *mid, 1).unwrap();
            let next = want.iter().find(|(s, _)| s > mid).map(|w| w.0);
            assert_eq!(got.first().map(|f| f.seq), next, "{id}: after {mid}");
            assert_eq!(got.len(), usize::from(next.is_some()));
        }
    }
}

/// What the log keeps of a session after a trim to `keep`: whole segments
/// go from the oldest while what stays is at least `keep` bytes. The
/// model follows by asking the log which seq is now the oldest.
fn follow_trim(log: &OutputLog, model: &mut Model) {
    for (id, frames) in model.iter_mut() {
        let oldest = log.after(id, 0, 1).unwrap().first().map(|f| f.seq);
        match oldest {
            Some(o) => frames.retain(|s, _| *s >= o),
            None => frames.clear(),
        }
    }
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("output");
    let keep = 3 * SEGMENT;
    // Trimmed segments are deleted on the log's own thread, as in the
    // node (a reopen reads what its drop left on disk).
    let open = || {
        let (log, _) = OutputLog::open(&path, SEGMENT, keep, Arc::default()).unwrap();
        OutputLog::start_trimming(&log).unwrap();
        log
    };
    let mut log = open();
    let mut model = Model::new();
    let mut next = [1u64; 3];
    for op in ops {
        match op {
            Op::Append { s, len } => {
                let seq = next[s];
                next[s] += 1 + (seq % 7 == 0) as u64; // a gap now and then
                let data: Vec<u8> = (0..len).map(|i| (seq as usize + i) as u8).collect();
                log.append(&id(s), seq, seq * 10, &data).unwrap();
                model.entry(id(s)).or_default().insert(seq, data);
                // A new segment may have let the oldest go.
                follow_trim(&log, &mut model);
                let kept: u64 = log.bytes(&id(s));
                assert!(kept <= keep + 2 * SEGMENT + 9100, "{kept}");
            }
            Op::Reopen => {
                drop(log);
                log = open();
            }
            Op::Tear { s, cut } => {
                let id = id(s);
                let Some(view) = log.view(&id) else { continue };
                drop(view);
                drop(log);
                let folder = path.join(format::folder_name(&id));
                let mut segs: Vec<_> = std::fs::read_dir(&folder)
                    .unwrap()
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "log"))
                    .collect();
                segs.sort();
                let newest = segs.last().unwrap();
                let len = std::fs::metadata(newest).unwrap().len();
                let keep_len = len.saturating_sub(cut).max(format::HEADER);
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(newest)
                    .unwrap();
                f.set_len(keep_len).unwrap();
                drop(f);
                // Its index, if any, now describes more than there is.
                log = open();
                // The model loses what no longer reads whole: whatever
                // the log's newest segment lost.
                let first =
                    format::parse_segment_name(&newest.file_name().unwrap().to_string_lossy())
                        .unwrap();
                let left: Vec<u64> = log
                    .after(&id, first.saturating_sub(1), usize::MAX)
                    .unwrap()
                    .iter()
                    .map(|f| f.seq)
                    .collect();
                let frames = model.entry(id).or_default();
                frames.retain(|seq, _| *seq < first || left.contains(seq));
                // Seqs never go back: the writer continues above.
            }
            Op::Trim => {
                log.trim_all(keep);
                follow_trim(&log, &mut model);
            }
            Op::Seal { s } => log.seal(&id(s)),
            Op::Purge { s } => {
                log.purge(&id(s)).unwrap();
                model.remove(&id(s));
                assert!(!path.join(format::folder_name(&id(s))).exists());
            }
            Op::Sync => {
                log.sync().unwrap();
            }
        }
        check(&log, &model);
    }
    // What the log counts on disk is what its files take.
    let counted = log.metrics.log_bytes.load(Ordering::Relaxed);
    let mut on_disk = 0;
    for s in 0..3 {
        on_disk += log.bytes(&id(s));
    }
    assert_eq!(counted, on_disk);
    // And every segment trimmed is deleted once the log settles.
    drop(log);
    let mut files = 0;
    for s in 0..3 {
        let Ok(entries) = std::fs::read_dir(path.join(format::folder_name(&id(s)))) else {
            continue;
        };
        for e in entries.flatten() {
            if e.path().extension().is_some_and(|x| x == "log") {
                files += e.metadata().unwrap().len();
            }
        }
    }
    assert_eq!(
        files, on_disk,
        "segment files on disk against the log's count"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn the_log_reads_back_what_the_model_holds(ops in prop::collection::vec(op(), 1..160)) {
        run(ops);
    }
}

#[test]
fn a_clean_reopen_continues_the_same_segment_and_reads_its_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("output");
    let (log, rec) = OutputLog::open(&path, SEGMENT_BYTES, u64::MAX, Arc::default()).unwrap();
    assert!(!rec.whole, "no LOGGED mark yet");
    for seq in 1..=100 {
        log.append("a", seq, seq, &[b'x'; 1000]).unwrap();
    }
    log.declare_whole().unwrap();
    log.checkpoint().unwrap();
    drop(log);
    let (log, rec) = OutputLog::open(&path, SEGMENT_BYTES, u64::MAX, Arc::default()).unwrap();
    assert!(rec.whole, "same boot, no failed write");
    assert_eq!(rec.repaired, 0);
    log.append("a", 101, 101, b"after").unwrap();
    let segs = std::fs::read_dir(path.join("a"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .count();
    assert_eq!(segs, 1, "appends continue in the segment");
    assert_eq!(log.after("a", 99, usize::MAX).unwrap().len(), 2);
    // Files are the node user's alone.
    use std::os::unix::fs::PermissionsExt;
    for p in [
        path.clone(),
        path.join("a"),
        path.join("a").join(format::segment_name(1)),
    ] {
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o077;
        assert_eq!(mode, 0, "{}", p.display());
    }
}

#[test]
fn a_failed_write_is_counted_and_withdraws_the_logged_mark() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("output");
    let (log, _) = OutputLog::open(&path, SEGMENT, u64::MAX, Arc::default()).unwrap();
    log.declare_whole().unwrap();
    log.append("a", 1, 1, b"one").unwrap();
    log.seal("a");
    // The session's folder cannot take a new segment: a write fails.
    std::fs::remove_dir_all(path.join("a")).unwrap();
    std::fs::write(path.join("a"), b"not a folder").unwrap();
    assert!(log.append("a", 2, 2, b"two").is_err());
    assert_eq!(log.metrics.store_lost_bytes.load(Ordering::Relaxed), 3);
    assert!(log.metrics.store_failure().is_some());
    assert!(!path.join(MARKER).exists());
    drop(log);
    let (_, rec) = OutputLog::open(&path, SEGMENT, u64::MAX, Arc::default()).unwrap();
    assert!(!rec.whole, "a restart must go above the high-water mark");
}

#[test]
fn over_the_budget_ended_sessions_lose_their_oldest_output_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("output");
    let (log, _) = OutputLog::open(&path, SEGMENT, u64::MAX, Arc::default()).unwrap();
    let frame = [b'x'; 1000];
    // An ended session written first (oldest), a running one after it.
    for seq in 1..=40 {
        log.append("ended", seq, seq, &frame).unwrap();
    }
    for seq in 1..=40 {
        log.append("running", seq, 100 + seq, &frame).unwrap();
    }
    let total = log.bytes_on_disk();
    let ended: std::collections::HashSet<String> = ["ended".to_string()].into();
    // A budget the ended session's output alone can meet.
    let shed = log.shed(total - 20_000, &ended);
    assert!(shed.ended >= 20_000 && shed.running == 0, "{shed:?}");
    assert_eq!(
        log.after("running", 0, 1).unwrap()[0].seq,
        1,
        "running untouched"
    );
    assert!(
        log.after("ended", 0, 1).unwrap()[0].seq > 1,
        "its oldest went"
    );
    // A budget below what the running session's current segment holds:
    // the ended one goes whole, the running one keeps its newest segment.
    let shed = log.shed(1, &ended);
    assert!(shed.running > 0, "{shed:?}");
    assert!(log.after("ended", 0, usize::MAX).unwrap().is_empty());
    let kept = log.after("running", 0, usize::MAX).unwrap();
    assert_eq!(kept.last().unwrap().seq, 40, "the newest output stays");
    assert_eq!(
        log.bytes_on_disk(),
        log.bytes("running") + log.bytes("ended")
    );
    assert!(log.bytes_on_disk() <= SEGMENT + 1024);
    assert_eq!(
        log.metrics.log_dropped_bytes.load(Ordering::Relaxed),
        total - log.bytes_on_disk()
    );
}

#[test]
fn a_trim_leaves_the_appending_thread_before_its_files_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("output");
    let (log, _) = OutputLog::open(&path, SEGMENT, 2 * SEGMENT, Arc::default()).unwrap();
    OutputLog::start_trimming(&log).unwrap();
    // Hold the trim thread: it waits to hand over this answer.
    let (held, release) = mpsc::sync_channel(0);
    log.trimmer.get().unwrap().send(Trim::Settle(held)).unwrap();
    let first = path.join("a").join(format::segment_name(1));
    let oldest = |log: &OutputLog| log.after("a", 0, 1).unwrap()[0].seq;
    for seq in 1..=100 {
        log.append("a", seq, seq, &[b'x'; 1500]).unwrap();
        if oldest(&log) != 1 {
            break;
        }
    }
    // The log no longer has the first segment, its file is still there:
    // the append did not delete it.
    assert_ne!(oldest(&log), 1, "the oldest segment never went");
    assert!(first.exists(), "deleted on the appending thread");
    // With the thread still held, a queue's worth of trims waits; past
    // it the appending thread deletes its own.
    let next = oldest(&log) + 100;
    for seq in next..next + 200 {
        log.append("a", seq, seq, &[b'x'; 1500]).unwrap();
    }
    let left_behind = || {
        let oldest = oldest(&log);
        std::fs::read_dir(path.join("a"))
            .unwrap()
            .flatten()
            .filter_map(|e| format::parse_segment_name(&e.file_name().to_string_lossy()))
            .filter(|first| *first < oldest)
            .count()
    };
    // The held answer may or may not have left the queue yet.
    let waiting = left_behind();
    assert!(
        (upkeep::QUEUED_TRIMS - 1..=upkeep::QUEUED_TRIMS).contains(&waiting),
        "{waiting} trimmed segments on disk with the trim thread held"
    );
    release.recv().unwrap();
    log.settle_trims();
    assert!(!first.exists(), "deleted once the trim thread ran");
    assert_eq!(left_behind(), 0);
}

/// A log in a fresh directory (under `output`) with segments of
/// `segment` bytes, and `frames` frames of 8 KiB appended to session `a`
/// (seqs from 1): the directory, the log and the frame.
fn written(segment: u64, frames: u64) -> (tempfile::TempDir, OutputLog, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = OutputLog::open(
        &dir.path().join("output"),
        segment,
        u64::MAX,
        Arc::default(),
    )
    .unwrap();
    let frame: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    for seq in 1..=frames {
        log.append("a", seq, seq, &frame).unwrap();
    }
    (dir, log, frame)
}

/// Bytes of `path` in the page cache now (util-linux's `fincore`, which
/// deploy/test.sh installs).
fn cached_bytes(path: &std::path::Path) -> u64 {
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--raw", "-o", "RES"])
        .arg(path)
        .output()
        .expect("fincore (util-linux-extra) runs: bash deploy/test.sh installs it");
    assert!(out.status.success(), "fincore {}: {out:?}", path.display());
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("fincore said {text:?}"))
}

#[test]
fn synced_sealed_output_leaves_the_page_cache_and_reads_back_from_disk() {
    // Two segments of 512 KiB: one sealed, one being written.
    let (dir, log, frame) = written(512 << 10, 96);
    let path = dir.path().join("output");
    let segments = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(path.join("a"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect()
    };
    assert!(
        segments().len() >= 2,
        "a sealed segment and the one written"
    );
    let mut all = segments();
    all.sort();
    let active = all.pop().expect("the segment being written");
    let written: u64 = all.iter().map(|p| cached_bytes(p)).sum();
    assert!(
        written > 400 << 10,
        "written output is cached until synced: {written} bytes"
    );
    log.sync().unwrap();
    let left: u64 = all.iter().map(|p| cached_bytes(p)).sum();
    assert_eq!(left, 0, "synced sealed segments stay in the page cache");
    // The segment being written keeps its pages: its last one, dropped,
    // would be read back from the disk by the next append.
    assert!(
        cached_bytes(&active) > 0,
        "the segment being written was dropped"
    );
    // Read back (from the disk now), whole and in order.
    let frames = log.after("a", 0, usize::MAX).unwrap();
    assert_eq!(frames.len(), 96);
    assert!(frames.iter().all(|f| f.data[..] == frame[..]));
}

/// Read syscalls this thread has made (`syscr` of /proc/thread-self/io).
fn reads_by_this_thread() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").expect("Linux's per-thread io");
    io.lines()
        .find_map(|l| l.strip_prefix("syscr: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("a syscr line")
}

#[test]
fn a_backward_page_reads_its_blocks_in_one_read_not_one_each() {
    // 3 MiB: about 48 blocks of 64 KiB in one segment.
    let (_dir, log, frame) = written(8 << 20, 384);
    log.sync().unwrap();
    // The first page gives where the second, measured, ends (the segment
    // is the one being written: its blocks are in memory).
    let newest = log.before("a", u64::MAX, 1 << 20).unwrap();
    assert_eq!(newest.frames.len(), 128);
    let first = newest.frames[0].seq;
    // Reading the count is itself reads.
    let at = reads_by_this_thread();
    let counting = reads_by_this_thread() - at;
    assert!(counting > 0, "this kernel counts no reads per thread");
    let at = reads_by_this_thread();
    let page = log.before("a", first, 1 << 20).unwrap();
    let reads = reads_by_this_thread() - at - counting;
    let seqs: Vec<u64> = page.frames.iter().map(|f| f.seq).collect();
    assert_eq!(seqs, (first - 128..first).collect::<Vec<_>>());
    assert!(page.more);
    assert!(page.frames.iter().all(|f| f.data[..] == frame[..]));
    // 15 blocks in the first read (1 MiB of file, record headers
    // included), the 16th in a second, and the one older block whose
    // frame does not fit (it says `more`) in a third: read one at a time,
    // the same 17 blocks were 17 reads.
    assert!(reads <= 3, "{reads} reads for one page of 1 MiB");
}

#[test]
fn a_damaged_record_in_a_backward_read_hides_only_the_rest_of_its_block() {
    // 40 frames of 8 KiB: 5 blocks, one read backwards.
    let (dir, log, frame) = written(8 << 20, 40);
    log.sync().unwrap();
    // A byte of the first record's data flipped: its CRC fails.
    let path = dir.path().join("output/a").join(format::segment_name(1));
    let at = format::HEADER + format::RECORD as u64 + 100;
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[frame[100] ^ 0xff], at).unwrap();
    let page = log.before("a", u64::MAX, 1 << 20).unwrap();
    let seqs: Vec<u64> = page.frames.iter().map(|f| f.seq).collect();
    // The first block (its first record at least) is lost; the four
    // blocks after it, scanned as one, would have been lost with it.
    let from = 41 - seqs.len() as u64;
    assert_eq!(seqs, (from..=40).collect::<Vec<_>>());
    assert!((2..=10).contains(&from), "{} frames read", seqs.len());
}
