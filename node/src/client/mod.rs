//! Command-line clients of the protocol: a small WebSocket client
//! (`Client`), the one-shot commands and `attach`.

pub mod agents;
pub mod attach;
pub mod commands;
pub mod discover;
pub mod grep;
pub mod last;
pub mod ls;
pub mod mcp;
pub mod resolve;
pub mod stored;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use futures_util::{SinkExt, StreamExt};
use termesh_transport::{ClientMsg, ServerMsg};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Where a client connects and with which token.
#[derive(Debug, Clone)]
pub struct Target {
    /// HTTP base, e.g. `http://127.0.0.1:7420`.
    pub url: String,
    pub token: Option<String>,
    /// Where the token came from, for error messages.
    pub token_source: String,
    /// The CA file trusted for an `https://` node (`--ca`, `TERMESH_CA`);
    /// `None`: the public web roots.
    pub ca: Option<PathBuf>,
    /// Where the URL was looked for, for the error when no node answers
    /// there (empty: `--url` named it).
    pub looked: Vec<String>,
}

impl Target {
    /// `--url`/`TERMESH_URL`, else the URL the node on the data dir
    /// recorded, else the one local node the runtime dir records, else
    /// the default local address (`discover`). `--token`/`TERMESH_TOKEN`,
    /// else the admin token in the found node's data dir.
    pub fn resolve(
        url: Option<String>,
        token: Option<String>,
        data_dir: Option<PathBuf>,
        ca: Option<PathBuf>,
    ) -> anyhow::Result<Target> {
        let discover::Found {
            url,
            data_dir: dir,
            looked,
        } = discover::find(url, data_dir)?;
        let (token, token_source) = match token {
            Some(t) => {
                let from_env = std::env::var("TERMESH_TOKEN").is_ok_and(|e| e == t);
                let source = if from_env { "TERMESH_TOKEN" } else { "--token" };
                (Some(t), source.to_string())
            }
            None => {
                let path = crate::token::token_path(&dir);
                let token = crate::token::read(&dir)?;
                (token, path.display().to_string())
            }
        };
        Ok(Target {
            url,
            token,
            token_source,
            ca,
            looked,
        })
    }

    pub fn ws_url(&self, path: &str) -> String {
        if let Some(rest) = self
            .url
            .strip_prefix("https://")
            .or_else(|| self.url.strip_prefix("wss://"))
        {
            return format!("wss://{rest}{path}");
        }
        let rest = self
            .url
            .strip_prefix("http://")
            .or_else(|| self.url.strip_prefix("ws://"))
            .unwrap_or(&self.url);
        format!("ws://{rest}{path}")
    }

    fn tls(&self) -> bool {
        self.url.starts_with("https://") || self.url.starts_with("wss://")
    }

    /// The rustls client config for an https node: trusts `ca`, else the
    /// public web roots.
    fn tls_config(&self) -> anyhow::Result<std::sync::Arc<rustls::ClientConfig>> {
        termesh_transport::https::client(self.ca.as_deref())
            .map_err(|e| Fatal::wrap(anyhow!("--ca: {e}")))
    }

    /// An HTTP agent for the REST calls (TLS as for the WebSocket).
    pub fn agent(&self) -> anyhow::Result<ureq::Agent> {
        let mut builder = ureq::AgentBuilder::new().timeout(std::time::Duration::from_secs(10));
        if self.tls() {
            builder = builder.tls_config(self.tls_config()?);
        }
        Ok(builder.build())
    }

    /// After "no termesh node at URL": where the URL came from and what to
    /// pass instead.
    pub fn not_found_hint(&self) -> String {
        discover::hint(&self.looked)
    }

    /// Why a connection was refused, in words a person can act on.
    fn explain(&self, e: tokio_tungstenite::tungstenite::Error) -> anyhow::Error {
        use tokio_tungstenite::tungstenite::Error as WsError;
        let url = &self.url;
        match e {
            WsError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
                anyhow!("no termesh node at {url}{}", self.not_found_hint())
            }
            WsError::Http(resp) if resp.status() == 401 || resp.status() == 403 => {
                let source = &self.token_source;
                Fatal::wrap(anyhow!(
                    "the node at {url} refused the token from {source}: pass another with --token or TERMESH_TOKEN"
                ))
            }
            other => anyhow::Error::new(other).context(format!("cannot connect to {url}")),
        }
    }
}

/// `host:port` means `http://host:port`; `https` is refused plainly.
pub fn normalize_url(url: &str) -> anyhow::Result<String> {
    let url = url.trim().trim_end_matches('/');
    if ["http://", "ws://", "https://", "wss://"]
        .iter()
        .any(|s| url.starts_with(s))
    {
        return Ok(url.to_string());
    }
    if url.contains("://") || url.is_empty() {
        bail!(
            "--url {url:?}: use http://HOST:PORT or https://HOST:PORT, e.g. http://127.0.0.1:7420"
        );
    }
    Ok(format!("http://{url}"))
}

/// The node's `error` reply to a request: shown as `code: message`; a
/// person is shown the message alone (`human`).
#[derive(Debug)]
pub struct RequestError {
    pub code: termesh_transport::ErrorCode,
    pub message: String,
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for RequestError {}

/// The node's error code, when `e` is its `error` reply.
pub fn error_code(e: &anyhow::Error) -> Option<termesh_transport::ErrorCode> {
    e.chain()
        .find_map(|c| c.downcast_ref::<RequestError>())
        .map(|r| r.code)
}

/// An error as a person should read it: its causes joined, the node's
/// error codes left out.
pub fn human(e: &anyhow::Error) -> String {
    let parts: Vec<String> = e
        .chain()
        .map(|c| match c.downcast_ref::<RequestError>() {
            Some(r) => r.message.clone(),
            None => c.to_string(),
        })
        .collect();
    parts.join(": ")
}

/// An error that retrying cannot fix (a refused token, a session that no
/// longer exists): `attach` stops instead of reconnecting.
#[derive(Debug)]
pub struct Fatal(pub String);

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Fatal {}

impl Fatal {
    pub fn wrap(e: anyhow::Error) -> anyhow::Error {
        anyhow::Error::new(Fatal(format!("{e:#}")))
    }

    pub fn is(e: &anyhow::Error) -> bool {
        e.chain().any(|c| c.is::<Fatal>())
    }
}

/// The node closed the connection because it is shutting down (close code
/// 1001): not a broken link; it may come back.
#[derive(Debug)]
pub struct NodeStopped(pub String);

impl std::fmt::Display for NodeStopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the node stopped ({})", self.0)
    }
}

impl std::error::Error for NodeStopped {}

impl NodeStopped {
    pub fn is(e: &anyhow::Error) -> bool {
        e.chain().any(|c| c.is::<NodeStopped>())
    }
}

/// A protocol connection: requests with ids, notifications queued.
pub struct Client {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    pub welcome: ServerMsg,
    queued: VecDeque<ServerMsg>,
    /// When the last frame of any kind (pings included) arrived.
    last_heard: Instant,
}

impl Client {
    /// Connects for a person: a node that wants a token when none was
    /// found is an error saying how to pass one.
    pub async fn connect(target: &Target) -> anyhow::Result<Client> {
        let client = Client::connect_raw(target).await?;
        match client.welcome {
            ServerMsg::Welcome {
                auth_required: true,
                ..
            } if target.token.is_none() => Err(Fatal::wrap(anyhow!(
                "the node at {} needs a token and none was found in {}: pass one with --token or TERMESH_TOKEN (`termesh token add` makes one)",
                target.url,
                target.token_source
            ))),
            _ => Ok(client),
        }
    }

    /// Connects and reads the welcome; nothing more (protocol tests use
    /// this to talk to a node without a token).
    pub async fn connect_raw(target: &Target) -> anyhow::Result<Client> {
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
        let connector = match target.tls() {
            true => Some(tokio_tungstenite::Connector::Rustls(target.tls_config()?)),
            false => None,
        };
        let (ws, _) =
            tokio_tungstenite::connect_async_tls_with_config(request, None, true, connector)
                .await
                .map_err(|e| target.explain(e))?;
        let mut client = Client {
            ws,
            next_id: 1,
            welcome: ServerMsg::Pong { nonce: None },
            queued: VecDeque::new(),
            last_heard: Instant::now(),
        };
        client.welcome = client.recv().await?;
        match client.welcome {
            ServerMsg::Welcome { .. } => Ok(client),
            ref other => bail!("{} is not a termesh node (it said {other:?})", target.url),
        }
    }

    /// When the server was last heard from (any frame).
    pub fn last_heard(&self) -> Instant {
        self.last_heard
    }

    /// The server's ping interval, from its welcome.
    pub fn ping_interval(&self) -> Duration {
        match self.welcome {
            ServerMsg::Welcome {
                ping_interval_ms, ..
            } => Duration::from_millis(ping_interval_ms.clamp(100, 600_000)),
            _ => Duration::from_secs(15),
        }
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
            self.last_heard = Instant::now();
            match frame {
                Message::Binary(data) => {
                    return rmp_serde::from_slice(&data).context("undecodable server message")
                }
                Message::Close(Some(frame)) if frame.code == CloseCode::Away => {
                    return Err(anyhow::Error::new(NodeStopped(frame.reason.to_string())))
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
                        Err(anyhow::Error::new(RequestError { code, message }))
                    }
                    other => Ok(other),
                };
            }
            self.queued.push_back(msg);
        }
    }

    /// The next message answering request `id` (a request answered by
    /// several, as `grep`); others stay queued.
    pub async fn next_for(&mut self, id: u64) -> anyhow::Result<ServerMsg> {
        if let Some(at) = self.queued.iter().position(|m| reply_id(m) == Some(id)) {
            return Ok(self.queued.remove(at).expect("found"));
        }
        loop {
            let msg = self.recv_wire().await?;
            if reply_id(&msg) == Some(id) {
                return Ok(msg);
            }
            self.queued.push_back(msg);
        }
    }

    /// Completes the close handshake: waits (bounded) for the server's close
    /// frame so the socket is not reset while the server still reads what we
    /// sent (a reset makes the kernel discard unread data, such as a last
    /// input). The server sends it after reading everything before our
    /// close, so that is enough: waiting for its TCP close as well cost
    /// every command about a second.
    pub async fn close(mut self) {
        if self.ws.close(None).await.is_err() {
            return;
        }
        let drain = async {
            while let Some(Ok(frame)) = self.ws.next().await {
                if frame.is_close() {
                    return;
                }
            }
        };
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
        | ServerMsg::History { id, .. }
        | ServerMsg::Events { id, .. }
        | ServerMsg::StoredOutput { id, .. }
        | ServerMsg::State { id, .. }
        | ServerMsg::Text { id, .. }
        | ServerMsg::GrepHits { id, .. }
        | ServerMsg::GrepDone { id, .. } => Some(*id),
        ServerMsg::Error { id, .. } | ServerMsg::Snapshot { id, .. } => *id,
        _ => None,
    }
}
