//! The HTTP listening socket, with the kernel doing liveness: TCP keepalive
//! (30 s idle, 10 s interval, 3 probes) and TCP_USER_TIMEOUT 60 s, which
//! Linux copies to every accepted socket.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use anyhow::Context;
use socket2::{Domain, Protocol, Socket, TcpKeepalive, Type};

pub fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    let keepalive = TcpKeepalive::new()
        .with_time(Duration::from_secs(30))
        .with_interval(Duration::from_secs(10))
        .with_retries(3);
    socket.set_tcp_keepalive(&keepalive)?;
    socket.set_tcp_user_timeout(Some(Duration::from_secs(60)))?;
    socket.set_nodelay(true)?;
    socket
        .bind(&addr.into())
        .with_context(|| format!("cannot listen on {addr}"))?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}
