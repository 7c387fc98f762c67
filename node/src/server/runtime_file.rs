//! The runtime records of local nodes: one file per running node process,
//! `<runtime dir>/<pid>-<port>.json`, naming its URL and data dir, so a
//! client finds a node started with `--data-dir` without being told. The
//! runtime dir is `$XDG_RUNTIME_DIR/termesh`, else `<default data
//! dir>/nodes`. Written once the node serves, removed on a clean stop; a
//! record whose process is gone (a crash, a kill -9) is ignored by readers
//! and pruned by the next node that starts.

use std::io::Read;
use std::path::{Path, PathBuf};
use termesh_actors::private_fs;

use serde::{Deserialize, Serialize};

/// Records read at most: a directory full of junk costs a bounded scan.
pub const MAX_RECORDS: usize = 64;
/// Bytes read of one record at most (a real one is about 200).
const MAX_RECORD_BYTES: u64 = 16 * 1024;

/// What a record says about one running node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub pid: u32,
    /// The process's start time (clock ticks since boot, from
    /// `/proc/PID/stat`): a pid reused by another process after a crash
    /// does not pass for the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<u64>,
    pub name: String,
    pub url: String,
    pub data_dir: PathBuf,
}

/// This node's record, removed on a clean stop.
pub struct RuntimeFile {
    path: PathBuf,
}

/// `$XDG_RUNTIME_DIR/termesh` (an absolute `XDG_RUNTIME_DIR`, as the XDG
/// spec wants), else `<default data dir>/nodes`.
pub fn dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
    {
        Some(run) => run.join("termesh"),
        None => termesh_config::default_data_dir().join("nodes"),
    }
}

/// Records this process's node; a failure is logged, not fatal (clients
/// can be given `--data-dir` or `--url`). Dead nodes' records are pruned
/// first.
pub fn write(name: &str, url: &str, port: u16, data_dir: &Path) -> Option<RuntimeFile> {
    let dir = dir();
    prune(&dir);
    let pid = std::process::id();
    let record = NodeRecord {
        pid,
        start: start_time(pid),
        name: name.to_string(),
        url: url.to_string(),
        // Absolute, so a client in another directory reads its token.
        data_dir: std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf()),
    };
    let path = dir.join(format!("{pid}-{port}.json"));
    let record = serde_json::to_vec(&record).unwrap_or_default();
    // Written whole (`NAME.json.tmp`, renamed): readers take `*.json` only.
    let written = private_fs::create_dir(&dir).and_then(|_| private_fs::write(&path, &record));
    match written {
        Ok(()) => Some(RuntimeFile { path }),
        Err(e) => {
            tracing::warn!("cannot record the node in {}: {e}", path.display());
            None
        }
    }
}

impl RuntimeFile {
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The records in `dir` of nodes whose process still runs, by file name.
pub fn live(dir: &Path) -> Vec<NodeRecord> {
    records(dir)
        .into_iter()
        .filter_map(|(_, r)| is_alive(&r).then_some(r))
        .collect()
}

/// The first `MAX_RECORDS` well-formed records in `dir`, by file name.
fn records(dir: &Path) -> Vec<(PathBuf, NodeRecord)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .take(MAX_RECORDS * 4)
        .collect();
    paths.sort();
    paths.truncate(MAX_RECORDS);
    paths
        .into_iter()
        .filter_map(|p| {
            let mut text = Vec::new();
            std::fs::File::open(&p)
                .ok()?
                .take(MAX_RECORD_BYTES)
                .read_to_end(&mut text)
                .ok()?;
            let record = serde_json::from_slice(&text).ok()?;
            Some((p, record))
        })
        .collect()
}

/// Removes the records of processes that are gone.
fn prune(dir: &Path) {
    for (path, record) in records(dir) {
        if !is_alive(&record) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The process runs, is this user's (signal 0 reaches it), and is the
/// same process that wrote the record (its start time): a pid reused by
/// another program, or a record without a start time, is not trusted.
fn is_alive(record: &NodeRecord) -> bool {
    let Ok(pid) = i32::try_from(record.pid) else {
        return false;
    };
    if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err() {
        return false;
    }
    matches!(
        (record.start, start_time(record.pid)),
        (Some(recorded), Some(now)) if recorded == now
    )
}

/// Field 22 of `/proc/PID/stat` (after the command, which may hold
/// spaces and parentheses: it ends at the last `)`).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pid: u32, start: Option<u64>) -> NodeRecord {
        NodeRecord {
            pid,
            start,
            name: "n".into(),
            url: "http://127.0.0.1:1".into(),
            data_dir: "/d".into(),
        }
    }

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not() {
        let me = std::process::id();
        let start = start_time(me);
        assert!(start.is_some());
        assert!(is_alive(&record(me, start)));
        assert!(!is_alive(&record(me, None)), "no start time: not trusted");
        assert!(!is_alive(&record(me, start.map(|s| s + 1))));
        // Beyond pid_max: no such process.
        assert!(!is_alive(&record(u32::MAX - 1, None)));
        // Another user's process (init, as root or not, answers signal 0
        // only to root): trusted only when it is this user's.
        let init = record(1, start_time(1));
        assert_eq!(is_alive(&init), rustix::process::geteuid().is_root());
    }

    #[test]
    fn stale_and_malformed_records_are_skipped_and_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let write = |name: &str, r: &NodeRecord| {
            std::fs::write(dir.path().join(name), serde_json::to_vec(r).unwrap()).unwrap()
        };
        write("1-1.json", &record(me, start_time(me)));
        write("2-2.json", &record(u32::MAX - 1, None));
        std::fs::write(dir.path().join("3-3.json"), "not json").unwrap();
        let live = live(dir.path());
        assert_eq!(live, [record(me, start_time(me))]);
        prune(dir.path());
        assert!(!dir.path().join("2-2.json").exists());
        assert!(dir.path().join("1-1.json").exists());
    }
}
