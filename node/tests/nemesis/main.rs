//! The nemesis (issue 17), in the spirit of Jepsen: three real nodes whose
//! mesh links run through relays the test can cut, sessions printing
//! numbered lines at different rates, clients on every node that
//! subscribe, drop and resume with `from_seq` on random nodes, type and ask
//! for screens, history and logs (some over the bound), while a nemesis
//! kills (-9), stops (SIGTERM), pauses (SIGSTOP) and partitions nodes,
//! revives lost sessions and asks for big replies. The checker proves: no
//! seq hole or repeat per client, no seq with two payloads across all
//! clients and nodes, each program's numbering intact where no resync was
//! announced, every request answered within its bound, no subscriber left
//! silent while its session's owner is away. This is the short run
//! (`TERMESH_NEMESIS_SECS`, default 75); the long one is `cargo bench
//! --bench nemesis`. `TERMESH_NEMESIS_SEED` replays a run's choices.

#[path = "../common/mod.rs"]
mod common;

mod check;
mod client;
mod faults;
mod run;
mod world;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_once_under_faults() {
    let (secs, seed) = run::settings(75.0);
    let verdict = run::run(secs, seed).await;
    assert!(
        verdict.violations.is_empty(),
        "{} violations (seed {seed}), first: {}",
        verdict.violations.len(),
        verdict.violations[0]
    );
    assert!(
        verdict.requests_answered > 0,
        "requests were made and answered"
    );
}
