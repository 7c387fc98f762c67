//! The commands that answer agents: `termesh send` (PROTOCOL.md section
//! 15), by id, id prefix or name as everywhere in the CLI.

use anyhow::Context;
use termesh_transport::{ClientMsg, SendWhen};

use super::commands::lookup;
use super::resolve::describe;
use super::{Client, Target};

/// Types `text` into the session (then Enter unless `no_submit`); with
/// `when` waiting, once the session waits.
pub async fn send(
    target: &Target,
    wanted: &str,
    text: &str,
    no_submit: bool,
    when: SendWhen,
) -> anyhow::Result<()> {
    let mut client = Client::connect(target).await?;
    let s = lookup(&mut client, wanted).await?;
    if when == SendWhen::Waiting {
        eprintln!("waiting for {} to wait for you...", describe(&s));
    }
    client
        .request(|id| ClientMsg::Send {
            id,
            session: s.id.clone(),
            text: text.to_string(),
            submit: Some(!no_submit),
            when: Some(when),
        })
        .await
        .with_context(|| format!("cannot send to {}", describe(&s)))?;
    client.close().await;
    Ok(())
}
