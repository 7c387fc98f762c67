//! The `termesh` binary as a user runs it: a node with no config, clients
//! that find it and its token, `config check`, and a clean stop on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_termesh");

fn run(args: &[&str], data_dir: &std::path::Path, url: &str) -> (bool, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env("TERMESH_DATA_DIR", data_dir)
        .env_remove("TERMESH_TOKEN");
    // An empty URL: the client finds the node through the data dir.
    if url.is_empty() {
        cmd.env_remove("TERMESH_URL");
    } else {
        cmd.env("TERMESH_URL", url);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Polls `f` (another process's state has no event to wait on here) until
/// it holds, failing after a generous bound.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn node_and_clients_with_defaults() {
    let data = tempfile::tempdir().unwrap();
    let mut node = Command::new(BIN)
        .args(["node", "--listen", "127.0.0.1:0", "--name", "cli-test"])
        .arg("--data-dir")
        .arg(data.path())
        .env("XDG_RUNTIME_DIR", data.path().join("run"))
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(data.path().join("node.log")).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(node.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the URL is printed")
        .to_string();
    let banner: Vec<String> = lines.by_ref().take(3).map(|l| l.unwrap()).collect();
    let token = std::fs::read_to_string(data.path().join("admin.token")).unwrap();
    let console = format!("console: {url}/ (log in with the admin token below)");
    assert!(
        banner.iter().any(|l| l.trim() == console),
        "the banner names the console and how to log in: {banner:?}"
    );
    assert!(
        banner.iter().any(|l| l.contains(token.trim())),
        "the generated token is printed: {banner:?}"
    );

    let (ok, out, err) = run(
        &[
            "new",
            "--name",
            "greeter",
            "--",
            "sh",
            "-c",
            "echo hello-from-cli; exec sleep 1000",
        ],
        data.path(),
        &url,
    );
    assert!(ok, "{err}");
    let id = out.trim().to_string();
    eventually("the output", || {
        run(&["logs", &id], data.path(), &url)
            .1
            .contains("hello-from-cli")
    });
    let (ok, out, _) = run(&["screen", &id], data.path(), &url);
    assert!(ok && out.starts_with("hello-from-cli"), "{out}");
    let (ok, out, _) = run(&["ls"], data.path(), &url);
    assert!(
        ok && out.contains(&id) && out.contains("greeter") && out.contains("running"),
        "{out}"
    );
    // By name and by id prefix; the client finds the node from the data
    // dir alone (the node recorded its URL there).
    for name in ["greeter", &id[..4]] {
        let (ok, out, err) = run(&["screen", name], data.path(), "");
        assert!(
            ok && out.starts_with("hello-from-cli"),
            "{name}: {out}{err}"
        );
    }
    // A URL without a scheme means http.
    let bare = url.trim_start_matches("http://");
    assert!(run(&["ls", "--url", bare], data.path(), &url).0);
    let (ok, _, err) = run(&["new", "--name", "greeter"], data.path(), &url);
    assert!(!ok && err.contains("taken by session"), "{err}");

    assert!(run(&["kill", "greeter"], data.path(), &url).0);
    eventually("the exit", || {
        run(&["ls", "--all"], data.path(), &url)
            .1
            .contains("TERM (143)")
    });
    let (ok, _, err) = run(&["kill", "greeter"], data.path(), &url);
    assert!(
        !ok && err.contains("has already ended (TERM (143))"),
        "{err}"
    );

    // An ambiguous prefix lists the candidates: make sessions until two
    // ids share a first digit (at most 17 for 16 digits).
    let mut ids = vec![id.clone()];
    let shared = loop {
        let (ok, out, err) = run(&["new", "--", "sleep", "1000"], data.path(), &url);
        assert!(ok, "{err}");
        let new = out.trim().to_string();
        if let Some(twin) = ids.iter().find(|i| i[..1] == new[..1]) {
            break (twin.clone(), new);
        }
        ids.push(new);
    };
    let (ok, _, err) = run(&["screen", &shared.0[..1]], data.path(), &url);
    assert!(
        !ok && err.contains(&shared.0) && err.contains(&shared.1),
        "{err}"
    );
    ids.push(shared.1);
    // `rm` takes several sessions, and says which it could not remove.
    let mut args = vec!["rm", "no-such-session"];
    args.extend(ids.iter().map(String::as_str));
    let (ok, _, err) = run(&args, data.path(), &url);
    assert!(
        !ok && err.contains("no session named `no-such-session`"),
        "{err}"
    );
    assert_eq!(run(&["ls", "--json"], data.path(), &url).1.trim(), "[]");

    // `new` starts in this directory.
    let here = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args([
            "new",
            "--",
            "sh",
            "-c",
            "echo \"in=$(pwd)\"; exec sleep 1000",
        ])
        .current_dir(here.path())
        .env("TERMESH_DATA_DIR", data.path())
        .env_remove("TERMESH_URL")
        .env_remove("TERMESH_TOKEN")
        .output()
        .unwrap();
    let in_here = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let want = format!("in={}", here.path().canonicalize().unwrap().display());
    eventually("the cwd", || {
        run(&["logs", &in_here], data.path(), &url)
            .1
            .contains(&want)
    });

    // Errors a person can act on.
    let (ok, _, err) = run(&["ls", "--token", "wrong"], data.path(), &url);
    assert!(
        !ok && err.contains("refused the token from --token"),
        "{err}"
    );
    let (ok, _, err) = run(&["logs", "nope"], data.path(), &url);
    assert!(!ok && err.contains("no session named `nope`"), "{err}");
    let empty = tempfile::tempdir().unwrap();
    let (ok, _, err) = run(&["ls"], empty.path(), &url);
    assert!(!ok && err.contains("needs a token"), "{err}");
    let (ok, _, err) = run(&["ls", "--url", "http://127.0.0.1:9"], data.path(), &url);
    assert!(
        !ok && err.contains("no termesh node at http://127.0.0.1:9"),
        "{err}"
    );
    let (ok, _, err) = run(&["ls", "--url", "ftp://x"], data.path(), &url);
    assert!(!ok && err.contains("use http://HOST:PORT"), "{err}");

    let pid = nix::unistd::Pid::from_raw(node.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = node.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the node did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let log = std::fs::read_to_string(data.path().join("node.log")).unwrap();
    assert!(log.contains("node serving"), "{log}");
    assert!(!log.contains('\x1b'), "colour codes in a log file: {log:?}");
    assert!(
        !data.path().join("node.url").exists(),
        "a stopped node leaves no URL"
    );
}

/// Every option and argument of every command says what it is, and the
/// options with defaults show them.
#[test]
fn help_describes_every_option() {
    let commands = [
        "node", "ls", "new", "kill", "rm", "rename", "logs", "screen", "attach", "token",
    ];
    for command in commands {
        let out = Command::new(BIN)
            .args([command, "--help"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{command}: {text}");
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            let item = line.trim_start();
            let is_item =
                line.starts_with("  ") && (item.starts_with('-') || item.starts_with('['));
            if !is_item || item.starts_with("-h,") || item.starts_with("-V,") {
                continue;
            }
            // Described on the same line, or on the next (long help).
            let same_line = item.split("  ").filter(|p| !p.trim().is_empty()).count() > 1;
            let next_line = lines.peek().is_some_and(|l| l.starts_with("          "));
            assert!(
                same_line || next_line,
                "{command}: {line:?} has no description"
            );
        }
        for default in match command {
            "attach" => &["[default: ^]]", "[default: 1000]", "most recent"][..],
            "logs" => &["[default: 65536]"][..],
            "kill" => &["[default: TERM]"][..],
            "new" => &["this directory", "the node's shell"][..],
            _ => &[][..],
        } {
            assert!(
                text.contains(default),
                "{command}: no {default:?} in\n{text}"
            );
        }
    }
}

#[test]
fn config_check_names_key_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/termesh.example.toml"
        ),
        &good,
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["config", "check"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[session]\nring_bytes = \"lots\"\n").unwrap();
    let out = Command::new(BIN)
        .args(["config", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("bad.toml") && err.contains("session.ring_bytes") && err.contains("lots"),
        "{err}"
    );
    let out = Command::new(BIN)
        .args(["node", "--listen", "nowhere"])
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--listen"));
}

/// Whether `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// `termesh stop` stops the node and leaves its programs to the keeper;
/// `--keeper` (the data dir named by a config, as the systemd unit does)
/// stops the keeper too, which returns once they ended; again, it says
/// that nothing runs and exits 0.
#[test]
fn stop_ends_the_node_and_with_keeper_its_programs() {
    let data = tempfile::tempdir().unwrap();
    let run_dir = data.path().join("run");
    let mut node = Command::new(BIN)
        .args(["node", "--listen", "127.0.0.1:0", "--name", "stop-test"])
        .arg("--data-dir")
        .arg(data.path())
        .env("XDG_RUNTIME_DIR", &run_dir)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(data.path().join("node.log")).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(node.stdout.take().unwrap()).lines();
    let url = lines
        .next()
        .unwrap()
        .unwrap()
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the URL is printed")
        .to_string();
    let pid_file = data.path().join("prog.pid");
    // A program slow to end once its terminal hangs up (the sleep in its
    // handler is that slowness): `stop --keeper` returns after it ended.
    let script = format!(
        "echo $$ > {}; trap 'sleep 0.5; exit 0' HUP; while :; do sleep 1; done",
        pid_file.display()
    );
    let (ok, _, err) = run(&["new", "--", "sh", "-c", &script], data.path(), &url);
    assert!(ok, "{err}");
    eventually("the program's pid", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| t.trim().parse::<i32>().is_ok())
    });
    let program: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let config = data.path().join("termesh.toml");
    std::fs::write(
        &config,
        format!(
            "[node]\nname = \"stop-test\"\ndata_dir = {:?}\n",
            data.path()
        ),
    )
    .unwrap();
    let stop = |keeper: bool| {
        let mut cmd = Command::new(BIN);
        cmd.arg("stop").env("XDG_RUNTIME_DIR", &run_dir);
        if keeper {
            cmd.arg("--keeper").arg("--config").arg(&config);
        } else {
            cmd.arg("--data-dir").arg(data.path());
        }
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = stop(false);
    assert!(ok && out.contains("stopped node `stop-test`"), "{out}{err}");
    eventually("the node's exit", || node.try_wait().unwrap().is_some());
    assert!(!gone(program), "the program ran on under the keeper");

    // The unit's command once its node stopped, run by hand: not a
    // unit's control command, and the machine not shutting down, so it
    // gives nothing back, stops nothing and reads no config (this one
    // does not exist).
    let out = Command::new(BIN)
        .args(["stopped", "--config"])
        .arg(data.path().join("no-such.toml"))
        .env("XDG_RUNTIME_DIR", &run_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "{out:?}"
    );
    assert!(!gone(program), "termesh stopped by hand ends no program");

    let (ok, out, err) = stop(true);
    assert!(
        ok && out.contains("no node of") && out.contains("stopped the PTY keeper"),
        "{out}{err}"
    );
    assert!(gone(program), "the keeper ended after its program did");

    let (ok, out, err) = stop(true);
    assert!(
        ok && out.contains("no node of") && out.contains("no PTY keeper of"),
        "{out}{err}"
    );
}

/// As root, `termesh stop --keeper` that finds no keeper in root's own
/// default data dir says the node's may be another user's.
#[test]
fn stop_says_when_it_looked_in_roots_own_data_dir() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["stop", "--keeper"])
        .env("HOME", home.path())
        .env("XDG_RUNTIME_DIR", home.path().join("run"))
        .env_remove("XDG_DATA_HOME")
        .env_remove("TERMESH_DATA_DIR")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("no PTY keeper of"),
        "{said}"
    );
    let root = rustix::process::geteuid().is_root();
    assert_eq!(said.contains("root's default data dir"), root, "{said}");
}
