//! TLS for the HTTP listener (REST, WebSocket, console) and for the
//! clients that reach it: rustls with the ring provider only, TLS 1.3 and
//! 1.2, ALPN `http/1.1`. The node serves the certificate chain and key
//! its config names (replaced by a reload: `HttpsCert`); a client trusts
//! the CA file it is given (`--ca`, e.g. a cluster's `ca.pem`), else the
//! public web roots.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;

use crate::peer::tls::{provider, TlsError};

fn file_err(path: &Path, reason: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Every certificate of a PEM file (a chain, or a CA bundle).
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(path, format!("cannot read certificates: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(file_err(path, "holds no certificate"));
    }
    Ok(certs)
}

/// The HTTPS listener's certificate and key, replaceable while it serves:
/// a reload takes new files (a CA rotation, a renewal) for the connections
/// made from then on.
#[derive(Debug)]
pub struct HttpsCert(std::sync::RwLock<Arc<CertifiedKey>>);

impl HttpsCert {
    /// Reads the chain in `cert` (leaf first) and the key in `key`.
    fn read(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
        let chain = certificates(cert)?;
        let key_der = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| file_err(key, format!("not a PEM private key: {e}")))?;
        let certified = CertifiedKey::from_der(chain, key_der, &provider()).map_err(|e| {
            file_err(
                cert,
                format!("the certificate and key do not go together: {e}"),
            )
        })?;
        Ok(Arc::new(certified))
    }

    /// Serves `cert` and `key` from now on (checked first: a bad pair
    /// leaves the one served).
    pub fn replace(&self, cert: &Path, key: &Path) -> Result<(), TlsError> {
        let next = Self::read(cert, key)?;
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = next;
        Ok(())
    }
}

impl ResolvesServerCert for HttpsCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

/// The server side: the chain in `cert` (leaf first) and the key in `key`,
/// and the handle that replaces them.
pub fn server_config(
    cert: &Path,
    key: &Path,
) -> Result<(rustls::ServerConfig, Arc<HttpsCert>), TlsError> {
    let served = Arc::new(HttpsCert(std::sync::RwLock::new(HttpsCert::read(
        cert, key,
    )?)));
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Setup(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(served.clone());
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((config, served))
}

/// The client side: trusts the certificates in `ca`, else the public web
/// roots.
pub fn client_config(ca: Option<&Path>) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in certificates(path)? {
                roots
                    .add(cert)
                    .map_err(|e| file_err(path, format!("not a usable CA certificate: {e}")))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Setup(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// `client_config` shared.
pub fn client(ca: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    client_config(ca).map(Arc::new)
}
