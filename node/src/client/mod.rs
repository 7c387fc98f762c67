//! Command-line clients of the protocol: a small WebSocket client
//! (`Client`), the one-shot commands and `attach`.

pub mod attach;
pub mod commands;

use std::collections::VecDeque;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context};
use futures_util::{SinkExt, StreamExt};
use termesh_transport::{ClientMsg, ServerMsg};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Where a client connects and with which token.
#[derive(Debug, Clone)]
pub struct Target {
    /// HTTP base, e.g. `http://127.0.0.1:7420`.
    pub url: String,
    pub token: Option<String>,
}

impl Target {
    /// `--url`/`TERMESH_URL` (default the local node), `--token`/`TERMESH_TOKEN`
    /// (default the local node's `admin.token`).
    pub fn resolve(
        url: Option<String>,
        token: Option<String>,
        data_dir: Option<PathBuf>,
    ) -> anyhow::Result<Target> {
        let url =
            url.unwrap_or_else(|| format!("http://{}", termesh_config::defaults::HTTP_LISTEN));
        let url = url.trim_end_matches('/').to_string();
        if !(url.starts_with("http://") || url.starts_with("ws://")) {
            bail!("--url {url:?}: use http://HOST:PORT (TLS is not supported by this client yet)");
        }
        let token = match token {
            Some(t) => Some(t),
            None => {
                let dir = data_dir.unwrap_or_else(termesh_config::default_data_dir);
                crate::token::read(&dir)?
            }
        };
        Ok(Target { url, token })
    }

    pub fn ws_url(&self, path: &str) -> String {
        let rest = self
            .url
            .strip_prefix("http://")
            .or_else(|| self.url.strip_prefix("ws://"))
            .unwrap_or(&self.url);
        format!("ws://{rest}{path}")
    }
}

/// A protocol connection: requests with ids, notifications queued.
pub struct Client {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    pub welcome: ServerMsg,
    queued: VecDeque<ServerMsg>,
}

impl Client {
    pub async fn connect(target: &Target) -> anyhow::Result<Client> {
        let mut request = target.ws_url("/ws").into_client_request()?;
        if let Some(token) = &target.token {
            request.headers_mut().insert(
                "authorization",
                HeaderValue::from_str(&format!("Bearer {token}"))
                    .context("the token is not a valid header")?,
            );
        }
        // Keystrokes are small writes: without TCP_NODELAY an input behind an
        // unacknowledged ack waits for the peer's delayed ACK (about 40 ms).
        let (ws, _) = tokio_tungstenite::connect_async_with_config(request, None, true)
            .await
            .with_context(|| format!("cannot connect to {}", target.url))?;
        let mut client = Client {
            ws,
            next_id: 1,
            welcome: ServerMsg::Pong { nonce: None },
            queued: VecDeque::new(),
        };
        client.welcome = client.recv().await?;
        if !matches!(client.welcome, ServerMsg::Welcome { .. }) {
            bail!(
                "the server did not start with welcome: {:?}",
                client.welcome
            );
        }
        Ok(client)
    }

    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub async fn send(&mut self, msg: &ClientMsg) -> anyhow::Result<()> {
        let bytes = rmp_serde::to_vec_named(msg)?;
        self.ws.send(Message::Binary(bytes)).await?;
        Ok(())
    }

    /// Sends raw bytes as one binary frame (tests of bad input use this).
    pub async fn send_raw(&mut self, msg: Message) -> anyhow::Result<()> {
        self.ws.send(msg).await?;
        Ok(())
    }

    /// The next message from the server (queued notifications first).
    pub async fn recv(&mut self) -> anyhow::Result<ServerMsg> {
        if let Some(msg) = self.queued.pop_front() {
            return Ok(msg);
        }
        self.recv_wire().await
    }

    async fn recv_wire(&mut self) -> anyhow::Result<ServerMsg> {
        loop {
            let frame = self
                .ws
                .next()
                .await
                .ok_or_else(|| anyhow!("the connection closed"))??;
            match frame {
                Message::Binary(data) => {
                    return rmp_serde::from_slice(&data).context("undecodable server message")
                }
                Message::Close(frame) => bail!("the server closed the connection: {frame:?}"),
                Message::Text(_) => bail!("unexpected text frame"),
                _ => continue,
            }
        }
    }

    /// Sends a request and waits for the reply carrying its id; other
    /// messages that arrive meanwhile stay queued for `recv`.
    pub async fn request(
        &mut self,
        make: impl FnOnce(u64) -> ClientMsg,
    ) -> anyhow::Result<ServerMsg> {
        let id = self.next_id();
        self.send(&make(id)).await?;
        loop {
            let msg = self.recv_wire().await?;
            if reply_id(&msg) == Some(id) {
                return match msg {
                    ServerMsg::Error { code, message, .. } => {
                        Err(anyhow!("{}: {message}", code.as_str()))
                    }
                    other => Ok(other),
                };
            }
            self.queued.push_back(msg);
        }
    }

    /// Completes the close handshake: waits (bounded) for the server's close
    /// so the socket is not reset while the server still reads what we sent.
    /// (A reset makes the kernel discard unread data, such as a last input.)
    pub async fn close(mut self) {
        if self.ws.close(None).await.is_err() {
            return;
        }
        let drain = async { while let Some(Ok(_)) = self.ws.next().await {} };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), drain).await;
    }
}

/// The request id a reply carries.
pub fn reply_id(msg: &ServerMsg) -> Option<u64> {
    match msg {
        ServerMsg::Ok { id }
        | ServerMsg::Sessions { id, .. }
        | ServerMsg::Created { id, .. }
        | ServerMsg::Subscribed { id, .. }
        | ServerMsg::History { id, .. } => Some(*id),
        ServerMsg::Error { id, .. } | ServerMsg::Snapshot { id, .. } => *id,
        _ => None,
    }
}
