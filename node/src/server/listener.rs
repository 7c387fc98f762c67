//! The HTTP listening socket, with the kernel doing liveness: TCP keepalive
//! and TCP_USER_TIMEOUT (config `[http]`), which Linux copies to every
//! accepted socket. A client that stops reading (zero window) or vanishes is
//! closed by the kernel after the user timeout; no timer of ours decides.

use std::net::TcpListener;

use anyhow::Context;
use socket2::{Domain, Protocol, Socket, TcpKeepalive, Type};
use termesh_config::HttpConfig;

pub fn bind(http: &HttpConfig) -> anyhow::Result<TcpListener> {
    let addr = http.listen;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    let keepalive = TcpKeepalive::new()
        .with_time(http.keepalive_idle)
        .with_interval(http.keepalive_interval)
        .with_retries(http.keepalive_probes);
    socket.set_tcp_keepalive(&keepalive)?;
    socket.set_tcp_user_timeout(Some(http.user_timeout))?;
    socket.set_nodelay(true)?;
    socket
        .bind(&addr.into())
        .with_context(|| format!("cannot listen on {addr}"))?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// What the node sets on its listener is what an accepted socket has.
    #[test]
    fn accepted_sockets_inherit_keepalive_and_user_timeout() {
        let mut http = termesh_config::Config::default().http;
        http.listen = "127.0.0.1:0".parse().unwrap();
        http.keepalive_idle = Duration::from_secs(31);
        http.keepalive_interval = Duration::from_secs(11);
        http.keepalive_probes = 4;
        http.user_timeout = Duration::from_millis(7500);
        let listener = bind(&http).unwrap();
        listener.set_nonblocking(false).unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let s = Socket::from(accepted);
        assert!(s.keepalive().unwrap());
        assert_eq!(s.keepalive_time().unwrap(), Duration::from_secs(31));
        assert_eq!(s.keepalive_interval().unwrap(), Duration::from_secs(11));
        assert_eq!(s.keepalive_retries().unwrap(), 4);
        assert_eq!(
            s.tcp_user_timeout().unwrap(),
            Some(Duration::from_millis(7500))
        );
    }
}
