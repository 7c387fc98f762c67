//! A slow link for the benchmarks: a TCP relay on loopback that holds
//! every chunk for a fixed delay in each direction, as a long path does.
//! The delay is a propagation delay, not a bandwidth limit: a chunk read
//! while an earlier one waits is not held behind it, so a burst arrives
//! as a burst, `delay` later.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Chunks in flight each way on one connection (at most 16 KiB each): a
/// reader this far ahead of its writer waits for it, as a sender waits
/// on a full window, so a flood holds at most 4 MiB per direction.
const IN_FLIGHT: usize = 256;

pub struct Relay {
    /// Where to connect instead of the upstream.
    pub addr: SocketAddr,
    /// The relay's tasks run on a thread of their own, as the benchmark's
    /// thread blocks on PTYs; dropping it ends every connection.
    _rt: tokio::runtime::Runtime,
}

impl Relay {
    /// Listens on a loopback port; each connection to it is relayed to
    /// `upstream`, every chunk `delay` late in each direction.
    pub fn start(upstream: SocketAddr, delay: Duration) -> Relay {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the relay");
        let listener = rt
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind the relay");
        let addr = listener.local_addr().unwrap();
        rt.spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(up) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    // The delay is the relay's only one: no Nagle on top.
                    let _ = down.set_nodelay(true);
                    let _ = up.set_nodelay(true);
                    let (down_r, down_w) = down.into_split();
                    let (up_r, up_w) = up.into_split();
                    tokio::join!(carry(down_r, up_w, delay), carry(up_r, down_w, delay));
                });
            }
        });
        Relay { addr, _rt: rt }
    }
}

/// One direction: each chunk read is written `delay` after it was read;
/// an end of stream is passed on once the chunks before it are.
async fn carry(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(IN_FLIGHT);
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0
                || tx
                    .send((Instant::now() + delay, buf[..n].to_vec()))
                    .await
                    .is_err()
            {
                break;
            }
        }
    };
    let write = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}
