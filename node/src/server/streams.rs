//! Long-lived streams (WebSockets, event streams, exports, logs) per
//! source address: at most `http.max_connections_per_address` open at once
//! from one address, so one host cannot take the node's connections. Each
//! stream's response body holds a permit for as long as it runs.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use actix_web::HttpRequest;
use futures_util::Stream;
use termesh_actors::error::ApiError;
use termesh_transport::ErrorCode;

/// The streams open per source address.
#[derive(Clone, Debug)]
pub struct Streams {
    per_address: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Streams {
    pub fn new(per_address: usize) -> Streams {
        Streams {
            per_address,
            open: Arc::default(),
        }
    }

    /// A permit for one more stream from `req`'s peer, or `unavailable`
    /// naming the bound.
    pub fn admit(&self, req: &HttpRequest) -> Result<Permit, ApiError> {
        let Some(ip) = req.peer_addr().map(|a| host_of(a.ip())) else {
            // Not a socket with an address (a test's in-memory request).
            return Ok(Permit(None));
        };
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(ip).or_default();
        if *count >= self.per_address {
            tracing::warn!(%ip, open = *count, "stream refused: too many from one address");
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                format!(
                    "{count} WebSockets and streams are open from {ip}, the most one address \
                     may have (http.max_connections_per_address); close one and try again"
                ),
            ));
        }
        *count += 1;
        Ok(Permit(Some((self.clone(), ip))))
    }

    /// Streams open from `ip` now.
    pub fn open_from(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&ip).copied().unwrap_or(0)
    }

    fn release(&self, ip: IpAddr) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&ip);
            }
        }
    }
}

/// The address that counts as one host: an IPv4 address, or an IPv6
/// address's /64 (one host is usually given a whole /64).
fn host_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(std::net::Ipv6Addr::from(bits))
        }
    }
}

/// One open stream's place; given back when dropped.
#[derive(Debug)]
pub struct Permit(Option<(Streams, IpAddr)>);

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some((streams, ip)) = self.0.take() {
            streams.release(ip);
        }
    }
}

impl Permit {
    /// `body`, holding this permit until it ends or is dropped.
    pub fn hold<S: Stream>(self, body: S) -> Held<S> {
        Held {
            body: Box::pin(body),
            _permit: self,
        }
    }
}

/// A response body holding its stream's permit.
pub struct Held<S> {
    body: Pin<Box<S>>,
    _permit: Permit,
}

impl<S: Stream> Stream for Held<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        self.body.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    #[test]
    fn an_address_gets_its_bound_and_others_are_unaffected() {
        let streams = Streams::new(2);
        let from = |ip: &str| {
            TestRequest::default()
                .peer_addr(format!("{ip}:5000").parse().unwrap())
                .to_http_request()
        };
        let a = streams.admit(&from("10.0.0.1")).unwrap();
        let b = streams.admit(&from("10.0.0.1")).unwrap();
        let err = streams.admit(&from("10.0.0.1")).unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable);
        assert!(err.message.contains("max_connections_per_address"));
        let _other = streams.admit(&from("10.0.0.2")).unwrap();
        drop(a);
        let _c = streams.admit(&from("10.0.0.1")).unwrap();
        drop(b);
        assert_eq!(streams.open_from("10.0.0.1".parse().unwrap()), 1);
        // One IPv6 host is its /64.
        let v6 = Streams::new(1);
        let _x = v6.admit(&from("[2001:db8::1]")).unwrap();
        assert!(v6.admit(&from("[2001:db8::ffff]")).is_err());
        assert!(v6.admit(&from("[2001:db8:0:1::1]")).is_ok());
    }
}
