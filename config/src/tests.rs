//! The config as a whole: defaults, parsing, errors that name the key.

use super::*;

#[test]
fn empty_file_is_all_defaults() {
    let c = Config::parse("", "t.toml").unwrap();
    assert_eq!(c.node.name, "local");
    assert_eq!(c.http.listen, "127.0.0.1:7420".parse().unwrap());
    assert_eq!(c.session.ring_bytes, 4 << 20);
    assert_eq!(c.session.default_window, 1 << 20);
    assert_eq!((c.session.cols, c.session.rows), (120, 30));
    assert!(c.auth.tokens.is_empty());
}

#[test]
fn values_parse_with_units() {
    let c = Config::parse(
        "[session]\nring_bytes = \"64KiB\"\ndefault_window = 65536\nkill_grace = \"500ms\"\ncommand = [\"/bin/sh\", \"-l\"]\n",
        "t.toml",
    )
    .unwrap();
    assert_eq!(c.session.ring_bytes, 65536);
    assert_eq!(c.session.default_window, 65536);
    assert_eq!(c.session.kill_grace, Duration::from_millis(500));
    assert_eq!(c.session.command, vec!["/bin/sh", "-l"]);
}

#[test]
fn errors_name_file_key_and_value() {
    let e = Config::parse("[session]\nring_bytes = \"4 parsecs\"\n", "my.toml").unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("my.toml")
            && text.contains("session.ring_bytes")
            && text.contains("4 parsecs"),
        "{text}"
    );

    let e = Config::parse("[http]\nlisten = \"nowhere\"\n", "my.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("http.listen") && e.contains("nowhere"), "{e}");

    let e = Config::parse(
        "[[auth.tokens]]\nhash = \"sha256:00\"\nrole = \"root\"\n",
        "f",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("auth.tokens[0].hash"), "{e}");

    let e = Config::parse("[session]\ncols = 0\n", "f")
        .unwrap_err()
        .to_string();
    assert!(e.contains("session.cols") && e.contains('0'), "{e}");

    let e = Config::parse("[node]\nname = \"a b\"\n", "f")
        .unwrap_err()
        .to_string();
    assert!(e.contains("node.name"), "{e}");
}

#[test]
fn unknown_keys_and_bad_syntax_are_rejected() {
    let e = Config::parse("[session]\nring_byts = 5\n", "f.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("f.toml") && e.contains("ring_byts"), "{e}");
    let e = Config::parse("[session\n", "f.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("f.toml"), "{e}");
}

#[test]
fn tokens_parse() {
    let text = format!(
        "[[auth.tokens]]\nname = \"ci\"\nhash = \"{}\"\nrole = \"viewer\"\n",
        hash_token("abc")
    );
    let c = Config::parse(&text, "f").unwrap();
    assert_eq!(verify(&c.auth.tokens, "abc"), Some(Role::Viewer));
}

#[test]
fn model_idle_has_a_default_and_bounds() {
    let c = Config::parse("", "f").unwrap();
    assert_eq!(c.session.model_idle, defaults::MODEL_IDLE);
    let c = Config::parse("[session]\nmodel_idle = \"3s\"\n", "f").unwrap();
    assert_eq!(c.session.model_idle, Duration::from_secs(3));
    for bad in ["10ms", "2d", "soon"] {
        let e = Config::parse(&format!("[session]\nmodel_idle = \"{bad}\"\n"), "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("session.model_idle"), "{bad}: {e}");
    }
}

#[test]
fn ring_bytes_env_overrides_the_file() {
    // The only test that touches this variable.
    let mut c = Config::parse("[session]\nring_bytes = \"8MiB\"\n", "f").unwrap();
    std::env::set_var(defaults::RING_BYTES_ENV, "64KiB");
    let applied = c.apply_env();
    std::env::set_var(defaults::RING_BYTES_ENV, "tiny");
    let bad = c.clone().apply_env().unwrap_err().to_string();
    std::env::remove_var(defaults::RING_BYTES_ENV);
    applied.unwrap();
    assert_eq!(c.session.ring_bytes, 64 << 10);
    assert!(
        bad.contains("TERMESH_RING_BYTES") && bad.contains("tiny"),
        "{bad}"
    );
}

#[test]
fn example_file_is_valid_and_complete() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/termesh.example.toml"
    );
    let text = std::fs::read_to_string(path).expect("deploy/termesh.example.toml exists");
    let parsed = Config::parse(&text, path).expect("example parses");
    let defaults = Config::default();
    assert_eq!(parsed.session.ring_bytes, defaults.session.ring_bytes);
    assert_eq!(
        parsed.session.default_window,
        defaults.session.default_window
    );
    assert_eq!(parsed.ws.reap_after, defaults.ws.reap_after);
    assert_eq!(parsed.http.listen, defaults.http.listen);
    assert_eq!(parsed.http.user_timeout, defaults.http.user_timeout);
    assert_eq!(parsed.http.keepalive_probes, defaults.http.keepalive_probes);
    assert_eq!(parsed.watchdog.tick, defaults.watchdog.tick);
    assert_eq!(parsed.watchdog.psi_path, defaults.watchdog.psi_path);
}

#[test]
fn liveness_keys_parse_and_are_bounded() {
    let c = Config::parse(
        "[http]\nuser_timeout = \"5s\"\nkeepalive_probes = 5\n[watchdog]\ntick = \"50ms\"\npsi_path = \"\"\n",
        "f",
    )
    .unwrap();
    assert_eq!(c.http.user_timeout, Duration::from_secs(5));
    assert_eq!(c.http.keepalive_probes, 5);
    assert_eq!(c.watchdog.tick, Duration::from_millis(50));
    assert_eq!(c.watchdog.psi_path, None);
    let e = Config::parse("[http]\nuser_timeout = \"0s\"\n", "f")
        .unwrap_err()
        .to_string();
    assert!(e.contains("http.user_timeout"), "{e}");
    let e = Config::parse("[http]\nkeepalive_probes = 0\n", "f")
        .unwrap_err()
        .to_string();
    assert!(e.contains("http.keepalive_probes"), "{e}");
    let e = Config::parse("[watchdog]\ntick = \"1h\"\n", "f")
        .unwrap_err()
        .to_string();
    assert!(e.contains("watchdog.tick"), "{e}");
}

#[test]
fn ws_durations_are_more_than_zero_and_at_most_a_day() {
    let c = Config::parse("[ws]\nping_interval = \"30s\"\n", "t.toml").unwrap();
    assert_eq!(c.ws.ping_interval, Duration::from_secs(30));
    for (key, value) in [
        ("ping_interval", "0s"),
        ("reap_after", "2d"),
        ("stale_after", "25h"),
    ] {
        let e = Config::parse(&format!("[ws]\n{key} = \"{value}\"\n"), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("ws.{key}")), "{e}");
        assert!(e.contains("at most 86400s"), "{e}");
    }
}

#[test]
fn agents_entries_are_checked() {
    let ok = "[[agents]]\nname = \"mine\"\ncommand = [\"my-agent\"]\nwaiting = [\"^Approve\\\\?\"]\nresume = [\"my-agent\", \"--resume\"]\n";
    let c = Config::parse(ok, "t.toml").unwrap();
    assert_eq!(c.agents.len(), 1);
    assert_eq!(c.agents[0].command, ["my-agent"]);
    for (text, says) in [
        ("[[agents]]\ncommand = [\"x\"]\n", "agents[0].name"),
        ("[[agents]]\nname = \"a\"\n", "agents[0].command"),
        ("[[agents]]\nname = \"a\"\ncommand = [\"/bin/x\"]\n", "without a directory"),
        ("[[agents]]\nname = \"a\"\ncommand = [\"x\"]\nworking = [\"(\"]\n", "agents[0].working"),
        ("[[agents]]\nname = \"a\"\ncommand = [\"x\"]\n[[agents]]\nname = \"a\"\ncommand = [\"y\"]\n", "named twice"),
        ("[[agents]]\nname = \"a\"\ncommand = [\"x\"]\nresume = []\n", "agents[0].resume"),
        ("[[agents]]\nname = \"a\"\ncommand = [\"x\"]\nwhat = 1\n", "unknown field"),
    ] {
        let e = Config::parse(text, "t.toml").unwrap_err().to_string();
        assert!(e.contains(says), "{text}: {e}");
    }
}

#[test]
fn notify_entries_are_checked() {
    let ok = "[[notify]]\nurl = \"https://ntfy.sh/my-agents\"\nformat = \"ntfy\"\nquiet = \"5m\"\n";
    let c = Config::parse(ok, "t.toml").unwrap();
    assert_eq!(c.notify[0].on, ["waiting", "failed"], "the default");
    assert_eq!(c.notify[0].quiet, Duration::from_secs(300));
    for (text, says) in [
        ("[[notify]]\nurl = \"ftp://x\"\n", "notify[0].url"),
        ("[[notify]]\n", "notify[0].url"),
        (
            "[[notify]]\nurl = \"http://x\"\nformat = \"email\"\n",
            "notify[0].format",
        ),
        (
            "[[notify]]\nurl = \"http://x\"\non = [\"sleeping\"]\n",
            "notify[0].on",
        ),
        (
            "[[notify]]\nurl = \"http://x\"\ntoken = \"a\\nb\"\n",
            "notify[0].token",
        ),
        (
            "[[notify]]\nurl = \"http://x\"\nquiet = \"2d\"\n",
            "notify[0].quiet",
        ),
    ] {
        let e = Config::parse(text, "t.toml").unwrap_err().to_string();
        assert!(e.contains(says), "{text}: {e}");
    }
}
