//! The QUIC endpoint of the peer mesh: rustls with the ring provider only,
//! TLS 1.3 only, ALPN `termesh/1`, a certificate required on both sides
//! and verified against the cluster CA as a *mesh* certificate: serverAuth
//! and clientAuth, and the node's mesh name (`mesh_name`), on the dialing
//! side (`MeshVerifier`) and the accepting side (`name_of`) alike. An
//! HTTPS certificate of the same CA has neither clientAuth nor a mesh
//! name, so it cannot stand in for a node.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{client::WebPkiServerVerifier, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The application protocol both sides must name.
pub const ALPN: &[u8] = b"termesh/1";

/// The suffix of every mesh name. `.invalid` is reserved (RFC 2606): no
/// public CA issues it and no host resolves it, and `cluster init` never
/// puts it in an HTTPS certificate.
pub const MESH_SUFFIX: &str = ".mesh.termesh.invalid";

/// The DNS name a node's mesh certificate carries: `NAME.mesh.termesh.invalid`.
pub fn mesh_name(node: &str) -> String {
    format!("{node}{MESH_SUFFIX}")
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {reason}")]
    File { path: String, reason: String },
    #[error("{0}")]
    Setup(String),
}

/// The cluster CAs this node trusts (one, or several while the CA is
/// rotated: a trust bundle), this node's certificate chain and key.
#[derive(Debug)]
pub struct Identity {
    pub cas: Vec<CertificateDer<'static>>,
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity {
            cas: self.cas.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl Identity {
    /// Reads the PEM files a node's config names.
    pub fn load(ca: &Path, cert: &Path, key: &Path) -> Result<Identity, TlsError> {
        let file_err = |path: &Path, reason: String| TlsError::File {
            path: path.display().to_string(),
            reason,
        };
        let cas = CertificateDer::pem_file_iter(ca)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| file_err(ca, format!("not PEM certificates: {e}")))?;
        if cas.is_empty() {
            return Err(file_err(ca, "holds no certificate".into()));
        }
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| file_err(cert, format!("not PEM certificates: {e}")))?;
        if chain.is_empty() {
            return Err(file_err(cert, "holds no certificate".into()));
        }
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| file_err(key, format!("not a PEM private key: {e}")))?;
        Ok(Identity { cas, chain, key })
    }

    /// The same from PEM text (certificates issued in memory).
    pub fn from_pem(ca: &str, cert: &str, key: &str) -> Result<Identity, TlsError> {
        let setup = |what: &str, e: rustls::pki_types::pem::Error| {
            TlsError::Setup(format!("{what}: not PEM: {e}"))
        };
        let cas = CertificateDer::pem_slice_iter(ca.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| setup("the CA", e))?;
        if cas.is_empty() {
            return Err(TlsError::Setup("the CA PEM holds none".into()));
        }
        let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| setup("the certificate", e))?;
        if chain.is_empty() {
            return Err(TlsError::Setup("the certificate PEM holds none".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| setup("the key", e))?;
        Ok(Identity { cas, chain, key })
    }

    fn roots(&self) -> Result<Arc<RootCertStore>, TlsError> {
        let mut roots = RootCertStore::empty();
        for ca in &self.cas {
            roots
                .add(ca.clone())
                .map_err(|e| TlsError::Setup(format!("a CA certificate: {e}")))?;
        }
        Ok(Arc::new(roots))
    }

    fn server_verifier(&self) -> Result<Arc<WebPkiServerVerifier>, TlsError> {
        WebPkiServerVerifier::builder_with_provider(self.roots()?, provider())
            .build()
            .map_err(|e| TlsError::Setup(e.to_string()))
    }

    fn client_verifier(&self) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
        WebPkiClientVerifier::builder_with_provider(self.roots()?, provider())
            .build()
            .map_err(|e| TlsError::Setup(e.to_string()))
    }

    /// The verifier of a peer's certificate as a mesh certificate.
    fn mesh_verifier(&self) -> Result<Arc<MeshVerifier>, TlsError> {
        Ok(Arc::new(MeshVerifier {
            server: self.server_verifier()?,
            client: self.client_verifier()?,
        }))
    }

    /// That this node's certificate chains to the CA, may serve and dial
    /// (serverAuth and clientAuth), is valid now and names `node` (its mesh
    /// name, or the plain name of a certificate from before mesh names).
    pub fn check_names(&self, node: &str) -> Result<NameForm, String> {
        let (end, rest) = self.chain.split_first().expect("checked non-empty");
        self.mesh_verifier()
            .map_err(|e| e.to_string())?
            .verify(end, rest, node, UnixTime::now())
            .map_err(|e| format!("not a mesh certificate of `{node}` under the cluster CA: {e}"))
    }

    /// Of `names`, the one a peer's verified certificate `chain` is a mesh
    /// certificate of (exactly one; none if it names none or several).
    pub fn name_of<'a>(
        &self,
        chain: &[CertificateDer<'static>],
        names: &[&'a str],
    ) -> Option<&'a str> {
        let (end, rest) = chain.split_first()?;
        let verifier = self.mesh_verifier().ok()?;
        let now = UnixTime::now();
        let mut found = names
            .iter()
            .filter(|n| verifier.verify(end, rest, n, now).is_ok());
        match (found.next(), found.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        }
    }

    fn server_config(&self) -> Result<quinn::ServerConfig, TlsError> {
        let mut tls = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_client_cert_verifier(self.client_verifier()?)
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| TlsError::Setup(format!("this node's certificate and key: {e}")))?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let crypto = QuicServerConfig::try_from(tls).map_err(|e| TlsError::Setup(e.to_string()))?;
        let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        config.transport_config(transport());
        Ok(config)
    }

    pub fn client_config(&self) -> Result<quinn::ClientConfig, TlsError> {
        let mut tls = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(self.mesh_verifier()?)
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| TlsError::Setup(format!("this node's certificate and key: {e}")))?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let crypto = QuicClientConfig::try_from(tls).map_err(|e| TlsError::Setup(e.to_string()))?;
        let mut config = quinn::ClientConfig::new(Arc::new(crypto));
        config.transport_config(transport());
        Ok(config)
    }

    /// The SHA-256 of this node's key (`cluster.nodes[].key_sha256`).
    pub fn key_sha256(&self) -> Option<String> {
        key_sha256(self.chain.first()?.as_ref())
    }

    /// When this node's certificate expires (unix seconds).
    pub fn not_after(&self) -> Option<i64> {
        let leaf = self.chain.first()?;
        let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
        Some(cert.validity().not_after.timestamp())
    }

    /// Makes `endpoint` accept with these certificates from now on
    /// (connections up are not touched); answers the client side, which
    /// each dial passes (`connect_with`: an endpoint's default is its
    /// handle's own).
    pub fn apply(&self, endpoint: &quinn::Endpoint) -> Result<quinn::ClientConfig, TlsError> {
        let client = self.client_config()?;
        endpoint.set_server_config(Some(self.server_config()?));
        Ok(client)
    }

    /// A QUIC endpoint on `addr` that accepts peers and dials them. Must
    /// be called inside a tokio runtime.
    pub fn endpoint(&self, addr: SocketAddr) -> Result<quinn::Endpoint, TlsError> {
        let cannot =
            |e: std::io::Error| TlsError::Setup(format!("cannot listen on {addr} (UDP): {e}"));
        let socket = udp_socket(addr).map_err(cannot)?;
        let runtime = quinn::default_runtime()
            .ok_or_else(|| TlsError::Setup("no async runtime for the QUIC endpoint".into()))?;
        let mut config = quinn::EndpointConfig::default();
        // MAX_DATAGRAM lies within QUIC's 1,200-65,527 (asserted where it
        // is defined).
        config
            .max_udp_payload_size(MAX_DATAGRAM)
            .expect("within QUIC's bounds");
        let mut endpoint =
            quinn::Endpoint::new(config, Some(self.server_config()?), socket, runtime)
                .map_err(cannot)?;
        endpoint.set_default_client_config(self.client_config()?);
        Ok(endpoint)
    }
}

/// Socket buffers the mesh asks for (the kernel caps them at
/// `net.core.rmem_max` / `wmem_max`): a window of output arrives in a
/// burst, and a datagram the socket has no room for is lost and sent again.
const UDP_BUFFER: usize = 4 << 20;

fn udp_socket(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    let _ = socket.set_recv_buffer_size(UDP_BUFFER);
    let _ = socket.set_send_buffer_size(UDP_BUFFER);
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// The ring provider, the only one the mesh uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Incoming unidirectional streams a peer may have open at once: its two
/// data streams (bulk and fast) and the replies it writes at once
/// (`REPLY_STREAMS`), and one to spare for a reply whose end is still on
/// its way.
pub const MAX_PEER_UNI_STREAMS: usize = super::REPLY_STREAMS + 3;

/// The largest UDP payload the mesh accepts, and the top of its path MTU
/// search. quinn's defaults stop the search at 1,452 bytes and make each
/// endpoint refuse more than 1,472, so a link whose path carries larger
/// datagrams (loopback, a LAN's 9,000-byte jumbo frames) paid QUIC's
/// per-packet work (packet building, header protection, acks, loss
/// bookkeeping) for every 1.4 KB of a flood. The top is not QUIC's 65,527:
/// quinn hands the kernel up to `GSO_BATCH` datagrams in one send, and
/// Linux refuses a send of more than 64 KiB (65,507 bytes of UDP payload
/// over IPv4) whole, so larger datagrams would lose every full batch. The
/// search starts from QUIC's 1,200 and keeps what the path carries; a
/// probe larger than the path is lost (or refused by the sending host) and
/// costs only itself (docs/benchmarks.md, issue 32, nineteenth stop).
pub const MAX_DATAGRAM: u16 = 6_500;

/// The most datagrams quinn 0.11 puts in one send (its private
/// `MAX_TRANSMIT_SEGMENTS`). Should a later quinn send more, whole batches
/// would be lost: `node/tests/mirror.rs` fails on the bytes its flood then
/// takes over the link.
const GSO_BATCH: usize = 10;

const _: () = assert!(GSO_BATCH * MAX_DATAGRAM as usize <= 65_507);
const _: () = assert!(MAX_DATAGRAM >= 1_200 && MAX_DATAGRAM <= 65_527);

/// QUIC keeps the link alive itself (its pings cost the application
/// nothing). Its idle timeout is only a backstop: the peer breaker, which
/// discounts this node's own stalls, decides first that a peer is gone.
/// A peer may open the streams the mesh uses and no more: one control
/// stream, its data streams and its reply streams (so what one peer's
/// unfinished frames can hold is bounded: `MAX_PEER_UNI_STREAMS` frames).
fn transport() -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(1u32.into());
    t.max_concurrent_uni_streams((MAX_PEER_UNI_STREAMS as u32).into());
    t.keep_alive_interval(Some(Duration::from_secs(2)));
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(MAX_DATAGRAM);
    t.mtu_discovery_config(Some(mtu));
    t.max_idle_timeout(Some(
        Duration::from_secs(60)
            .try_into()
            .expect("60 s is a valid idle timeout"),
    ));
    Arc::new(t)
}

/// Which name a mesh certificate was found valid for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameForm {
    /// `NAME.mesh.termesh.invalid`, as `cluster init` issues now.
    Mesh,
    /// The plain node name, as `cluster init` issued before mesh names;
    /// still accepted when the certificate carries both serverAuth and
    /// clientAuth (no HTTPS certificate from `cluster init` does).
    Legacy,
}

/// Verifies a peer's certificate as a mesh certificate of a node: it
/// chains to the cluster CA, carries serverAuth *and* clientAuth, and is
/// valid for the node's mesh name (or, for certificates from before mesh
/// names, its plain name). The dialer uses it with the name dialed, which
/// is a node name; the acceptor through `Identity::name_of`.
#[derive(Debug)]
struct MeshVerifier {
    server: Arc<WebPkiServerVerifier>,
    client: Arc<dyn ClientCertVerifier>,
}

impl MeshVerifier {
    fn verify(
        &self,
        end: &CertificateDer<'_>,
        rest: &[CertificateDer<'_>],
        node: &str,
        now: UnixTime,
    ) -> Result<NameForm, rustls::Error> {
        if node.ends_with(MESH_SUFFIX) {
            // A node name never holds a dot; this would be a mesh name's
            // mesh name, or a wrong call: refuse rather than guess.
            return Err(rustls::Error::General(format!(
                "`{node}` is not a node name"
            )));
        }
        // clientAuth: no HTTPS certificate from `cluster init` carries it.
        self.client.verify_client_cert(end, rest, now)?;
        let server = |name: String| {
            let name = ServerName::try_from(name).map_err(|_| {
                rustls::Error::General(format!("`{node}` cannot be a certificate name"))
            })?;
            self.server.verify_server_cert(end, rest, &name, &[], now)
        };
        match server(mesh_name(node)) {
            Ok(_) => Ok(NameForm::Mesh),
            Err(mesh_err) => match server(node.to_string()) {
                Ok(_) => Ok(NameForm::Legacy),
                Err(_) => Err(mesh_err),
            },
        }
    }
}

impl ServerCertVerifier for MeshVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ServerName::DnsName(node) = server_name else {
            return Err(rustls::Error::General(
                "a peer is dialed by its node name".into(),
            ));
        };
        self.verify(end_entity, intermediates, node.as_ref(), now)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.server.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.server.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.server.supported_verify_schemes()
    }
}

/// The certificate chain a connected peer presented (verified by rustls).
pub fn peer_chain(conn: &quinn::Connection) -> Option<Vec<CertificateDer<'static>>> {
    conn.peer_identity()?
        .downcast::<Vec<CertificateDer<'static>>>()
        .ok()
        .map(|b| *b)
}

/// The SHA-256 of a certificate's SubjectPublicKeyInfo (DER), lowercase
/// hex: what `cluster.nodes[].key_sha256` pins. `None` for DER that is not
/// a certificate.
pub fn key_sha256(cert_der: &[u8]) -> Option<String> {
    use sha2::Digest;
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der).ok()?;
    Some(hex::encode(sha2::Sha256::digest(cert.public_key().raw)))
}

/// The SubjectPublicKeyInfo (DER) of the first certificate in PEM text.
pub fn spki_of_pem(pem: &str) -> Option<Vec<u8>> {
    let der = CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()?
        .ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    Some(cert.public_key().raw.to_vec())
}

/// The same, of the first certificate in PEM text.
pub fn key_sha256_of_pem(pem: &str) -> Option<String> {
    let der = CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()?
        .ok()?;
    key_sha256(der.as_ref())
}
