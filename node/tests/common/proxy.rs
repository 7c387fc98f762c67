//! A loopback TCP proxy whose live connections a test can cut, to drop a
//! client's link without the client's cooperation.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Proxy {
    pub addr: SocketAddr,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let tracked = conns.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let Ok(mut outbound) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let task = tokio::spawn(async move {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
                tracked.lock().unwrap().push(task);
            }
        });
        Proxy {
            addr,
            conns,
            accept,
        }
    }

    /// Drops every live connection (both sockets close).
    pub fn cut(&self) -> usize {
        let mut conns = self.conns.lock().unwrap();
        let n = conns.iter().filter(|t| !t.is_finished()).count();
        for task in conns.drain(..) {
            task.abort();
        }
        n
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
