//! The request-head deadline (`http.request_head_timeout`), timed by the
//! client's slowness and never by the node's. actix's own head timer counts
//! from the connection's first poll and is looked at before the socket is
//! read, so a node that stalled after that poll (SIGSTOP, a starved worker,
//! a stale date clock) answered 408 to a head that had arrived in time.
//!
//! Here each connection gets a watch: at the deadline, a connection whose
//! request has not started is refused only if nothing it sent waits unread
//! in its socket; unread bytes mean the node is behind, not the client, so
//! the watch looks again a little later. The watch holds a duplicate of the
//! socket only until the request starts or the connection ends.

use std::any::Any;
use std::cell::Cell;
use std::io::Write;
use std::net::Shutdown;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use actix_web::dev::Extensions;
use actix_web::rt::net::TcpStream;
use tokio::sync::oneshot;

/// How soon a watch looks again while the node has the client's bytes
/// unread.
const RECHECK: Duration = Duration::from_millis(100);

/// The answer to a head that did not come in time (plain HTTP only: on TLS
/// the bytes would be garbage, so the connection is only closed).
const REFUSAL: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// Kept in the connection's data; the first request takes it, which ends
/// the watch (and so does the connection's end, which drops it).
pub struct HeadWatch(Cell<Option<oneshot::Sender<()>>>);

impl HeadWatch {
    /// A request on this connection has started: its head came.
    pub fn taken(&self) {
        if let Some(done) = self.0.take() {
            let _ = done.send(());
        }
    }
}

/// Called for each accepted connection (`HttpServer::on_connect`): sets
/// TCP_NODELAY (keystrokes and acks must not wait for Nagle) and starts the
/// connection's head watch.
pub fn on_connect(io: &dyn Any, data: &mut Extensions, timeout: Duration) {
    type Tls = actix_tls::accept::rustls_0_23::TlsStream<TcpStream>;
    let (tcp, plain) = if let Some(tcp) = io.downcast_ref::<TcpStream>() {
        (tcp, true)
    } else if let Some(tls) = io.downcast_ref::<Tls>() {
        (tls.get_ref().0, false)
    } else {
        tracing::warn!("a connection of an unknown kind: no head deadline");
        return;
    };
    let _ = tcp.set_nodelay(true);
    let Some(socket) = duplicate(tcp.as_fd()) else {
        // Out of descriptors: the connection is refused now, not later.
        let _ = socket2::SockRef::from(tcp).shutdown(Shutdown::Both);
        return;
    };
    let (done, taken) = oneshot::channel();
    data.insert(HeadWatch(Cell::new(Some(done))));
    actix_web::rt::spawn(watch(socket, taken, timeout, plain));
}

fn duplicate(fd: BorrowedFd<'_>) -> Option<socket2::Socket> {
    match fd.try_clone_to_owned() {
        Ok(owned) => Some(socket2::Socket::from(owned)),
        Err(e) => {
            tracing::warn!("cannot watch a connection's head: {e}");
            None
        }
    }
}

async fn watch(
    socket: socket2::Socket,
    mut taken: oneshot::Receiver<()>,
    timeout: Duration,
    plain: bool,
) {
    let mut wait = timeout;
    loop {
        tokio::select! {
            // Biased: when the head came and the deadline passed in one
            // stall, the head wins (a request already started is never
            // refused).
            biased;
            // The head came, or the connection ended.
            _ = &mut taken => return,
            _ = tokio::time::sleep(wait) => {}
        }
        if unread(&socket) > 0 {
            wait = RECHECK;
            continue;
        }
        tracing::debug!("a request head did not come in {timeout:?}: closed");
        if plain {
            // The socket is non-blocking (shared with the server's copy);
            // a refusal that does not fit is not worth waiting for.
            let _ = (&socket).write(REFUSAL);
        }
        // The server's reader sees the end and drops the connection.
        let _ = socket.shutdown(Shutdown::Both);
        return;
    }
}

/// Bytes the client sent that the node has not read yet.
fn unread(socket: &socket2::Socket) -> usize {
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    // MSG_DONTWAIT: an empty queue answers at once (EAGAIN).
    socket
        .recv_with_flags(&mut buf, libc::MSG_PEEK | libc::MSG_DONTWAIT)
        .unwrap_or(0)
}
