//! Low-level clients for liveness tests: a WebSocket over a socket the test
//! shapes (a tiny receive buffer), that reads only when the test says so
//! (tungstenite answers pings only while reading, so a client that does not
//! read is silent), and the node's `/metrics` read back as numbers.

use std::net::SocketAddr;

use futures_util::{SinkExt, StreamExt};
use termesh_transport::{ClientMsg, ServerMsg};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

pub type Ws = WebSocketStream<TcpStream>;

/// Connects to `/ws` with a bearer token; `rcvbuf` shrinks the client's
/// receive buffer (set before connecting, so the window scale follows).
pub async fn connect(addr: SocketAddr, token: &str, rcvbuf: Option<usize>) -> Ws {
    let socket = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .unwrap();
    if let Some(size) = rcvbuf {
        socket.set_recv_buffer_size(size).unwrap();
    }
    socket.connect(&addr.into()).unwrap();
    socket.set_nonblocking(true).unwrap();
    let stream = TcpStream::from_std(socket.into()).unwrap();
    let mut request = format!("ws://{addr}/ws").into_client_request().unwrap();
    request.headers_mut().insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    let (ws, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .unwrap();
    ws
}

pub async fn send(ws: &mut Ws, msg: &ClientMsg) {
    ws.send(Message::Binary(rmp_serde::to_vec_named(msg).unwrap()))
        .await
        .unwrap();
}

/// What one read brought: a protocol message, a ping, or the end.
#[derive(Debug)]
// A test's view of one frame: size does not matter here.
#[allow(clippy::large_enum_variant)]
pub enum Got {
    Msg(ServerMsg),
    Ping,
    Closed(String),
}

pub async fn read(ws: &mut Ws) -> Got {
    match ws.next().await {
        None => Got::Closed("end of stream".into()),
        Some(Err(e)) => Got::Closed(e.to_string()),
        Some(Ok(Message::Binary(data))) => Got::Msg(rmp_serde::from_slice(&data).unwrap()),
        Some(Ok(Message::Ping(_))) => Got::Ping,
        Some(Ok(Message::Close(frame))) => Got::Closed(format!("close frame {frame:?}")),
        Some(Ok(other)) => panic!("unexpected frame {other:?}"),
    }
}

/// Reads until a protocol message arrives (pings are answered meanwhile).
pub async fn read_msg(ws: &mut Ws) -> ServerMsg {
    loop {
        match read(ws).await {
            Got::Msg(msg) => return msg,
            Got::Ping => {}
            Got::Closed(why) => panic!("connection closed: {why}"),
        }
    }
}

/// Every sample of the node's `/metrics`, by name (labels dropped).
pub async fn metrics(url: &str) -> std::collections::HashMap<String, f64> {
    let url = format!("{url}/metrics");
    let text =
        tokio::task::spawn_blocking(move || ureq::get(&url).call().unwrap().into_string().unwrap())
            .await
            .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            let name = name.split('{').next()?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

pub async fn metric(url: &str, name: &str) -> f64 {
    *metrics(url)
        .await
        .get(name)
        .unwrap_or_else(|| panic!("no metric {name}"))
}

/// A client of the raw endpoint (`/sessions/{id}/raw`).
pub type RawWs = WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

/// Reads raw terminal bytes into `seen` until they contain `needle`.
pub async fn raw_read_until(ws: &mut RawWs, needle: &str, seen: &mut Vec<u8>) {
    super::within(super::PATIENCE, needle, async {
        while !String::from_utf8_lossy(seen).contains(needle) {
            if let Message::Binary(b) = ws.next().await.unwrap().unwrap() {
                seen.extend_from_slice(&b);
            }
        }
    })
    .await
}
