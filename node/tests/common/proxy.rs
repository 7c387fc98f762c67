//! A loopback TCP proxy a test controls, to break a client's link without
//! the client's cooperation: cut live connections, refuse new ones
//! (accept and close at once, counting them), stall live ones (bytes
//! held, sockets open), or delay every chunk each way (a slow link).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

#[derive(Default)]
struct Control {
    refuse: AtomicBool,
    stall: AtomicBool,
    accepted: AtomicUsize,
    /// Milliseconds each chunk is held, each way.
    delay_ms: AtomicU64,
}

pub struct Proxy {
    pub addr: SocketAddr,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    control: Arc<Control>,
    accept: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let control = Arc::new(Control::default());
        let (tracked, ctl) = (conns.clone(), control.clone());
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                ctl.accepted.fetch_add(1, Ordering::SeqCst);
                if ctl.refuse.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let Ok(outbound) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                let (c1, c2) = (ctl.clone(), ctl.clone());
                let task = tokio::spawn(async move {
                    tokio::select! {
                        _ = pump(ri, wo, c1) => {}
                        _ = pump(ro, wi, c2) => {}
                    }
                });
                tracked.lock().unwrap().push(task);
            }
        });
        Proxy {
            addr,
            conns,
            control,
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

    /// New connections are accepted and closed at once (`true`), or
    /// forwarded again (`false`).
    pub fn refuse(&self, on: bool) {
        self.control.refuse.store(on, Ordering::SeqCst);
    }

    /// Live connections stop moving bytes either way (`true`), sockets open.
    pub fn stall(&self, on: bool) {
        self.control.stall.store(on, Ordering::SeqCst);
    }

    /// Every chunk is held this long before it is passed on, each way.
    pub fn delay(&self, delay: std::time::Duration) {
        self.control
            .delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Connections accepted so far, refused ones included.
    pub fn accepted(&self) -> usize {
        self.control.accepted.load(Ordering::SeqCst)
    }
}

/// Copies one direction; while stalled, what was read is held.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    control: Arc<Control>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    let stalled_at_start = control.stall.load(Ordering::SeqCst);
    loop {
        let Ok(n) = from.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        let delay = control.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
        }
        // A connection made during a stall is not stalled (the client's
        // reconnect must get through); older ones hold their bytes.
        while control.stall.load(Ordering::SeqCst) && !stalled_at_start {
            super::poll_pause().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
