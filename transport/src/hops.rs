//! Where a benchmark's keystroke spends its time, hop by hop. With
//! `TERMESH_HOP_LOG=PATH` in a node's environment, each frame carrying a
//! key of `--bench interactive` (`<N>`) appends `point key µs` to
//! `PATH.PID` as it passes one of `POINTS` (µs of CLOCK_MONOTONIC, one
//! clock for every process on the machine, so the bench lines up the
//! nodes' lines with its own send and receive times). Off, a point costs
//! one cached check.

use std::io::Write;
use std::sync::{Mutex, OnceLock};

/// The environment variable that turns the log on, with its path.
pub const ENV: &str = "TERMESH_HOP_LOG";

/// The points, in the order a key passes them through a mirror (on one
/// node it skips the mesh's).
pub const POINTS: &[&str] = &[
    // The client's node: its input forwarded to the owner on the link.
    "in_forward",
    "in_link_write",
    // The owner: the input read off the link, taken, written to the PTY.
    "in_link_read",
    "in_peer",
    "in_taken",
    "in_pty",
    // The owner: the echo read, sequenced, handed to the peer, on the link.
    "out_read",
    "out_session",
    "out_peer",
    "out_link_write",
    // The client's node: the echo off the link, to the mirror, to the
    // connection.
    "out_link_read",
    "out_route",
    "out_mirror",
    "out_connection",
];

/// Notes that a frame of `data` passes `point`, if it carries a key and
/// the log is on.
pub fn pass(point: &str, data: &[u8]) {
    static LOG: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();
    let Some(log) = LOG.get_or_init(open) else {
        return;
    };
    let Some(key) = key(data) else {
        return;
    };
    let line = format!("{point} {key} {}\n", now_us());
    if let Ok(mut file) = log.lock() {
        let _ = file.write_all(line.as_bytes());
    }
}

/// As `pass`, for a keystroke (input).
pub fn pass_input(point: &str, msg: &crate::ClientMsg) {
    if let crate::ClientMsg::Input { data, .. } = msg {
        pass(point, data);
    }
}

fn open() -> Option<Mutex<std::fs::File>> {
    let path = std::env::var_os(ENV)?;
    let mut path = std::path::PathBuf::from(path).into_os_string();
    path.push(format!(".{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .ok()?;
    Some(Mutex::new(file))
}

/// Microseconds of CLOCK_MONOTONIC.
pub fn now_us() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1_000
}

/// The first bench key (`<` digits `>`) in `data`.
pub fn key(data: &[u8]) -> Option<u64> {
    let start = data.iter().position(|&b| b == b'<')? + 1;
    let len = data[start..].iter().position(|&b| b == b'>')?;
    let digits = &data[start..start + len];
    if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::key;

    #[test]
    fn a_key_is_found_where_it_is_and_nowhere_else() {
        assert_eq!(key(b"<0>"), Some(0));
        assert_eq!(key(b"\x93\xa1x<117>\r\n"), Some(117));
        assert_eq!(key(b"y\ny\ny\n"), None);
        assert_eq!(key(b"<>"), None);
        assert_eq!(key(b"<12"), None);
        assert_eq!(key(b"<1a2>"), None);
        assert_eq!(key(b"<1234567890>"), None);
    }
}
