//! `termesh grep`: a regex over every session's stored output in the
//! cluster (the `grep` request), hits printed as each node answers, as
//! `ID@NODE:SEQ:LINE` (context lines with `-`, groups apart with `--`, as
//! grep does); `termesh attach ID --at SEQ` opens the session's scroll
//! mode at a hit. Exit code 0 with
//! hits, 1 without, as grep.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use termesh_transport::{ClientMsg, GrepHit, ServerMsg};

use super::commands::list;
use super::resolve::resolve;
use super::{Client, Target};

/// What `termesh grep` was asked.
pub struct GrepArgs {
    pub pattern: String,
    pub sessions: Vec<String>,
    pub since: Option<Duration>,
    pub state: Option<String>,
    pub context: u32,
    pub max: u32,
    pub json: bool,
}

pub async fn grep(target: &Target, args: GrepArgs) -> anyhow::Result<i32> {
    let mut client = Client::connect(target).await?;
    let sessions = if args.sessions.is_empty() {
        None
    } else {
        let all = list(&mut client).await?;
        let ids: Result<Vec<String>, String> = args
            .sessions
            .iter()
            .map(|w| resolve(&all, w).map(|s| s.id.clone()))
            .collect();
        Some(ids.map_err(|e| anyhow::anyhow!(e))?)
    };
    let since_ms = args
        .since
        .map(|d| termesh_actors::clock::now_ms().saturating_sub(d.as_millis() as u64));
    let id = client.next_id();
    client
        .send(&ClientMsg::Grep {
            id,
            pattern: args.pattern.clone(),
            sessions,
            since_ms,
            state: args.state.clone(),
            context: Some(args.context),
            max_hits: Some(args.max),
            timeout_ms: None,
            node: None,
        })
        .await?;
    let mut out = std::io::stdout().lock();
    let mut printed = false;
    loop {
        match client.next_for(id).await? {
            ServerMsg::GrepHits { hits, .. } => {
                for hit in hits {
                    print_hit(&mut out, &hit, args.context > 0 && printed, args.json)?;
                    printed = true;
                }
                out.flush()?;
            }
            ServerMsg::GrepDone {
                hits,
                scanned_bytes,
                truncated,
                errors,
                ..
            } => {
                client.close().await;
                for e in &errors {
                    eprintln!("termesh grep: {e}");
                }
                eprintln!(
                    "{hits} hit(s) in {:.1} MB of output{}",
                    scanned_bytes as f64 / 1e6,
                    if truncated {
                        " (stopped at --max or the time limit: narrow the search)"
                    } else {
                        ""
                    }
                );
                return Ok(if hits > 0 { 0 } else { 1 });
            }
            ServerMsg::Error { code, message, .. } => {
                return Err(anyhow::anyhow!("{}: {message}", code.as_str()))
                    .context("grep refused");
            }
            _ => {}
        }
    }
}

fn print_hit(out: &mut impl Write, hit: &GrepHit, apart: bool, json: bool) -> std::io::Result<()> {
    if json {
        return writeln!(out, "{}", serde_json::to_string(hit).unwrap_or_default());
    }
    if apart {
        writeln!(out, "--")?;
    }
    let at = format!("{}@{}", hit.session, hit.node);
    for line in &hit.before {
        writeln!(out, "{at}-{}-{line}", hit.seq)?;
    }
    writeln!(out, "{at}:{}:{}", hit.seq, hit.line)?;
    for line in &hit.after {
        writeln!(out, "{at}-{}-{line}", hit.seq)?;
    }
    Ok(())
}
