//! A private tmux server (its own socket, no user config) running one
//! command in a pane of a given size, for tests that drive `termesh
//! attach` as a person would and read the outer terminal's state back
//! (`#{alternate_on}`, `#{cursor_flag}`, ...). Killed on drop.

use std::process::Command;

use super::{poll_pause, within, PATIENCE};

pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// Runs `command` (a shell command line) in a `cols` x `rows` pane; its
    /// exit status is printed as `EXIT=N` and the pane stays.
    pub fn start(cols: u16, rows: u16, command: &str, env: &[(&str, &str)]) -> Tmux {
        let socket = format!(
            "termesh-test-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        );
        let tmux = Tmux { socket };
        let script = format!("{command}; echo EXIT=$?; exec sleep 100000");
        let mut cmd = tmux.cmd();
        cmd.args([
            "new-session",
            "-d",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
        ]);
        for (k, v) in env {
            cmd.args(["-e", &format!("{k}={v}")]);
        }
        cmd.args(["sh", "-c", &script]);
        let out = cmd.output().expect("tmux runs");
        assert!(
            out.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tmux
    }

    fn cmd(&self) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.args(["-L", &self.socket, "-f", "/dev/null"]);
        cmd
    }

    fn run(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().expect("tmux runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pane's visible text, one string per row.
    pub fn screen(&self) -> Vec<String> {
        self.run(&["capture-pane", "-p"])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Scrollback and screen, oldest first, trailing blank rows dropped.
    pub fn all_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .run(&["capture-pane", "-p", "-S", "-", "-E", "-"])
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect();
        while lines.last().is_some_and(|l| l.is_empty()) {
            lines.pop();
        }
        lines
    }

    pub fn text(&self) -> String {
        self.screen().join("\n")
    }

    /// tmux format variables of the pane, e.g. `#{alternate_on}`.
    pub fn show(&self, format: &str) -> String {
        self.run(&["display-message", "-p", format])
            .trim()
            .to_string()
    }

    /// Key names as tmux knows them (`C-]`, `Enter`, ...).
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    /// Text typed as is.
    pub fn type_text(&self, text: &str) {
        self.run(&["send-keys", "-l", text]);
    }

    /// Pastes `text` as a terminal paste (bracketed when the pane asked).
    pub fn paste(&self, text: &str) {
        self.run(&["set-buffer", "--", text]);
        self.run(&["paste-buffer", "-p"]);
    }

    pub fn resize(&self, cols: u16, rows: u16) {
        self.run(&[
            "resize-window",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
        ]);
    }

    /// The pid of the pane's command (`sh -c`), whose child is the client.
    pub fn client_pid(&self) -> i32 {
        let sh: i32 = self.show("#{pane_pid}").parse().expect("a pane pid");
        let children =
            std::fs::read_to_string(format!("/proc/{sh}/task/{sh}/children")).unwrap_or_default();
        children
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the client runs under the pane's shell")
    }

    /// The pid of a process under the pane whose command line contains
    /// `needle` (the client run from the pane's shell).
    pub fn descendant(&self, needle: &str) -> Option<i32> {
        let mut todo = vec![self.show("#{pane_pid}").parse::<i32>().ok()?];
        while let Some(pid) = todo.pop() {
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default();
            for child in children.split_whitespace().filter_map(|p| p.parse().ok()) {
                let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
                if String::from_utf8_lossy(&cmdline).contains(needle) {
                    return Some(child);
                }
                todo.push(child);
            }
        }
        None
    }

    /// Waits until the pane shows `needle`; returns the screen.
    pub async fn wait_for(&self, needle: &str) -> String {
        self.wait_until(needle, |t| t.contains(needle)).await
    }

    pub async fn wait_until(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let result = tokio::time::timeout(PATIENCE, async {
            loop {
                let text = self.text();
                if done(&text) {
                    return text;
                }
                poll_pause().await;
            }
        })
        .await;
        match result {
            Ok(text) => text,
            Err(_) => panic!(
                "timed out waiting for {what}; the pane shows:\n{}",
                self.text()
            ),
        }
    }

    /// Waits for the client to end; returns its exit code.
    pub async fn exit_code(&self) -> i32 {
        let text = self.wait_for("EXIT=").await;
        let at = text.rfind("EXIT=").unwrap() + 5;
        text[at..]
            .split_whitespace()
            .next()
            .and_then(|c| c.parse().ok())
            .expect("an exit code")
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").output();
    }
}

/// Bounded wait for a condition on something other than the screen.
pub async fn wait_on(what: &str, check: impl Fn() -> bool) {
    within(PATIENCE, what, async {
        while !check() {
            poll_pause().await;
        }
    })
    .await
}
