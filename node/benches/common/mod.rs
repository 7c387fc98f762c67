//! What the benchmark programs share: the real `termesh` binary as its own
//! process, the client calls they all make, and programs in a PTY seen as
//! a terminal shows them (`pty`), a flood's throughput (`flood`), a slow
//! link to put between them (`relay`), and a cluster of real nodes
//! (`cluster`).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use termesh_node::client::{Client, Target};
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg};

pub mod cluster;
pub mod flood;
pub mod machine;
pub mod pty;
pub mod relay;
pub mod socket_floor;
pub mod throughput;

pub const WINDOW: u64 = 1 << 20;

pub struct Node {
    pub child: Child,
    pub target: Target,
    pub dir: tempfile::TempDir,
}

/// The node binary: this build's, or `TERMESH_BENCH_BIN` (another build,
/// for a before/after comparison in one session).
pub fn node_binary() -> std::ffi::OsString {
    std::env::var_os("TERMESH_BENCH_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_termesh").into())
}

impl Node {
    /// Starts a node with the config text `config` (may be empty).
    pub fn start(config: &str) -> Node {
        Node::start_in(tempfile::tempdir().unwrap(), config)
    }

    /// Starts a node on the data dir `dir` (a restart when it has a store).
    pub fn start_in(dir: tempfile::TempDir, config: &str) -> Node {
        let config_file = dir.path().join("termesh.toml");
        std::fs::write(&config_file, config).unwrap();
        let mut child = Command::new(node_binary())
            .args(["node", "--listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(dir.path())
            .arg("--config")
            .arg(&config_file)
            .env("TERMESH_LOG", "warn")
            .env("XDG_RUNTIME_DIR", dir.path().join("run"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the termesh binary");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap()
            .to_string();
        std::thread::spawn(move || for _ in lines {});
        let token = std::fs::read_to_string(dir.path().join("admin.token"))
            .unwrap()
            .trim()
            .to_string();
        Node {
            child,
            target: Target {
                url,
                token: Some(token),
                token_source: "the benchmark".into(),
                ca: None,
                looked: Vec::new(),
            },
            dir,
        }
    }

    /// Stops the node (SIGTERM, waited for) and hands over its data dir.
    pub fn stop_keeping_dir(mut self) -> tempfile::TempDir {
        self.stop();
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }

    fn stop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }

    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.child.id())
    }

    /// The value of the `/metrics` series `name` (any labels; 0 when
    /// absent).
    pub fn metric(&self, name: &str) -> f64 {
        let token = self.target.token.as_deref().unwrap_or("");
        samples(&self.target.url, token, name)
            .first()
            .copied()
            .unwrap_or(0.0)
    }
}

/// Every sample of the `/metrics` series `name` (any labels) of the node
/// at `url` (empty when it does not answer).
pub fn samples(url: &str, token: &str, name: &str) -> Vec<f64> {
    let body = ureq::get(&format!("{url}/metrics"))
        .set("Authorization", &format!("Bearer {token}"))
        .call()
        .ok()
        .and_then(|r| r.into_string().ok())
        .unwrap_or_default();
    body.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with([' ', '{']))
        })
        .filter_map(|l| l.rsplit(' ').next()?.trim().parse().ok())
        .collect()
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
        stop_keeper(self.dir.path());
    }
}

/// Stops the PTY keeper a benchmark's node started on `data_dir` (it
/// writes its pid in `keeper.lock`); its programs end with it. A keeper
/// whose data dir is removed stops by itself within seconds anyway.
pub fn stop_keeper(data_dir: &Path) {
    let pid = std::fs::read_to_string(data_dir.join("keeper.lock"))
        .ok()
        .and_then(|t| t.trim().parse::<i32>().ok());
    // Only a keeper: the pid may be another process's once it has gone.
    let is_keeper = |pid: i32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == b"keeper"))
    };
    if let Some(pid) = pid.filter(|p| is_keeper(*p)) {
        let pid = nix::unistd::Pid::from_raw(pid);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    }
}

pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

pub async fn create(c: &mut Client, command: &str) -> String {
    create_on(c, None, command).await
}

/// Creates `sh -c command` on node `on` (this one when `None`).
pub async fn create_on(c: &mut Client, on: Option<&str>, command: &str) -> String {
    let req = CreateRequest {
        command: Some(vec!["sh".into(), "-c".into(), command.into()]),
        node: on.map(str::to_string),
        ..Default::default()
    };
    match c.request(|id| ClientMsg::Create { id, req }).await.unwrap() {
        ServerMsg::Created { session, .. } => session.id,
        other => panic!("{other:?}"),
    }
}

/// Removes a session, whatever the answer.
pub async fn remove(c: &mut Client, session: String) {
    let _ = c
        .request(|id| ClientMsg::Remove {
            id,
            session,
            purge: None,
        })
        .await;
}

pub async fn subscribe(c: &mut Client, session: &str, from_seq: Option<u64>) {
    let reply = c
        .request(|id| ClientMsg::Subscribe {
            id,
            session: session.into(),
            from_seq,
            window: Some(WINDOW),
            scrollback: None,
        })
        .await
        .unwrap();
    assert!(matches!(reply, ServerMsg::Subscribed { .. }));
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Keystroke to echo through the node; optionally with a flood on the same
/// connection (subscribed and acked by the same client): p50 and p99.
pub async fn echo(
    target: &Target,
    on: Option<&str>,
    samples: usize,
    flood: bool,
) -> (Duration, Duration) {
    let times = echo_times(target, on, samples, flood).await;
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

/// As `echo`, every sample, sorted.
pub async fn echo_times(
    target: &Target,
    on: Option<&str>,
    samples: usize,
    flood: bool,
) -> Vec<Duration> {
    let mut c = Client::connect(target).await.unwrap();
    let session = create_on(&mut c, on, "stty raw -echo; exec cat").await;
    subscribe(&mut c, &session, Some(0)).await;
    let flood_id = if flood {
        let id = create_on(
            &mut c,
            on,
            "exec yes 'flood flood flood flood flood flood flood flood flood flood'",
        )
        .await;
        subscribe(&mut c, &id, None).await;
        Some(id)
    } else {
        None
    };
    let mut flood_unacked = 0u64;
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples + 20 {
        let key = format!("<{i}>");
        let sent = Instant::now();
        c.send(&ClientMsg::Input {
            session: session.clone(),
            data: key.clone().into_bytes(),
        })
        .await
        .unwrap();
        let mut seen = String::new();
        loop {
            match c.recv().await.unwrap() {
                ServerMsg::Output {
                    session: s, data, ..
                } if s == session => {
                    seen.push_str(&String::from_utf8_lossy(&data));
                    if seen.contains(&key) {
                        break;
                    }
                }
                ServerMsg::Output {
                    session: s,
                    seq,
                    data,
                } if Some(&s) == flood_id.as_ref() => {
                    flood_unacked += data.len() as u64;
                    if flood_unacked >= WINDOW / 4 {
                        flood_unacked = 0;
                        c.send(&ClientMsg::Ack { session: s, seq }).await.unwrap();
                    }
                }
                _ => {}
            }
        }
        if i >= 20 {
            times.push(sent.elapsed());
        }
        // The echo session's window: ack what was echoed.
        c.send(&ClientMsg::Ack {
            session: session.clone(),
            seq: u64::MAX,
        })
        .await
        .unwrap();
    }
    if let Some(id) = flood_id {
        remove(&mut c, id).await;
    }
    times.sort();
    times
}

/// The same work avt does for a cold snapshot, without the node: the
/// machine's own parsing limit for the ring's bytes.
pub fn avt_feed_rate(coloured: bool) -> f64 {
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 4 << 20 {
        if coloured {
            text.push_str(&format!("\x1b[3{}m{i:06}\x1b[0m some text to fill the ring with, line after line after line\r\n", i % 8));
        } else {
            text.push_str(&format!(
                "{i:06} some text to fill the ring with, line after line after line\r\n"
            ));
        }
        i += 1;
    }
    let mut t = avt::Terminal::with_scrollback(120, 30, Some(10_000)).unwrap();
    let start = Instant::now();
    t.feed(text.as_str());
    text.len() as f64 / start.elapsed().as_secs_f64() / 1e6
}

/// CPU time (user + system) the process `pid` has used, in milliseconds.
pub fn cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) end at ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 (1-based), 11 and 12 after ')'.
    (ticks(11) + ticks(12)) * machine::TICK_MS
}

/// Waits (at most 20 s) until the processes `pids` together use under 4%
/// of a core over half a second: the background work a burst left behind
/// (warming screen models, the store's flushes) is done. Returns how long
/// that took.
pub async fn settle(pids: &[u32]) -> Duration {
    let start = Instant::now();
    let total = || pids.iter().map(|p| cpu_ms(*p)).sum::<f64>();
    while start.elapsed() < Duration::from_secs(20) {
        let before = total();
        tokio::time::sleep(Duration::from_millis(500)).await;
        if total() - before <= 20.0 {
            break;
        }
    }
    start.elapsed()
}

/// The same coloured text through termesh's screen model as line-sized
/// frames (as a shell loop writes them): avt plus termesh's per-frame work.
pub fn model_feed_rate() -> f64 {
    use termesh_actors::output::ring::Ring;
    use termesh_actors::session::screen::ScreenModel;
    let mut ring = Ring::new(8 << 20, 1 << 20);
    let mut i = 0;
    while ring.bytes() < 4 << 20 {
        let line = format!("\x1b[3{}m{i:06}\x1b[0m some text to fill the ring with, line after line after line\r\n", i % 8);
        ring.push(bytes::Bytes::from(line));
        i += 1;
    }
    let frames: Vec<_> = ring.iter().cloned().collect();
    let mut model = ScreenModel::new(120, 30, 0, 0);
    let start = Instant::now();
    model.advance(&frames, &[]);
    ring.bytes() as f64 / start.elapsed().as_secs_f64() / 1e6
}

/// `screen` of `session`: how long the reply took and its size.
pub async fn timed_screen(c: &mut Client, session: &str) -> (Duration, usize) {
    let start = Instant::now();
    let reply = c
        .request(|id| ClientMsg::Screen {
            id,
            session: session.into(),
            scrollback: None,
        })
        .await
        .unwrap();
    let len = match reply {
        ServerMsg::Snapshot { data, .. } => data.len(),
        other => panic!("{other:?}"),
    };
    (start.elapsed(), len)
}

/// Waits (at most two minutes) until the session's output ends with `tail`.
pub async fn wait_tail(c: &mut Client, session: &str, tail: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let reply = c
            .request(|id| ClientMsg::History {
                id,
                session: session.into(),
                limit: Some(16),
                before_seq: None,
                rows: None,
            })
            .await
            .unwrap();
        if matches!(reply, ServerMsg::History { data: Some(ref d), .. } if d.ends_with(tail)) {
            return;
        }
        assert!(Instant::now() < deadline, "no {tail:?} from {session}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A port free for both TCP and UDP on `ip` (a node's HTTP and QUIC).
pub fn free_port(ip: &str) -> u16 {
    loop {
        let tcp = std::net::TcpListener::bind(format!("{ip}:0")).unwrap();
        let port = tcp.local_addr().unwrap().port();
        if std::net::UdpSocket::bind(format!("{ip}:{port}")).is_ok() {
            return port;
        }
    }
}

/// `termesh cluster init` into `out` for nodes `names` on 127.0.0.1, .2,
/// ... (free ports), each config given `extra` at its end: every node's
/// HTTP address, and the admin token.
pub fn cluster_init(
    out: &Path,
    names: &[&str],
    extra: &str,
) -> (Vec<std::net::SocketAddr>, String) {
    let mut args = vec!["cluster".to_string(), "init".into(), "--out".into()];
    args.push(out.display().to_string());
    let mut https = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let ip = format!("127.0.0.{}", i + 1);
        let http: std::net::SocketAddr = format!("{ip}:{}", free_port(&ip)).parse().unwrap();
        args.push("--node".into());
        args.push(format!("{name},quic={ip}:{},http={http}", free_port(&ip)));
        https.push(http);
    }
    let bin = env!("CARGO_BIN_EXE_termesh");
    assert!(Command::new(bin).args(&args).status().unwrap().success());
    for name in names {
        let path = out.join(name).join("termesh.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{text}\n{extra}\n")).unwrap();
    }
    let token = std::fs::read_to_string(out.join("admin.token"))
        .unwrap()
        .trim()
        .to_string();
    (https, token)
}

/// "p50 .. ms  p99 .. ms" of sorted times.
pub fn p50_p99(sorted: &[Duration]) -> String {
    format!(
        "p50 {:6.2} ms  p99 {:6.2} ms",
        ms(percentile(sorted, 0.5)),
        ms(percentile(sorted, 0.99))
    )
}

/// `dd` writing `bytes` to a file in `dir` and syncing it: the disk's own
/// sequential write rate.
pub fn dd_rate(dir: &Path, bytes: u64) -> f64 {
    let file = dir.join("dd.bin");
    let start = Instant::now();
    let status = std::process::Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", file.display()))
        .args(["bs=1M", &format!("count={}", bytes >> 20), "conv=fsync"])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let rate = bytes as f64 / start.elapsed().as_secs_f64() / 1e6;
    let _ = std::fs::remove_file(file);
    rate
}
