//! CLI commands over what a node's store keeps: `revive`, `events` and
//! `export` (asciicast v2), for a session of any node of the cluster.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;
use termesh_transport::{ClientMsg, ServerMsg, MAX_EVENTS};

use super::commands::lookup;
use super::resolve::describe;
use super::{Client, Target};
use crate::export::CastWriter;

/// How often `events --follow` asks for new events.
const FOLLOW_POLL: Duration = Duration::from_secs(1);

/// Runs an exited or lost session's command again (same id).
pub async fn revive(target: &Target, wanted: &str) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
    let s = lookup(&mut client, wanted).await?;
    client
        .request(|id| ClientMsg::Revive {
            id,
            session: s.id.clone(),
        })
        .await
        .with_context(|| format!("cannot revive {}", describe(&s)))?;
    client.close().await;
    println!("{}", s.id);
    Ok(())
}

async fn events_after(
    client: &mut Client,
    session: &str,
    after: u64,
) -> anyhow::Result<Vec<Value>> {
    let reply = client
        .request(|id| ClientMsg::Events {
            id,
            session: session.to_string(),
            after: Some(after),
            limit: Some(MAX_EVENTS),
        })
        .await?;
    let ServerMsg::Events { events, .. } = reply else {
        bail!("unexpected reply to events");
    };
    Ok(events)
}

fn amount(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} bytes"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

fn event_id(e: &Value) -> u64 {
    e.get("id").and_then(Value::as_u64).unwrap_or(0)
}

/// Prints stored events after `after` as JSON lines; with `follow`, then
/// new ones as they come, until interrupted or the session is removed.
pub async fn events(target: &Target, wanted: &str, after: u64, follow: bool) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
    let session = lookup(&mut client, wanted).await?.id;
    let mut last = after;
    let mut out = std::io::stdout().lock();
    loop {
        let page = events_after(&mut client, &session, last).await?;
        for e in &page {
            last = last.max(event_id(e));
            writeln!(out, "{e}")?;
            if follow && e.get("kind").and_then(Value::as_str) == Some("removed") {
                return Ok(());
            }
        }
        out.flush()?;
        if page.is_empty() {
            if !follow {
                break;
            }
            tokio::time::sleep(FOLLOW_POLL).await;
        }
    }
    client.close().await;
    Ok(())
}

/// Writes the session's stored output as asciicast v2 to `out` (a file,
/// with progress on stderr) or stdout.
pub async fn export(
    target: &Target,
    wanted: &str,
    out: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
    let info = lookup(&mut client, wanted).await?;
    let mut events = Vec::new();
    loop {
        let after = events.last().map_or(0, event_id);
        let page = events_after(&mut client, &info.id, after).await?;
        if page.is_empty() {
            break;
        }
        events.extend(page);
    }
    let mut sink: Box<dyn Write> = match out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot write {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    // A running count when a person watches it (a file, and a terminal).
    let progress = out.is_some() && std::io::stderr().is_terminal();
    let (mut writer, header) = CastWriter::new(&info, &events);
    sink.write_all(header.as_bytes())?;
    let mut bytes = 0u64;
    loop {
        let reply = client
            .request(|id| ClientMsg::ReadOutput {
                id,
                session: info.id.clone(),
                after: Some(writer.last_seq()),
                max_bytes: None,
            })
            .await?;
        let ServerMsg::StoredOutput { frames, .. } = reply else {
            bail!("unexpected reply to read_output");
        };
        if frames.is_empty() {
            break;
        }
        bytes += frames.iter().map(|f| f.data.len() as u64).sum::<u64>();
        sink.write_all(writer.page(&frames).as_bytes())?;
        if progress {
            eprint!("\rtermesh: {} of output exported", amount(bytes));
        }
    }
    sink.write_all(writer.finish().as_bytes())?;
    sink.flush()?;
    if let Some(path) = out {
        let clear = if progress { "\r\x1b[K" } else { "" };
        eprintln!(
            "{clear}termesh: {} of output (through seq {}) written to {}",
            amount(bytes),
            writer.last_seq(),
            path.display()
        );
    }
    client.close().await;
    Ok(())
}
