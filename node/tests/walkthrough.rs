//! docs/operations.md's walkthrough, from nothing to a 3-node cluster with
//! HTTPS, tokens and the console, run as deploy/walkthrough.sh does it:
//! three real nodes on 127.0.0.1-3, every command of the page in order.

use std::net::{TcpListener, UdpSocket};
use std::process::Command;

/// A port free for TCP (HTTP) on 127.0.0.1-3 whose next is free for UDP
/// (QUIC) there too.
fn free_ports() -> (u16, u16) {
    let free = |port: u16| {
        (1..=3).all(|host| {
            let ip = format!("127.0.0.{host}");
            TcpListener::bind((ip.as_str(), port)).is_ok()
                && UdpSocket::bind((ip.as_str(), port + 1)).is_ok()
        })
    };
    let start = 20_000 + (std::process::id() % 20_000) as u16;
    (0..2_000)
        .map(|i| start + 2 * i)
        .find(|&p| free(p))
        .map(|p| (p, p + 1))
        .expect("a free pair of ports")
}

#[test]
fn the_operations_walkthrough_runs_as_written() {
    let work = tempfile::tempdir().unwrap();
    let (http, quic) = free_ports();
    let out = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/walkthrough.sh"
        ))
        .arg(work.path())
        .env("TERMESH_BIN", env!("CARGO_BIN_EXE_termesh"))
        .env("WALK_HTTP_PORT", http.to_string())
        .env("WALK_QUIC_PORT", quic.to_string())
        .env_remove("TERMESH_URL")
        .env_remove("TERMESH_TOKEN")
        .output()
        .expect("run deploy/walkthrough.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let text = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let logs: String = ["a", "b", "c"]
        .iter()
        .map(|n| {
            let log = work.path().join(format!("host-{n}/node.log"));
            format!(
                "--- node {n}\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        })
        .collect();
    assert!(
        out.status.success() && stdout.ends_with("walkthrough passed\n"),
        "{text}\n{logs}"
    );
    for step in ["== 4.", "== 5.", "== 6.", "== 7.", "== 8."] {
        assert!(text.contains(step), "{step} ran: {text}");
    }
}
