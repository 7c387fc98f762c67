//! The nemesis's long run (issue 17): the test suite's `exactly_once_under_faults`
//! (node/tests/nemesis/) for `TERMESH_NEMESIS_SECS` (default 600) in a
//! release build; its figures go in docs/benchmarks.md. Exits non-zero on
//! any violation.

// Its unit tests are built here too (cfg(test)) but run in the test suite.
#[path = "../tests/nemesis/check.rs"]
#[allow(dead_code)]
mod check;
#[path = "../tests/nemesis/client.rs"]
mod client;
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/nemesis/faults.rs"]
mod faults;
#[path = "../tests/nemesis/run.rs"]
mod run;
#[path = "../tests/nemesis/world.rs"]
mod world;

fn main() {
    let (secs, seed) = run::settings(600.0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let verdict = runtime.block_on(run::run(secs, seed));
    if !verdict.violations.is_empty() {
        eprintln!("{} violations (seed {seed})", verdict.violations.len());
        std::process::exit(1);
    }
}
