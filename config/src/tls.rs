//! `http.tls_cert` / `http.tls_key`: the HTTP listener serves HTTPS (and
//! WSS) with this certificate chain and key. Both or neither; relative
//! paths are relative to the config file; at load, both files must exist.

use std::path::{Path, PathBuf};

use crate::ConfigError;

/// The PEM files of the HTTP listener's certificate chain and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub(crate) fn parse(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    file: &str,
) -> Result<Option<TlsFiles>, ConfigError> {
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => Ok(Some(TlsFiles { cert, key })),
        (cert, _) => {
            let (set, missing) = if cert.is_some() {
                ("http.tls_cert", "http.tls_key")
            } else {
                ("http.tls_key", "http.tls_cert")
            };
            Err(ConfigError::Value {
                file: file.to_string(),
                key: missing.into(),
                value: "(missing)".into(),
                reason: format!("{set} is set: HTTPS needs both the certificate and the key"),
            })
        }
    }
}

impl TlsFiles {
    pub(crate) fn resolve(&mut self, base: &Path) {
        for p in [&mut self.cert, &mut self.key] {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }

    pub(crate) fn check(&self, file: &str) -> Result<(), ConfigError> {
        for (key, path) in [("http.tls_cert", &self.cert), ("http.tls_key", &self.key)] {
            if !path.is_file() {
                return Err(ConfigError::Value {
                    file: file.to_string(),
                    key: key.into(),
                    value: format!("{:?}", path.display().to_string()),
                    reason: "no such file".into(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_or_neither() {
        assert_eq!(parse(None, None, "f").unwrap(), None);
        let both = parse(Some("c.pem".into()), Some("k.pem".into()), "f").unwrap();
        assert!(both.is_some());
        let e = parse(Some("c.pem".into()), None, "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("http.tls_key") && e.contains("both"), "{e}");
    }
}
