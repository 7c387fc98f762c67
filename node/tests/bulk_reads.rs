//! A flood's reads on the node's bulk thread (issue 32): a flood nobody
//! types into is read there, in frames that gather a moment's reads, and
//! comes home when typed into; either way, and when it ends there, its
//! output arrives whole and in order.

mod common;

use common::wire::metric;
use common::*;
use termesh_transport::ClientMsg;

/// One flood at a time in this file: the bulk readers' gauge is looked
/// at while a flood runs.
static FLOODS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Numbered lines, paced to about 10 MB/s, until `stop` exists; then one
/// more batch and `end N` in one write, and an exit at once (the terminal
/// hangs up right behind them, within a gathering frame). Once a line is
/// typed into it, two more batches at that pace (the reads move home
/// under a flood), then a line every 50 ms (about 110 KB since the key:
/// it stays interactive, where a flood still flooding would be bulk again
/// past its burst).
const NUMBERED_FLOOD: &str = r#"
import os, select, sys, time
out, i, batch, slow_at = sys.stdout.buffer, 0, 8000, None
while not os.path.exists(sys.argv[1]):
    if slow_at is None and select.select([sys.stdin], [], [], 0)[0]:
        slow_at = i + 2 * batch
    if slow_at is not None and i >= slow_at:
        batch = 1
    out.write(b"".join(b"%d\n" % (i + k) for k in range(1, batch + 1)))
    out.flush()
    i += batch
    time.sleep(0.005 if batch > 1 else 0.05)
last = b"".join(b"%d\n" % (i + k) for k in range(1, batch + 1))
out.write(last + b"end %d\n" % (i + batch))
out.flush()
os._exit(0)
"#;

/// `NUMBERED_FLOOD` running in a session of `node`, read whole by a
/// subscriber of its own from the start.
struct NumberedFlood {
    id: String,
    stop: std::path::PathBuf,
    reading: tokio::task::JoinHandle<Stream>,
}

impl NumberedFlood {
    async fn start(node: &TestNode) -> NumberedFlood {
        let stop = node.data_dir.path().join("stop");
        let script = format!(
            "stty -echo; exec python3 -c '{NUMBERED_FLOOD}' {}",
            stop.display()
        );
        let id = node.create(&["sh", "-c", &script]).await.id;
        let mut c = node.client(OPERATOR).await;
        subscribe(&mut c, &id, Some(0), 1 << 20).await.unwrap();
        let flood = id.clone();
        let reading = tokio::spawn(async move {
            let mut s = Stream::new(1 << 20);
            pump_to_exit(&mut c, &flood, &mut s, "the numbered flood's end").await;
            s
        });
        NumberedFlood { id, stop, reading }
    }

    /// Ends the flood; its output arrived whole: every line once and in
    /// order, up to its last.
    async fn end_and_check(self) {
        std::fs::write(&self.stop, b"").unwrap();
        let s = within(PATIENCE, "the flood's reader", self.reading)
            .await
            .unwrap();
        assert!(s.errors.is_empty(), "{:?}", s.errors);
        let text = String::from_utf8(s.data).unwrap();
        let mut want = 1u64;
        let mut end = None;
        for line in text.split("\r\n").filter(|l| !l.is_empty()) {
            if let Some(n) = line.strip_prefix("end ") {
                end = Some(n.parse::<u64>().unwrap());
                break;
            }
            assert_eq!(line, want.to_string(), "line {want}");
            want += 1;
        }
        assert_eq!(end, Some(want - 1), "the flood's last line");
        assert!(want > 100_000, "a flood of {want} lines");
    }
}

/// Waits until the node's bulk thread reads some session (`on_bulk`)
/// or none (`what` names the wait).
async fn wait_bulk_readers(node: &TestNode, on_bulk: bool, what: &str) {
    within(PATIENCE, what, async {
        loop {
            let n = metric(&node.url(), "termesh_bulk_sessions").await;
            if (n >= 1.0) == on_bulk {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floods_reads_go_to_the_bulk_thread_and_home_when_typed_into_losing_nothing() {
    let _one = FLOODS.lock().await;
    let node = TestNode::start();
    let flood = NumberedFlood::start(&node).await;
    wait_bulk_readers(&node, true, "the flood read on the bulk thread").await;
    let mut typist = node.client(OPERATOR).await;
    typist
        .send(&ClientMsg::Input {
            session: flood.id.clone(),
            data: b"x\n".to_vec(),
        })
        .await
        .unwrap();
    wait_bulk_readers(&node, false, "the typed-into flood read at home again").await;
    // Every line once and in order across both moves.
    flood.end_and_check().await;
}

/// On the bulk thread a frame gathers reads for a moment: a flood that
/// ends there (its last frame cut short by the end) arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_that_ends_on_the_bulk_thread_arrives_whole() {
    let _one = FLOODS.lock().await;
    let node = TestNode::start();
    let flood = NumberedFlood::start(&node).await;
    wait_bulk_readers(&node, true, "the flood read on the bulk thread").await;
    flood.end_and_check().await;
}
