//! This build's command line, run on this host against a node in a test
//! machine (common/container.rs, common/vm.rs): `ls`, `new`, `send` and
//! `read` by URL and token, and a line typed until its program answers.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_termesh");

/// A node in a machine, as this host reaches it.
pub struct Cli {
    pub url: String,
    pub token: String,
}

impl Cli {
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .env("TERMESH_URL", &self.url)
            .env("TERMESH_TOKEN", &self.token)
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    }

    /// Its stdout; fails the test when it fails.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "termesh {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Waits until the node serves (within `limit`: a machine's node
    /// may start slowly, under emulation tens of seconds).
    pub fn serving(&self, limit: Duration) {
        self.poll(limit, "the node serving", || {
            self.run(&["ls"]).status.success()
        });
    }

    /// Types `word` into session `id` (once the node serves it) and waits
    /// for the program's answer `got <word>`: the node took the program up.
    pub fn typed(&self, id: &str, word: &str, limit: Duration) {
        let answer = format!("got {word}");
        let mut sent = false;
        self.poll(limit, &format!("the answer to {word:?}"), || {
            if !sent {
                sent = self.run(&["send", id, word]).status.success();
            }
            let read = self.run(&["read", id]);
            String::from_utf8_lossy(&read.stdout).contains(&answer)
        });
    }

    /// Polls `done` (each try asks the node) until it holds, within `limit`.
    fn poll(&self, limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            super::poll_pause_blocking();
        }
    }
}
