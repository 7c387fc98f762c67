//! One-shot CLI commands: `ls`, `new`, `kill`, `rm`, `logs`, `screen`.

use std::io::Write;

use anyhow::{bail, Context};
use termesh_transport::{ClientMsg, CreateRequest, ServerMsg, SessionInfo};

use super::{Client, Target};

pub async fn ls(target: &Target, json: bool) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
    let ServerMsg::Sessions { sessions, .. } = client.request(|id| ClientMsg::List { id }).await?
    else {
        bail!("unexpected reply to list");
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&sessions)?);
    } else {
        print!("{}", table(&sessions));
    }
    client.close().await;
    Ok(())
}

/// The `ls` table.
pub fn table(sessions: &[SessionInfo]) -> String {
    let mut out = format!(
        "{:<12}  {:<16}  {:<8}  {:>8}  {:>7}  {:>8}  {}\n",
        "ID", "NAME", "STATUS", "SEQ", "VIEWERS", "IDLE", "COMMAND"
    );
    for s in sessions {
        let status = match (s.status, s.exit_code) {
            (termesh_transport::SessionStatus::Exited, Some(code)) => format!("exit {code}"),
            (status, _) => format!("{status:?}").to_lowercase(),
        };
        out.push_str(&format!(
            "{:<12}  {:<16}  {:<8}  {:>8}  {:>7}  {:>7}s  {}\n",
            s.id,
            s.name.as_deref().unwrap_or("-"),
            status,
            s.last_seq,
            s.viewers,
            s.idle_ms / 1000,
            s.command.join(" ")
        ));
    }
    out
}

pub async fn new(target: &Target, req: CreateRequest) -> anyhow::Result<SessionInfo> {
    let mut client = Client::connect(target).await?;
    let ServerMsg::Created { session, .. } =
        client.request(|id| ClientMsg::Create { id, req }).await?
    else {
        bail!("unexpected reply to create");
    };
    client.close().await;
    Ok(session)
}

pub async fn kill(target: &Target, session: String, signal: Option<String>) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
    client
        .request(|id| ClientMsg::Kill {
            id,
            session,
            signal,
        })
        .await
        .context("kill failed")?;
    client.close().await;
    Ok(())
}

pub async fn rm(target: &Target, session: String) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
    client
        .request(|id| ClientMsg::Remove {
            id,
            session,
            purge: None,
        })
        .await
        .context("remove failed")?;
    client.close().await;
    Ok(())
}

/// Raw output (`--tail` bytes) or the rendered history lines.
pub async fn logs(target: &Target, session: String, tail: u64, lines: bool) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
    let limit = (!lines).then_some(tail);
    let reply = client
        .request(|id| ClientMsg::History { id, session, limit })
        .await?;
    let ServerMsg::History { lines, data, .. } = reply else {
        bail!("unexpected reply to history");
    };
    let mut stdout = std::io::stdout().lock();
    if let Some(data) = data {
        stdout.write_all(&data)?;
    }
    for line in lines.unwrap_or_default() {
        writeln!(stdout, "{line}")?;
    }
    stdout.flush()?;
    client.close().await;
    Ok(())
}

/// The screen as plain text (rendered here through a terminal emulator),
/// or the snapshot's escape sequences with `raw`.
pub async fn screen(target: &Target, session: String, raw: bool) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
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

/// Plain text rows of a snapshot, trailing blank rows dropped.
pub fn render_text(snapshot: &[u8], cols: u16, rows: u16) -> Vec<String> {
    let Ok(mut term) = avt::Terminal::new(cols.max(1).into(), rows.max(1).into()) else {
        return Vec::new();
    };
    term.feed(String::from_utf8_lossy(snapshot).as_ref());
    let mut lines: Vec<String> = term
        .screen()
        .visible_lines()
        .map(|l| l.text().trim_end().to_string())
        .collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}
