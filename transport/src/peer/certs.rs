//! Issuing the cluster's certificates (rcgen): a CA; per node a mesh
//! certificate whose SAN is the node's mesh name (`NAME.mesh.termesh.invalid`),
//! good for serving and dialing (serverAuth + clientAuth); and HTTPS
//! certificates, serverAuth only and never with a mesh name, so they
//! cannot stand in for a node on the mesh. `termesh cluster init` uses
//! this, `cluster add-node` with the CA it wrote (`Ca::load`); so do the
//! tests, for other CAs and wrong names.

use std::time::{SystemTime, UNIX_EPOCH};

use super::tls::{mesh_name, MESH_SUFFIX};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// How long issued certificates are valid, in years from now (roughly).
pub const VALID_YEARS: i32 = 10;

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error(transparent)]
    Rcgen(#[from] rcgen::Error),
    #[error("`{0}` is a mesh name: an HTTPS certificate may not carry it")]
    MeshName(String),
    #[error("the CA key is not the key of the CA certificate (they are of two different CAs)")]
    KeyMismatch,
    #[error("the CA certificate is not a PEM certificate")]
    NotACertificate,
}

/// A certificate and its private key, PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ca")
    }
}

impl Ca {
    /// A new CA for the cluster `id`.
    pub fn new(id: &str) -> Result<Ca, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("termesh cluster {id} CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params);
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Ca { cert, key })
    }

    /// The CA `cluster init` wrote (its certificate and key, PEM), to
    /// issue more certificates from it (`cluster add-node`).
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Ca, CertError> {
        let key = KeyPair::from_pem(key_pem)?;
        // A key of another CA would sign certificates nobody verifies: a
        // rotation retried after a half-written folder must not go on.
        if super::tls::spki_of_pem(cert_pem).ok_or(CertError::NotACertificate)?
            != key.public_key_der()
        {
            return Err(CertError::KeyMismatch);
        }
        let params = CertificateParams::from_ca_cert_pem(cert_pem)?;
        // The same subject and key: what it signs chains to the file's
        // certificate (verification checks the issuer's name and key).
        let cert = params.self_signed(&key)?;
        Ok(Ca { cert, key })
    }

    /// `next`'s certificate signed by this CA (a cross-signed
    /// intermediate, PEM): a node whose certificate `next` issued sends it
    /// after its own, so a node that trusts only this CA still verifies it
    /// while the CA is rotated.
    pub fn cross_sign(&self, next: &Ca) -> Result<String, rcgen::Error> {
        let cert = next
            .cert
            .params()
            .clone()
            .signed_by(&next.key, &self.cert, &self.key)?;
        Ok(cert.pem())
    }

    pub fn pem(&self) -> Issued {
        Issued {
            cert_pem: self.cert.pem(),
            key_pem: self.key.serialize_pem(),
        }
    }

    /// The mesh certificate of the node `name`, signed by this CA.
    pub fn issue(&self, name: &str) -> Result<Issued, CertError> {
        self.issue_node(name, mesh_name(name))
    }

    /// A node certificate as `cluster init` issued them before mesh names
    /// (SAN = the plain name): for tests that an older cluster still links.
    #[doc(hidden)]
    pub fn issue_legacy(&self, name: &str) -> Result<Issued, CertError> {
        self.issue_node(name, name.to_string())
    }

    fn issue_node(&self, name: &str, san: String) -> Result<Issued, CertError> {
        Ok(self.sign(node_params(name, san)?, KeyPair::generate()?)?)
    }

    /// A node certificate for the key it has (`key_pem`): a CA rotation
    /// keeps every node's key, so the keys the configs pin stay true.
    pub fn issue_for_key(&self, name: &str, key_pem: &str) -> Result<Issued, CertError> {
        let key = KeyPair::from_pem(key_pem)?;
        Ok(self.sign(node_params(name, mesh_name(name))?, key)?)
    }
}

impl Ca {
    /// A certificate for a node's HTTPS listener: serverAuth only, valid
    /// for `names` (host names and IP addresses clients use; never a mesh
    /// name), signed by this CA.
    pub fn issue_http(&self, names: &[String]) -> Result<Issued, CertError> {
        if let Some(mesh) = names
            .iter()
            .find(|n| n.to_ascii_lowercase().ends_with(MESH_SUFFIX))
        {
            return Err(CertError::MeshName(mesh.clone()));
        }
        let mut params = CertificateParams::new(names.to_vec())?;
        if let Some(first) = names.first() {
            params.distinguished_name.push(DnType::CommonName, first);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        Ok(self.sign(params, KeyPair::generate()?)?)
    }
}

impl Ca {
    /// A leaf for `params` (a signature key only), signed by this CA.
    fn sign(&self, mut params: CertificateParams, key: KeyPair) -> Result<Issued, rcgen::Error> {
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        validity(&mut params);
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

fn node_params(name: &str, san: String) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(vec![san])?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    Ok(params)
}

fn validity(params: &mut CertificateParams) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Whole years are enough; from the start of last year, so a clock a
    // little behind (or this rough year count) is never before it.
    let year = 1970 + (secs / 31_556_952) as i32;
    params.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
    params.not_after = rcgen::date_time_ymd(year + VALID_YEARS, 1, 1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_loads_only_with_its_own_key() {
        let (one, two) = (Ca::new("c1").unwrap().pem(), Ca::new("c2").unwrap().pem());
        assert!(Ca::load(&one.cert_pem, &one.key_pem).is_ok());
        assert!(matches!(
            Ca::load(&one.cert_pem, &two.key_pem),
            Err(CertError::KeyMismatch)
        ));
        assert!(matches!(
            Ca::load("not pem", &one.key_pem),
            Err(CertError::NotACertificate)
        ));
    }
}
