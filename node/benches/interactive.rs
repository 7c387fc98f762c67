//! Typing beside floods (issue 32): a key every 40 ms (human pacing, so
//! every thread on the path has gone idle between keys) into `cat`, time
//! from sending the key to receiving its echo, in alternating rounds of
//! these phases:
//!
//! - the machine's limit: `cat` in a bare PTY, alone and beside the same
//!   `yes` flood in another bare PTY read by a plain reader;
//! - one node: typing alone; beside another session flooding that nobody
//!   watches, from its start (on another session thread of the node, or
//!   on the same one) or from a key this client typed into it (a person
//!   who starts a build, then types elsewhere); with the flood
//!   subscribed on the same connection (acked as a client does, like a
//!   console showing both);
//! - through a mirror (session on a, client on b), alone and with another
//!   session of a flooding to the same client over the same link.
//!
//! Each phase prints its pooled p50/p99 and each round's p99 as the
//! spread. Then what must not regress, in the same run: back-to-back echo
//! (every thread awake), and a file's throughput through one node and
//! through a mirror beside the raw PTY and beside a bare relay (the same
//! PTY read and forwarded over a loopback socket, nothing else: the
//! machine's floor for shipping output to another process; for the
//! mirror, forwarded once more by a third thread). Beside each flood's
//! rate: the nodes' CPU per MiB, and the whole machine's (every process
//! and kernel worker), how busy its CPUs were, and the rate that CPU per
//! MiB allows with every CPU busy (a round near 100% busy is bound by
//! CPU, one well under it by waits).
//!
//!     cargo bench -p termesh-node --bench interactive
//!
//! `TERMESH_BENCH_ROUNDS` (3) and `TERMESH_BENCH_KEYS` (300 per phase and
//! round) change the size; `TERMESH_BENCH_PHASES` picks phases by name
//! (comma-separated, e.g. `alone,subscribed`); `TERMESH_BENCH_MIB`
//! (`32,128`) the throughput payloads, each its own rounds (32 MiB is a
//! short flood, under half a second here, read at home as the key that
//! started it counts; 128 MiB a sustained one, past its first second on
//! the bulk thread), 0 to leave throughput out, and
//! `TERMESH_BENCH_FLOOD_ROUNDS` its rounds (medians are printed; 45 for
//! payloads up to 32 MiB, 15 for larger: a round's rate varies up to 2x
//! on this host, and a 32 MiB round lasts 0.2-0.4 s),
//! `TERMESH_BENCH_FLOODS` which of them run (`raw,relay,relay2,node,mirror`);
//! `TERMESH_BENCH_CONFIG` is added to both nodes' configs (`\n` for
//! newlines).
//! `TERMESH_HOP_LOG=/tmp/hops/log` (its directory must exist) has the
//! nodes log each key at every point it passes (`termesh_transport::hops`)
//! and each round print where its keys waited: the median key's hops and
//! each hop's mean over the slowest 5%.

mod common;
#[path = "interactive/hops.rs"]
mod hops;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::{ms, percentile, WINDOW};
use portable_pty::CommandBuilder;
use termesh_node::client::{Client, Target};
use termesh_transport::hops::now_us;
use termesh_transport::{ClientMsg, ServerMsg};

/// Between two keys.
const PACE: Duration = Duration::from_millis(40);
/// Keys typed before the timed ones (the session's first output, warm-up).
const WARMUP: usize = 10;
/// The neighbour: as much output as a program can make.
const FLOOD: &str = "yes 'flood flood flood flood flood flood flood flood flood flood'";

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Phase {
    Limit,
    LimitFlood,
    Alone,
    Unwatched,
    Shared,
    Started,
    Subscribed,
    MirrorAlone,
    MirrorFlood,
}

impl Phase {
    const ALL: [Phase; 9] = [
        Phase::Limit,
        Phase::LimitFlood,
        Phase::Alone,
        Phase::Unwatched,
        Phase::Shared,
        Phase::Started,
        Phase::Subscribed,
        Phase::MirrorAlone,
        Phase::MirrorFlood,
    ];

    fn name(self) -> &'static str {
        match self {
            Phase::Limit => "limit",
            Phase::LimitFlood => "limit-flood",
            Phase::Alone => "alone",
            Phase::Unwatched => "unwatched",
            Phase::Shared => "shared",
            Phase::Started => "started",
            Phase::Subscribed => "subscribed",
            Phase::MirrorAlone => "mirror",
            Phase::MirrorFlood => "mirror-flood",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Phase::Limit => "limit: `cat` in a bare PTY",
            Phase::LimitFlood => "limit: bare PTY beside `yes` read",
            Phase::Alone => "one node, typing alone",
            Phase::Unwatched => "one node, neighbour floods unwatched",
            Phase::Shared => "one node, unwatched, same session thread",
            Phase::Started => "one node, a flood this client started",
            Phase::Subscribed => "one node, flood on the same connection",
            Phase::MirrorAlone => "mirror (a -> b), typing alone",
            Phase::MirrorFlood => "mirror, flood on the same link and conn",
        }
    }

    fn target(self) -> &'static str {
        match self {
            Phase::Alone | Phase::Unwatched | Phase::Shared | Phase::Started => "target p99 < 2 ms",
            Phase::Subscribed => "target p99 < 3 ms",
            Phase::MirrorFlood => "target p99 < 4 ms",
            _ => "",
        }
    }
}

/// A program in a bare PTY, its reader and writer.
struct BarePty {
    child: Box<dyn portable_pty::Child + Send + Sync>,
    reader: Box<dyn Read + Send>,
    writer: Box<dyn Write + Send>,
}

impl BarePty {
    fn spawn(script: &str) -> BarePty {
        let pair = common::pty::open(80, 24);
        let mut cmd = CommandBuilder::new("sh");
        cmd.args(["-c", script]);
        let child = pair.slave.spawn_command(cmd).unwrap();
        drop(pair.slave);
        BarePty {
            child,
            reader: pair.master.try_clone_reader().unwrap(),
            writer: pair.master.take_writer().unwrap(),
        }
    }
}

impl Drop for BarePty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Paced keys into `cat` in a bare PTY, beside a `yes` in another bare PTY
/// drained by a thread of its own when `flood`.
fn bare(keys: usize, flood: bool) -> Vec<Duration> {
    let neighbour = flood.then(|| {
        let mut pty = BarePty::spawn(&format!("exec {FLOOD}"));
        let mut reader = std::mem::replace(&mut pty.reader, Box::new(std::io::empty()));
        let drain = std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
        });
        (pty, drain)
    });
    let mut pty = BarePty::spawn("stty raw -echo; echo ready; exec cat");
    let mut buf = [0u8; 4096];
    let mut seen = String::new();
    while !seen.contains("ready") {
        let n = pty.reader.read(&mut buf).unwrap();
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let mut times = Vec::with_capacity(keys);
    let mut next = Instant::now();
    for i in 0..keys + WARMUP {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next = Instant::now() + PACE;
        let key = format!("<{i}>");
        let sent = Instant::now();
        pty.writer.write_all(key.as_bytes()).unwrap();
        let mut seen = String::new();
        while !seen.contains(&key) {
            let n = pty.reader.read(&mut buf).unwrap();
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        if i >= WARMUP {
            times.push(sent.elapsed());
        }
    }
    if let Some((pty, drain)) = neighbour {
        drop(pty);
        let _ = drain.join();
    }
    times
}

/// A node's session threads: one per core (`directory::homes`), on
/// this machine as the nodes see it.
fn session_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// The flood's messages that reach the client: acked as a client does,
/// every quarter window.
struct Flood {
    session: Option<String>,
    unacked: u64,
    bytes: u64,
}

impl Flood {
    async fn take(&mut self, c: &mut Client, msg: ServerMsg) {
        if let ServerMsg::Output { session, seq, data } = msg {
            if Some(&session) != self.session.as_ref() {
                return;
            }
            self.unacked += data.len() as u64;
            self.bytes += data.len() as u64;
            if self.unacked >= WINDOW / 4 {
                self.unacked = 0;
                c.send(&ClientMsg::Ack { session, seq }).await.unwrap();
            }
        }
    }
}

/// Paced keys into `cat` on node `on`, from a client of `target`; a `yes`
/// neighbour on the same node, not watched or subscribed on the same
/// connection, as `flood` says.
/// The session flooding beside the one typed into.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Neighbour {
    /// From its start, nobody watching.
    Unwatched,
    /// As `Unwatched`, its session on the same session thread as the one
    /// typed into (a node runs its sessions on one thread per core, taken
    /// in turn: with several sessions per core, a flood often shares the
    /// thread of a session someone types into).
    Shared,
    /// Started by a key this client typed into it (a person starting a
    /// build, then typing elsewhere), nobody watching.
    Started,
    /// From its start, subscribed on the typing connection.
    Watched,
}

async fn paced(target: &Target, on: &str, keys: usize, flood: Option<Neighbour>) -> Vec<Duration> {
    let mut c = Client::connect(target).await.unwrap();
    let session = common::create_on(&mut c, Some(on), "stty raw -echo; exec cat").await;
    common::subscribe(&mut c, &session, Some(0)).await;
    let mut neighbour = Flood {
        session: None,
        unacked: 0,
        bytes: 0,
    };
    let flood_id = match flood {
        Some(kind) => {
            // The sessions made in between take the other threads.
            let spacers = match kind {
                Neighbour::Shared => session_threads() - 1,
                _ => 0,
            };
            let mut made = Vec::new();
            for _ in 0..spacers {
                made.push(common::create_on(&mut c, Some(on), "exec sleep 1000").await);
            }
            for id in made {
                common::remove(&mut c, id).await;
            }
            let script = match kind {
                Neighbour::Started => format!("read go; exec {FLOOD}"),
                _ => format!("exec {FLOOD}"),
            };
            let id = common::create_on(&mut c, Some(on), &script).await;
            match kind {
                Neighbour::Watched => {
                    common::subscribe(&mut c, &id, None).await;
                    neighbour.session = Some(id.clone());
                }
                Neighbour::Started => c
                    .send(&ClientMsg::Input {
                        session: id.clone(),
                        data: b"\n".to_vec(),
                    })
                    .await
                    .unwrap(),
                Neighbour::Unwatched | Neighbour::Shared => {}
            }
            Some(id)
        }
        None => None,
    };
    let mut times = Vec::with_capacity(keys);
    let mut stamps = Vec::with_capacity(keys);
    let mut next = Instant::now() + PACE;
    for i in 0..keys + WARMUP {
        // Until the key is due, the client reads what comes (the flood).
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if let Ok(msg) = tokio::time::timeout(left, c.recv()).await {
                neighbour.take(&mut c, msg.unwrap()).await;
            }
        }
        next = Instant::now() + PACE;
        let key = format!("<{i}>");
        let sent = Instant::now();
        let sent_us = now_us();
        c.send(&ClientMsg::Input {
            session: session.clone(),
            data: key.clone().into_bytes(),
        })
        .await
        .unwrap();
        let mut seen = String::new();
        loop {
            match c.recv().await.unwrap() {
                ServerMsg::Output {
                    session: s, data, ..
                } if s == session => {
                    seen.push_str(&String::from_utf8_lossy(&data));
                    if seen.contains(&key) {
                        break;
                    }
                }
                other => neighbour.take(&mut c, other).await,
            }
        }
        if i >= WARMUP {
            times.push(sent.elapsed());
            stamps.push(hops::Stamp {
                key: i as u64,
                sent: sent_us,
                echoed: now_us(),
            });
        }
        c.send(&ClientMsg::Ack {
            session: session.clone(),
            seq: u64::MAX,
        })
        .await
        .unwrap();
    }
    if neighbour.session.is_some() && neighbour.bytes < 1 << 20 {
        println!(
            "    (the subscribed flood delivered only {} bytes)",
            neighbour.bytes
        );
    }
    if hops::on() {
        hops::report(&stamps);
    }
    if let Some(id) = flood_id {
        common::remove(&mut c, id).await;
    }
    common::remove(&mut c, session).await;
    times
}

/// What the nodes did during a phase, from their metrics: resyncs, output
/// held by connections (at the end), frames on the link's fast stream.
struct Counts([f64; 3]);

impl Counts {
    const SERIES: [&str; 3] = [
        "termesh_resyncs_total",
        "termesh_peer_fast_frames_total",
        "termesh_output_marks_answered_total",
    ];

    fn now(cluster: &Cluster) -> Counts {
        Counts(Self::SERIES.map(|s| cluster.metric(0, s) + cluster.metric(1, s)))
    }

    fn since(&self, cluster: &Cluster) -> String {
        let now = Self::now(cluster).0;
        format!(
            "resyncs {}, link fast frames {}, marks answered {}",
            now[0] - self.0[0],
            now[1] - self.0[1],
            now[2] - self.0[2]
        )
    }
}

fn print_phase(phase: Phase, pooled: &mut [Duration], p99s: &mut [Duration]) {
    pooled.sort();
    p99s.sort();
    println!(
        "  {:<40} p50 {:6.2} ms   p99 {:6.2} ms   (rounds' p99 {:.2}-{:.2})   {}",
        phase.label(),
        ms(percentile(pooled, 0.5)),
        ms(percentile(pooled, 0.99)),
        ms(p99s[0]),
        ms(p99s[p99s.len() - 1]),
        phase.target()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds = env_or("TERMESH_BENCH_ROUNDS", 3);
    let keys = env_or("TERMESH_BENCH_KEYS", 300);
    let mibs = payloads(std::env::var("TERMESH_BENCH_MIB").ok().as_deref());
    // Checked before anything runs: a misspelt round fails at once.
    let floods = common::throughput::floods(std::env::var("TERMESH_BENCH_FLOODS").ok().as_deref());
    let picked = std::env::var("TERMESH_BENCH_PHASES").ok();
    let phases: Vec<Phase> = Phase::ALL
        .into_iter()
        .filter(|p| {
            picked
                .as_deref()
                .is_none_or(|list| list.split(',').any(|n| n.trim() == p.name()))
        })
        .collect();
    // Extra config for both nodes (`\n` for newlines), e.g. to compare
    // `[store]\nenabled = false`.
    let extra = std::env::var("TERMESH_BENCH_CONFIG")
        .unwrap_or_default()
        .replace("\\n", "\n");
    let (cluster, _) = Cluster::start(&["a", "b"], &extra).await;
    let (a, b) = (cluster.target(0), cluster.target(1));
    let pids = cluster.pids();
    let mut pooled = vec![Vec::new(); phases.len()];
    let mut p99s = vec![Vec::new(); phases.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..phases.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            common::settle(&pids).await;
            let counts = Counts::now(&cluster);
            let mut times = match phases[i] {
                Phase::Limit => bare(keys, false),
                Phase::LimitFlood => bare(keys, true),
                Phase::Alone => paced(&a, "a", keys, None).await,
                Phase::Unwatched => paced(&a, "a", keys, Some(Neighbour::Unwatched)).await,
                Phase::Shared => paced(&a, "a", keys, Some(Neighbour::Shared)).await,
                Phase::Started => paced(&a, "a", keys, Some(Neighbour::Started)).await,
                Phase::Subscribed => paced(&a, "a", keys, Some(Neighbour::Watched)).await,
                Phase::MirrorAlone => paced(&b, "a", keys, None).await,
                Phase::MirrorFlood => paced(&b, "a", keys, Some(Neighbour::Watched)).await,
            };
            times.sort();
            let during = counts.since(&cluster);
            if !matches!(phases[i], Phase::Limit | Phase::LimitFlood) {
                println!(
                    "  round {round} {:<13} p99 {:6.2} ms; {during}",
                    phases[i].name(),
                    ms(percentile(&times, 0.99))
                );
            }
            p99s[i].push(percentile(&times, 0.99));
            pooled[i].extend(times);
        }
    }
    println!(
        "\nkeystroke echo at human pacing (a key every {} ms into `cat`), {rounds} alternating rounds of {keys} keys; pooled keys, each round's p99 as the spread",
        PACE.as_millis()
    );
    // How the host groups the programs for its scheduler moves the tail on
    // a saturated host (docs/benchmarks.md, issue 32, "Seventh stop").
    let own = termesh_actors::session::autogroup::hint().is_some();
    println!("  (each program an autogroup of its own, as the nodes' keepers see it here: {own})");
    for (i, phase) in phases.iter().enumerate() {
        print_phase(*phase, &mut pooled[i], &mut p99s[i]);
    }

    println!("\nwhat must not regress (same run)");
    common::settle(&pids).await;
    let mut back = common::echo_times(&a, Some("a"), 1000, false).await;
    back.sort();
    println!(
        "  back-to-back echo, one node              {}",
        common::p50_p99(&back)
    );
    for mib in mibs {
        // A short flood's round lasts a fraction of a second, and its rate
        // swings with the host's: its verdict takes more rounds.
        let flood_rounds = env_or(
            "TERMESH_BENCH_FLOOD_ROUNDS",
            if mib <= 32 { 45 } else { 15 },
        );
        common::throughput::run(&cluster, mib, &floods, flood_rounds).await;
    }
}

/// The throughput payloads in MiB `TERMESH_BENCH_MIB` names
/// (comma-separated; none for 0; 32 and 128 when unset).
fn payloads(list: Option<&str>) -> Vec<usize> {
    let Some(list) = list else {
        return vec![32, 128];
    };
    let mibs: Vec<usize> = list
        .split(',')
        .map(|m| {
            m.trim().parse().unwrap_or_else(|_| {
                panic!("TERMESH_BENCH_MIB: {m:?} is not a size in MiB (e.g. 32,128)")
            })
        })
        .collect();
    mibs.into_iter().filter(|m| *m > 0).collect()
}
