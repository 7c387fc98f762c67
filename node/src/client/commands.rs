//! One-shot CLI commands: `new`, `kill`, `rm`, `logs`, `screen`, `rename`,
//! and finding the session a command names (`ls` is in `ls.rs`).

use crate::tail::Tail;
pub use crate::text::render_text;
use std::io::Write;

use anyhow::{bail, Context};
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg, SessionInfo};

use super::resolve::{describe, last_or_most_recent, resolve};
use super::{Client, Target};

/// Every session of the cluster, oldest first, read a page at a time (one
/// answer for a large directory would be over the reply bound).
pub(crate) async fn list(client: &mut Client) -> anyhow::Result<Vec<SessionInfo>> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let reply = client
            .request(|id| ClientMsg::List {
                id,
                after: after.take(),
                limit: Some(termesh_actors::front::page::MAX_PAGE),
            })
            .await?;
        let ServerMsg::Sessions { sessions, next, .. } = reply else {
            bail!("unexpected reply to list");
        };
        all.extend(sessions);
        match next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    termesh_transport::oldest_first(&mut all);
    Ok(all)
}

/// The session `wanted` names (id, id prefix or name).
pub(crate) async fn lookup(client: &mut Client, wanted: &str) -> anyhow::Result<SessionInfo> {
    let sessions = list(client).await?;
    resolve(&sessions, wanted)
        .cloned()
        .map_err(anyhow::Error::msg)
}

/// The session `attach` should show: the one named, else the one this
/// user last attached through this node while it runs, else the one with
/// the most recent output. It is remembered as the last attached.
pub async fn pick(target: &Target, wanted: Option<&str>) -> anyhow::Result<SessionInfo> {
    let mut client = Client::connect(target).await?;
    let state = super::last::path();
    let found = match wanted {
        Some(wanted) => lookup(&mut client, wanted).await?,
        None => {
            let sessions = list(&mut client).await?;
            let last = state
                .as_deref()
                .and_then(|p| super::last::read(p, &target.url));
            last_or_most_recent(&sessions, last.as_deref())
                .cloned()
                .map_err(anyhow::Error::msg)?
        }
    };
    client.close().await;
    if let Some(path) = &state {
        super::last::write(path, &target.url, &found.id);
    }
    Ok(found)
}

/// `termesh config reload`: the node reads its config file again.
pub fn reload(target: &Target) -> anyhow::Result<()> {
    let url = format!("{}/api/v1/config/reload", target.url);
    let mut req = target.agent()?.post(&url);
    if let Some(token) = &target.token {
        req = req.set("authorization", &format!("Bearer {token}"));
    }
    match req.call() {
        Ok(resp) => {
            let body: serde_json::Value = resp.into_json()?;
            println!("reloaded: {} token(s) in force", body["tokens"]);
            let names = |key: &str| -> Vec<String> {
                body[key]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            for (key, what) in [
                ("peers_added", "linking to"),
                ("peers_removed", "no longer linked to"),
            ] {
                let list = names(key);
                if !list.is_empty() {
                    println!("{what}: {}", list.join(", "));
                }
            }
            Ok(())
        }
        Err(ureq::Error::Status(_, resp)) => {
            let body: serde_json::Value = resp.into_json().unwrap_or_default();
            bail!(
                "{}",
                body["message"].as_str().unwrap_or("the reload failed")
            )
        }
        Err(e) => bail!(
            "no termesh node at {} ({e}){}",
            target.url,
            target.not_found_hint()
        ),
    }
}

/// `termesh nodes`: `GET /api/v1/nodes` as a table (or its JSON).
pub fn nodes(target: &Target, json: bool) -> anyhow::Result<()> {
    let url = format!("{}/api/v1/nodes", target.url);
    let mut req = target.agent()?.get(&url);
    if let Some(token) = &target.token {
        req = req.set("authorization", &format!("Bearer {token}"));
    }
    let nodes: Vec<serde_json::Value> = match req.call() {
        Ok(resp) => resp.into_json()?,
        Err(ureq::Error::Status(code, resp)) => {
            let body = resp.into_string().unwrap_or_default();
            bail!("{url}: {code}: {}", body.trim());
        }
        Err(e) => bail!(
            "no termesh node at {} ({e}){}",
            target.url,
            target.not_found_hint()
        ),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&nodes)?);
        return Ok(());
    }
    println!(
        "{:<16}  {:<22}  {:<10}  {:>8}  {:<7}  {:>8}  {:>8}",
        "NODE", "HTTP", "STATE", "RTT", "BREAKER", "STALL", "SESSIONS"
    );
    for n in &nodes {
        let text = |k: &str| n[k].as_str().unwrap_or("-").to_string();
        let me = if n["self"].as_bool() == Some(true) {
            "*"
        } else {
            ""
        };
        let rtt = n["rtt_ms"]
            .as_f64()
            .map_or("-".into(), |ms| format!("{ms:.1}ms"));
        println!(
            "{:<16}  {:<22}  {:<10}  {:>8}  {:<7}  {:>7}s  {:>8}",
            format!("{}{me}", text("name")),
            text("http"),
            text("state"),
            rtt,
            text("breaker"),
            n["stall_ms"].as_u64().unwrap_or(0) / 1000,
            n["sessions"].as_u64().unwrap_or(0)
        );
    }
    Ok(())
}

/// `exit 0`, or `TERM (143)` for a program ended by a signal.
pub fn exit_text(code: u32) -> String {
    let signal = code
        .checked_sub(128)
        .and_then(|n| nix::sys::signal::Signal::try_from(n as i32).ok());
    match signal {
        Some(sig) => format!("{} ({code})", sig.as_str().trim_start_matches("SIG")),
        None => format!("exit {code}"),
    }
}

/// Creates a session. Without `cwd` it starts in this directory, as tmux
/// does; when the node has no such directory (it runs elsewhere) it
/// starts in the node's default one, and says so.
pub async fn new(target: &Target, mut req: CreateRequest) -> anyhow::Result<SessionInfo> {
    let mut client = Client::connect(target).await?;
    let here = req
        .cwd
        .is_none()
        .then(|| std::env::current_dir().ok())
        .flatten()
        .map(|d| d.display().to_string());
    req.cwd = req.cwd.or(here.clone());
    let mut reply = client
        .request(|id| ClientMsg::Create {
            id,
            req: req.clone(),
        })
        .await;
    if let (Err(e), Some(here)) = (&reply, &here) {
        if e.to_string().contains("`cwd`") {
            eprintln!("termesh: the node has no directory {here}; starting in its default one");
            req.cwd = None;
            reply = client.request(|id| ClientMsg::Create { id, req }).await;
        }
    }
    let ServerMsg::Created { session, .. } = reply? else {
        bail!("unexpected reply to create");
    };
    client.close().await;
    Ok(session)
}

/// Signals each session named; one that already ended is reported, not
/// signalled. Exit code 1 when any could not be.
pub async fn kill(target: &Target, wanted: &[String], signal: &str) -> anyhow::Result<i32> {
    let mut client = Client::connect(target).await?;
    let sessions = list(&mut client).await?;
    let mut failed = 0;
    for name in wanted {
        let result = match resolve(&sessions, name) {
            Err(e) => Err(e),
            Ok(s) if s.status != termesh_transport::SessionStatus::Running => Err(format!(
                "session {} has already ended ({})",
                describe(s),
                s.exit_code
                    .map(exit_text)
                    .unwrap_or_else(|| "no exit code".into())
            )),
            Ok(s) => client
                .request(|id| ClientMsg::Kill {
                    id,
                    session: s.id.clone(),
                    signal: Some(signal.to_string()),
                })
                .await
                .map(|_| ())
                .map_err(|e| format!("cannot kill {}: {e}", describe(s))),
        };
        if let Err(e) = result {
            eprintln!("termesh: {e}");
            failed += 1;
        }
    }
    client.close().await;
    Ok(i32::from(failed > 0))
}

/// Removes each session named. Exit code 1 when any could not be.
pub async fn rm(target: &Target, wanted: &[String], purge: bool) -> anyhow::Result<i32> {
    let mut client = Client::connect(target).await?;
    let sessions = list(&mut client).await?;
    let mut failed = 0;
    for name in wanted {
        let result = match resolve(&sessions, name) {
            Err(e) => Err(e),
            Ok(s) => client
                .request(|id| ClientMsg::Remove {
                    id,
                    session: s.id.clone(),
                    purge: purge.then_some(true),
                })
                .await
                .map(|_| ())
                .map_err(|e| format!("cannot remove {}: {e}", describe(s))),
        };
        if let Err(e) = result {
            eprintln!("termesh: {e}");
            failed += 1;
        }
    }
    client.close().await;
    Ok(i32::from(failed > 0))
}

/// Gives the session `wanted` names the name `name` (unique on its node).
pub async fn rename(target: &Target, wanted: &str, name: &str) -> anyhow::Result<()> {
    if name.is_empty() {
        bail!("an empty name: give the session a name of at least one character");
    }
    let mut client = Client::connect(target).await?;
    let s = lookup(&mut client, wanted).await?;
    client
        .request(|id| ClientMsg::Rename {
            id,
            session: s.id.clone(),
            name: name.to_string(),
        })
        .await
        .with_context(|| format!("cannot rename {} to `{name}`", describe(&s)))?;
    client.close().await;
    Ok(())
}

/// Raw output (the newest `--tail` bytes, any number of them, read page
/// by page) or the rendered history lines.
pub async fn logs(target: &Target, wanted: &str, tail: u64, lines: bool) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
    let session = lookup(&mut client, wanted).await?.id;
    let mut stdout = std::io::stdout().lock();
    if lines {
        let reply = client
            .request(|id| ClientMsg::History {
                id,
                session,
                limit: None,
                before_seq: None,
                rows: None,
            })
            .await?;
        let ServerMsg::History { lines, .. } = reply else {
            bail!("unexpected reply to history");
        };
        for line in lines.unwrap_or_default() {
            writeln!(stdout, "{line}")?;
        }
    } else {
        let mut plan = Tail::plan(&mut client, &session, tail).await?;
        while let Some(data) = plan.next(&mut client).await? {
            stdout.write_all(&data)?;
        }
    }
    stdout.flush()?;
    client.close().await;
    Ok(())
}

/// The screen as plain text (rendered here through a terminal emulator),
/// or the snapshot's escape sequences with `raw`.
pub async fn screen(target: &Target, wanted: &str, raw: bool) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
    let session = lookup(&mut client, wanted).await?.id;
    let reply = client
        .request(|id| ClientMsg::Screen {
            id,
            session,
            scrollback: None,
        })
        .await?;
    let ServerMsg::Snapshot {
        cols, rows, data, ..
    } = reply
    else {
        bail!("unexpected reply to screen");
    };
    let mut stdout = std::io::stdout().lock();
    if raw {
        stdout.write_all(&data)?;
    } else {
        for row in render_text(&data, cols, rows) {
            writeln!(stdout, "{row}")?;
        }
    }
    stdout.flush()?;
    client.close().await;
    Ok(())
}

/// A client connection answers the tail's requests (`logs --tail`).
impl crate::tail::Ask for Client {
    async fn ask(&mut self, make: impl FnOnce(u64) -> ClientMsg) -> anyhow::Result<ServerMsg> {
        self.request(make).await
    }
}
