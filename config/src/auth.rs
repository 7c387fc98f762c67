//! Access tokens: roles, hashed storage and constant-time verification.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What a token may do (PROTOCOL.md section 2). Ordered: a higher role may
/// do everything a lower one may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Viewer,
    Operator,
    Admin,
}

impl Role {
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "viewer" => Some(Role::Viewer),
            "operator" => Some(Role::Operator),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

/// A configured token: only the SHA-256 of the secret is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenEntry {
    pub name: Option<String>,
    pub hash: [u8; 32],
    pub role: Role,
}

/// The text form stored in config files: `sha256:<64 hex digits>`.
pub fn hash_token(token: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(token.as_bytes())))
}

/// Parses the `sha256:<hex>` form.
pub fn parse_token_hash(text: &str) -> Result<[u8; 32], String> {
    let hex_part = text.strip_prefix("sha256:").ok_or_else(|| {
        format!("`{text}` must start with `sha256:` (make one with `termesh token`)")
    })?;
    let bytes =
        hex::decode(hex_part).map_err(|_| format!("`{text}` is not hex after `sha256:`"))?;
    bytes
        .try_into()
        .map_err(|_| format!("`{text}` must hold 64 hex digits after `sha256:`"))
}

/// Finds the role of a presented token, comparing every configured hash in
/// constant time so the answer's timing does not depend on which one matched.
pub fn verify(tokens: &[TokenEntry], presented: &str) -> Option<Role> {
    verify_digest(tokens, &digest(presented))
}

/// The SHA-256 of a presented token: what a connection keeps to check its
/// token again after a reload, without keeping the token.
pub fn digest(presented: &str) -> [u8; 32] {
    Sha256::digest(presented.as_bytes()).into()
}

/// `verify` for a token already digested.
pub fn verify_digest(tokens: &[TokenEntry], digest: &[u8; 32]) -> Option<Role> {
    let mut found = None;
    for entry in tokens {
        if bool::from(entry.hash.ct_eq(digest.as_slice())) {
            found = Some(found.map_or(entry.role, |r: Role| r.max(entry.role)));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_round_trip_and_verify() {
        let stored = hash_token("s3cret");
        let entry = TokenEntry {
            name: None,
            hash: parse_token_hash(&stored).unwrap(),
            role: Role::Operator,
        };
        assert_eq!(
            verify(std::slice::from_ref(&entry), "s3cret"),
            Some(Role::Operator)
        );
        assert_eq!(verify(&[entry], "s3cret!"), None);
    }

    #[test]
    fn bad_hashes_are_explained() {
        assert!(parse_token_hash("abc").unwrap_err().contains("sha256:"));
        assert!(parse_token_hash("sha256:zz").unwrap_err().contains("hex"));
        assert!(parse_token_hash("sha256:abcd").unwrap_err().contains("64"));
    }

    #[test]
    fn roles_are_ordered() {
        assert!(Role::Admin > Role::Operator && Role::Operator > Role::Viewer);
        assert_eq!(Role::parse("operator"), Some(Role::Operator));
        assert_eq!(Role::parse("root"), None);
    }
}
