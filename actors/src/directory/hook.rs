//! Hook keys: the secret in a session's `TERMESH_HOOK_URL` that lets the
//! program inside report its lifecycle without a token. A key is
//! HMAC-SHA256(node secret, session id), so a request's key is checked
//! before anything is looked up (no existence oracle) and in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The node's hook secret (random per node start).
#[derive(Clone)]
pub struct HookSecret([u8; 32]);

impl std::fmt::Debug for HookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookSecret(..)")
    }
}

impl HookSecret {
    pub fn new(bytes: [u8; 32]) -> Self {
        HookSecret(bytes)
    }

    /// A fresh random secret.
    pub fn random() -> Self {
        let mut bytes = [0u8; 32];
        bytes[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        bytes[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        HookSecret(bytes)
    }

    /// The key for `session`, hex.
    pub fn key(&self, session: &str) -> String {
        hex::encode(self.mac(session))
    }

    /// Whether `presented` is the key of `session`, in constant time.
    pub fn verify(&self, session: &str, presented: &str) -> bool {
        let Ok(bytes) = hex::decode(presented) else {
            return false;
        };
        bytes.ct_eq(&self.mac(session)).into()
    }

    fn mac(&self, session: &str) -> [u8; 32] {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(session.as_bytes());
        mac.finalize().into_bytes().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_verify_only_for_their_session_and_secret() {
        let secret = HookSecret::new([7; 32]);
        let key = secret.key("abc");
        assert_eq!(key.len(), 64);
        assert!(secret.verify("abc", &key));
        assert!(!secret.verify("abd", &key));
        assert!(!secret.verify("abc", &key[..62]));
        assert!(!secret.verify("abc", "not hex"));
        assert!(!HookSecret::new([8; 32]).verify("abc", &key));
    }
}
