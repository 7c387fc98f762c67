//! A flood's throughput in alternating rounds (`--bench interactive`): a
//! file `cat` through the raw PTY, through bare relays of one and two
//! hops, through one node and through a mirror, each beside the raw PTY
//! (issue 32's targets) and its relay (the project's floor), with the
//! processes' CPU per MiB and the whole machine's (`machine`).

use std::path::Path;
use std::time::Duration;

use super::cluster::Cluster;
use super::machine::{Pooled, Ticks};
use super::socket_floor::{relay_pty, Hops};

/// What a server that stores, frames and paces output may cost over a
/// bare relay of as many hops (the project's own floor, stricter than
/// the raw PTY's on a host whose relays outrun its raw reader).
pub const FLOOR_TARGET: f64 = 0.9;
/// Issue 32's targets against the raw PTY: one node...
pub const RAW_TARGET_NODE: f64 = 1.0;
/// ...and through a mirror.
pub const RAW_TARGET_MIRROR: f64 = 0.95;

/// One kind of round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flood {
    Raw,
    Relay,
    Relay2,
    Node,
    Mirror,
}

impl Flood {
    pub const ALL: [Flood; 5] = [
        Flood::Raw,
        Flood::Relay,
        Flood::Relay2,
        Flood::Node,
        Flood::Mirror,
    ];

    /// Its name in `TERMESH_BENCH_FLOODS`.
    pub fn name(self) -> &'static str {
        match self {
            Flood::Raw => "raw",
            Flood::Relay => "relay",
            Flood::Relay2 => "relay2",
            Flood::Node => "node",
            Flood::Mirror => "mirror",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Flood::Raw => "raw PTY",
            Flood::Relay => "bare relay, one hop",
            Flood::Relay2 => "bare relay, two hops",
            Flood::Node => "one node",
            Flood::Mirror => "through a mirror",
        }
    }

    /// What its rate is compared with, each with its target if any.
    fn bases(self) -> Vec<(Flood, Option<f64>)> {
        match self {
            Flood::Raw => vec![],
            Flood::Relay | Flood::Relay2 => vec![(Flood::Raw, None)],
            Flood::Node => vec![
                (Flood::Raw, Some(RAW_TARGET_NODE)),
                (Flood::Relay, Some(FLOOR_TARGET)),
            ],
            Flood::Mirror => vec![
                (Flood::Raw, Some(RAW_TARGET_MIRROR)),
                (Flood::Relay2, Some(FLOOR_TARGET)),
            ],
        }
    }
}

/// The rounds `picked` names (comma-separated; all of them when `None`).
pub fn floods(picked: Option<&str>) -> Vec<Flood> {
    let Some(list) = picked else {
        return Flood::ALL.to_vec();
    };
    let names: Vec<&str> = list.split(',').map(str::trim).collect();
    for name in &names {
        assert!(
            Flood::ALL.iter().any(|f| f.name() == *name),
            "TERMESH_BENCH_FLOODS: no round named {name:?} (raw, relay, relay2, node, mirror)"
        );
    }
    Flood::ALL
        .into_iter()
        .filter(|f| names.contains(&f.name()))
        .collect()
}

/// `rounds` alternating rounds of `runs` with a file of `mib` MiB; the
/// node rounds on the cluster's first node, the mirror's on its second
/// (a session of the first); prints each run's median and rounds.
pub async fn run(cluster: &Cluster, mib: usize, runs: &[Flood], rounds: usize) {
    let pids = cluster.pids();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("payload.txt");
    super::flood::payload(&file, mib);
    let bytes = std::fs::metadata(&file).unwrap().len() as usize;
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    let mut cpus: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    let mut machine = vec![Pooled::default(); runs.len()];
    let me = [std::process::id()];
    for _ in 0..rounds {
        for (i, flood) in runs.iter().enumerate() {
            super::settle(&pids).await;
            // The nodes' CPU in a node's round; the bench's own (the relay
            // and its reader) in a relay's.
            let whose: &[u32] = match flood {
                Flood::Node | Flood::Mirror => &pids,
                _ => &me,
            };
            let cpu = || whose.iter().map(|p| super::cpu_ms(*p)).sum::<f64>();
            let (before, ticks) = (cpu(), Ticks::now());
            if let Some(time) = round(cluster, *flood, &file, bytes).await {
                rates[i].push(bytes as f64 / time.as_secs_f64() / 1e6);
                cpus[i].push((cpu() - before) / mib.max(1) as f64);
                machine[i].add(ticks, bytes);
            }
        }
    }
    let medians: Vec<Option<f64>> = rates.iter().map(|v| median(v)).collect();
    let cpu_medians: Vec<Option<f64>> = cpus.iter().map(|v| median(v)).collect();
    let of = |flood: Flood| {
        runs.iter()
            .position(|f| *f == flood)
            .and_then(|i| medians[i])
    };
    println!("  {mib} MiB of `cat`, median MB/s (rounds in run order)");
    for (i, flood) in runs.iter().enumerate() {
        let Some(rate) = medians[i] else {
            println!("    {:<22} not timed: every round resynced", flood.label());
            continue;
        };
        let parts: Vec<String> = rates[i].iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "    {:<22} {rate:7.1}  [{}]",
            flood.label(),
            parts.join(", ")
        );
        for (base, target) in flood.bases() {
            let Some(floor) = of(base) else {
                continue;
            };
            let ratio = rate / floor;
            let verdict = match target {
                Some(t) if ratio >= t => format!(", target >= {t:.2}x: met"),
                Some(t) => format!(", target >= {t:.2}x: not met"),
                None => String::new(),
            };
            println!("      {ratio:.2}x {}{verdict}", base.label());
        }
    }
    // In 10 ms steps (`cpu_ms`): about 0.3 ms per MiB of a 32 MiB round.
    println!(
        "  CPU ms per MiB while it ran, median (rounds in run order; \
         the nodes'; for a relay, the bench's: relay and reader)"
    );
    for (i, flood) in runs.iter().enumerate() {
        if let (Some(cpu), Flood::Relay | Flood::Relay2 | Flood::Node | Flood::Mirror) =
            (cpu_medians[i], flood)
        {
            let parts: Vec<String> = cpus[i].iter().map(|c| format!("{c:.0}")).collect();
            println!(
                "    {:<22} {cpu:7.1}  [{}]",
                flood.label(),
                parts.join(", ")
            );
        }
    }
    print_machine(runs, &machine);
}

/// Each kind's machine figures, pooled over its rounds.
fn print_machine(runs: &[Flood], machine: &[Pooled]) {
    let cpus = super::machine::cpus();
    println!(
        "  the machine while it ran, pooled over the rounds: CPU ms per MiB (every \
         process and kernel worker), busy share of its {cpus} CPUs, and the MB/s \
         that CPU per MiB allows with all {cpus} busy"
    );
    for (flood, pooled) in runs.iter().zip(machine) {
        if let Some(f) = pooled.figures(cpus) {
            println!(
                "    {:<22} {:7.1}  busy {:3.0}%  allows {:5.0}",
                flood.label(),
                f.ms_per_mib,
                f.busy * 100.0,
                f.allows
            );
        }
    }
}

/// One round's time; `None` when a client fell a ring behind (resynced).
async fn round(cluster: &Cluster, flood: Flood, file: &Path, bytes: usize) -> Option<Duration> {
    let (got, time) = match flood {
        Flood::Raw => super::flood::raw_pty(file),
        Flood::Relay => relay_pty(file, Hops::One),
        Flood::Relay2 => relay_pty(file, Hops::Two),
        Flood::Node | Flood::Mirror => {
            let to = cluster.target(usize::from(flood == Flood::Mirror));
            let time = super::flood::through_termesh(&to, Some("a"), file, bytes).await;
            if time.is_none() {
                println!(
                    "    a {} round resynced (fell a ring behind): not timed",
                    flood.name()
                );
            }
            return time;
        }
    };
    assert_eq!(got, bytes, "the {} round lost bytes", flood.name());
    Some(time)
}

/// The median, `None` when there is none (every round resynced).
fn median(v: &[f64]) -> Option<f64> {
    let mut sorted = v.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    sorted.get(sorted.len() / 2).copied()
}
