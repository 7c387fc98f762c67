//! terminado (Jupyter's terminal server) as the echo benchmark's peer: a
//! Tornado server with one `cat` per WebSocket, started with python3 when
//! it has the package, and the same key-to-echo loop termesh gets.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

const SERVER: &str = r#"
import sys, tornado.web, tornado.ioloop
from terminado import TermSocket, UniqueTermManager
class Socket(TermSocket):
    def check_origin(self, origin):
        return True
manager = UniqueTermManager(shell_command=["sh", "-c", "stty raw -echo; exec cat"])
app = tornado.web.Application([(r"/websocket", Socket, {"term_manager": manager})])
server = app.listen(0, "127.0.0.1")
port = list(server._sockets.values())[0].getsockname()[1]
print(port, flush=True)
tornado.ioloop.IOLoop.current().start()
"#;

pub struct Server {
    child: Child,
    port: u16,
}

impl Server {
    /// Starts terminado, or `None` when python3 does not have it.
    pub fn start() -> Option<Server> {
        let mut child = Command::new("python3")
            .args(["-c", SERVER])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take()?)
            .read_line(&mut line)
            .ok()?;
        match line.trim().parse() {
            Ok(port) => Some(Server { child, port }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                None
            }
        }
    }

    /// p50 and p99 of a key sent as `["stdin", key]` until `["stdout", ..]`
    /// frames have brought it back, after 20 unmeasured keys.
    pub async fn echo(&self, samples: usize) -> (Duration, Duration) {
        let url = format!("ws://127.0.0.1:{}/websocket", self.port);
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        let mut times = Vec::with_capacity(samples);
        for i in 0..samples + 20 {
            let key = format!("<{i}>");
            let sent = Instant::now();
            let frame = serde_json::json!(["stdin", key]).to_string();
            ws.send(Message::text(frame)).await.unwrap();
            let mut seen = String::new();
            while !seen.contains(&key) {
                let Message::Text(text) = ws.next().await.unwrap().unwrap() else {
                    continue;
                };
                if let Ok(serde_json::Value::Array(parts)) = serde_json::from_str(&text) {
                    if parts.first().and_then(|p| p.as_str()) == Some("stdout") {
                        seen.push_str(parts.get(1).and_then(|p| p.as_str()).unwrap_or(""));
                    }
                }
            }
            if i >= 20 {
                times.push(sent.elapsed());
            }
        }
        let _ = ws.close(None).await;
        times.sort();
        (
            super::percentile(&times, 0.5),
            super::percentile(&times, 0.99),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
