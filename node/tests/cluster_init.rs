//! `termesh cluster init` and `termesh config check` as an operator runs
//! them: a complete folder per node, secrets private, a refusal to write
//! over a folder, certificates checked (signed by the cluster's CA, naming
//! the node), and a node that starts from a written config.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_termesh");

fn termesh(args: &[&str]) -> (bool, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn init(out: &std::path::Path, extra: &[&str]) -> (bool, String) {
    let out = out.display().to_string();
    let mut args = vec![
        "cluster",
        "init",
        "--out",
        &out,
        "--node",
        "a,quic=127.0.0.1:17521,http=127.0.0.1:17520",
        "--node",
        "b,quic=127.0.0.2:17521,http=127.0.0.2:17520",
        "--node",
        "c,quic=127.0.0.3:17521,http=127.0.0.3:17520",
    ];
    args.extend_from_slice(extra);
    termesh(&args)
}

#[test]
fn cluster_init_writes_checked_configs_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cluster");
    let (ok, text) = init(&out, &[]);
    assert!(ok, "{text}");
    for file in ["ca.pem", "ca.key", "admin.token"] {
        assert!(out.join(file).is_file(), "{file}");
    }
    for secret in ["ca.key", "admin.token", "a/node.key", "c/node.key"] {
        let mode = std::fs::metadata(out.join(secret))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{secret} is readable by others: {mode:o}");
    }
    for node in ["a", "b", "c"] {
        let config = out.join(node).join("termesh.toml");
        let (ok, text) = termesh(&["config", "check", &config.display().to_string()]);
        assert!(ok, "{text}");
        assert!(
            text.contains(&format!("node `{node}`")) && text.contains("certificate ok"),
            "{text}"
        );
    }

    // Not over a folder that holds something, unless asked to.
    let before = std::fs::read_to_string(out.join("admin.token")).unwrap();
    let (ok, text) = init(&out, &[]);
    assert!(
        !ok && text.contains("is not empty") && text.contains("--force"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("admin.token")).unwrap(),
        before
    );
    let (ok, text) = init(&out, &["--force"]);
    assert!(ok, "{text}");
    assert_ne!(
        std::fs::read_to_string(out.join("admin.token")).unwrap(),
        before
    );

    // Bad specs are refused with the reason.
    let (ok, text) = termesh(&[
        "cluster",
        "init",
        "--out",
        &dir.path().join("x").display().to_string(),
        "--node",
        "a,quic=127.0.0.1:1,http=127.0.0.1:2",
        "--node",
        "a,quic=127.0.0.1:3,http=127.0.0.1:4",
    ]);
    assert!(!ok && text.contains("share a name or an address"), "{text}");
}

#[test]
fn config_check_catches_certificates_that_do_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let (one, other) = (dir.path().join("one"), dir.path().join("other"));
    assert!(init(&one, &[]).0 && init(&other, &[]).0);
    let b_config = one.join("b/termesh.toml").display().to_string();

    // b holding a's certificate and key: valid under the CA, wrong name.
    std::fs::copy(one.join("a/node.pem"), one.join("b/node.pem")).unwrap();
    std::fs::copy(one.join("a/node.key"), one.join("b/node.key")).unwrap();
    let (ok, text) = termesh(&["config", "check", &b_config]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("`cluster.cert`") && text.contains("mesh certificate of `b`"),
        "{text}"
    );

    // b holding its own HTTPS certificate and key (same CA, its name).
    let tls = dir.path().join("tls");
    assert!(init(&tls, &["--http-tls"]).0);
    std::fs::copy(tls.join("b/http.pem"), tls.join("b/node.pem")).unwrap();
    std::fs::copy(tls.join("b/http.key"), tls.join("b/node.key")).unwrap();
    let tls_b = tls.join("b/termesh.toml").display().to_string();
    let (ok, text) = termesh(&["config", "check", &tls_b]);
    assert!(!ok && text.contains("mesh certificate of `b`"), "{text}");

    // b holding a certificate of another cluster's CA.
    std::fs::copy(other.join("b/node.pem"), one.join("b/node.pem")).unwrap();
    std::fs::copy(other.join("b/node.key"), one.join("b/node.key")).unwrap();
    let (ok, text) = termesh(&["config", "check", &b_config]);
    assert!(!ok && text.contains("under the cluster CA"), "{text}");

    // A missing file names the key and the path.
    std::fs::remove_file(one.join("b/node.key")).unwrap();
    let (ok, text) = termesh(&["config", "check", &b_config]);
    assert!(
        !ok && text.contains("`cluster.key`") && text.contains("node.key"),
        "{text}"
    );
}

#[test]
fn a_node_starts_from_a_written_config() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cluster");
    assert!(init(&out, &[]).0);
    let config = out.join("a/termesh.toml");
    let mut node = Command::new(BIN)
        .args(["node", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(node.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    std::thread::spawn(move || lines.for_each(drop));
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_string();
    let token = std::fs::read_to_string(out.join("admin.token")).unwrap();
    let out_ls = Command::new(BIN)
        .args(["ls", "--url", &url, "--token", token.trim()])
        .output()
        .unwrap();
    assert!(
        out_ls.status.success(),
        "{}",
        String::from_utf8_lossy(&out_ls.stderr)
    );
    // The data dir is the config's, relative to it.
    assert!(out.join("a/data/node.url").is_file());
    let pid = nix::unistd::Pid::from_raw(node.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = node.wait().unwrap();
    assert!(status.success());
}

/// A node whose mesh port is taken ends at once with the reason and a
/// failing status, not a panic (before: "there is no reactor running" from
/// an actor that had not started when the runtime dropped it).
#[test]
fn a_node_whose_mesh_port_is_taken_says_so_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cluster");
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let quic = taken.local_addr().unwrap();
    let (ok, text) = termesh(&[
        "cluster",
        "init",
        "--out",
        &out.display().to_string(),
        "--node",
        &format!("a,quic={quic},http=127.0.0.1:0"),
        "--node",
        "b,quic=127.0.0.2:17521,http=127.0.0.2:17520",
    ]);
    assert!(ok, "{text}");
    let run = Command::new(BIN)
        .args(["node", "--no-keeper", "--config"])
        .arg(out.join("a/termesh.toml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {quic} (UDP)")),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    drop(taken);
}

#[test]
fn cluster_init_with_http_tls_issues_https_certificates_a_node_serves() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cluster");
    // Its own ports: the other tests here run at the same time.
    let (ok, text) = termesh(&[
        "cluster",
        "init",
        "--http-tls",
        "--out",
        &out.display().to_string(),
        "--node",
        "a,quic=127.0.0.1:17621,http=127.0.0.1:17620",
        "--node",
        "b,quic=127.0.0.2:17621,http=127.0.0.2:17620",
    ]);
    assert!(ok, "{text}");
    let mode = std::fs::metadata(out.join("a/http.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "http.key is private");
    let config = out.join("a").join("termesh.toml");
    let (ok, text) = termesh(&["config", "check", &config.display().to_string()]);
    assert!(ok, "{text}");
    // Node a serves HTTPS from its config; a client trusting the cluster
    // CA reaches it by its address (the certificate names it).
    let mut child = Command::new(BIN)
        .args(["node", "--config", &config.display().to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    let token = std::fs::read_to_string(out.join("admin.token")).unwrap();
    let ca = out.join("ca.pem").display().to_string();
    let url = "https://127.0.0.1:17620";
    let listed = termesh(&["ls", "--url", url, "--token", token.trim(), "--ca", &ca]);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    assert!(
        first.contains("serving on https://127.0.0.1:17620"),
        "{first}"
    );
    assert!(listed.0, "{}", listed.1);
}

#[test]
fn the_example_configs_in_deploy_are_what_init_writes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cluster").display().to_string();
    let (ok, text) = termesh(&[
        "cluster",
        "init",
        "--http-tls",
        "--nodes-data-dir",
        "/var/lib/termesh",
        "--out",
        &out,
        "--node",
        "a,quic=10.0.0.1:7521,http=10.0.0.1:7520",
        "--node",
        "b,quic=10.0.0.2:7521,http=10.0.0.2:7520",
        "--node",
        "c,quic=10.0.0.3:7521,http=10.0.0.3:7520",
    ]);
    assert!(ok, "{text}");
    // The cluster id, the admin token's hash and the keys are new each
    // time.
    let normal = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| {
                if l.starts_with("hash = ") {
                    "hash = ...".to_string()
                } else if l.starts_with("key_sha256 = ") {
                    "key_sha256 = ...".to_string()
                } else if l.starts_with("id = ") {
                    "id = ...".to_string()
                } else if let Some(i) = l.find(" of cluster `") {
                    format!("{} of cluster ...", &l[..i])
                } else {
                    l.to_string()
                }
            })
            .collect()
    };
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/cluster-example");
    for node in ["a", "b", "c"] {
        let example = std::fs::read_to_string(format!("{examples}/{node}/termesh.toml")).unwrap();
        let written = std::fs::read_to_string(format!("{out}/{node}/termesh.toml")).unwrap();
        assert_eq!(
            normal(&example),
            normal(&written),
            "deploy/cluster-example/{node}"
        );
        // A node folder is complete: it is copied to its machine as it is.
        for file in ["ca.pem", "node.pem", "node.key", "http.pem", "http.key"] {
            assert!(
                std::path::Path::new(&format!("{out}/{node}/{file}")).exists(),
                "{node}/{file}"
            );
        }
    }
}

/// `--force` over an earlier cluster leaves every secret owner-only, also
/// where the earlier files had been opened up.
#[test]
fn cluster_init_force_makes_secrets_owner_only_again() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c");
    assert!(init(&out, &["--http-tls"]).0);
    let secrets = ["ca.key", "admin.token", "a/node.key", "a/http.key"];
    for file in secrets {
        std::fs::set_permissions(out.join(file), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let (ok, text) = init(&out, &["--http-tls", "--force"]);
    assert!(ok, "{text}");
    for file in secrets {
        let mode = std::fs::metadata(out.join(file))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{file}");
    }
}

/// A SIGTERM sent the moment a node says it serves stops it cleanly
/// (status 0): its handlers are in place before it says so. Before, a
/// supervisor that quick killed it (a suite run saw status "signal 15").
#[test]
fn a_node_stopped_as_soon_as_it_serves_stops_cleanly() {
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let mut node = Command::new(BIN)
            .args([
                "node",
                "--listen",
                "127.0.0.1:0",
                "--no-keeper",
                "--no-store",
            ])
            .arg("--data-dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(node.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        assert!(first.contains("serving on"), "{first}");
        let pid = nix::unistd::Pid::from_raw(node.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        std::thread::spawn(move || lines.for_each(drop));
        let status = node.wait().unwrap();
        assert!(status.success(), "{status}");
    }
}
