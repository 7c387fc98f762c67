//! The node's access tokens, replaceable while it runs (a reload): every
//! request reads the current set; a generation number lets an open
//! connection notice a change and check its own token again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use termesh_config::{Role, TokenEntry};

#[derive(Clone, Default)]
pub struct Tokens {
    current: Arc<RwLock<Arc<Vec<TokenEntry>>>>,
    generation: Arc<AtomicU64>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} entries)", self.current().len())
    }
}

impl Tokens {
    pub fn new(entries: Vec<TokenEntry>) -> Tokens {
        Tokens {
            current: Arc::new(RwLock::new(Arc::new(entries))),
            generation: Arc::default(),
        }
    }

    /// The tokens now (a snapshot; cheap to take).
    pub fn current(&self) -> Arc<Vec<TokenEntry>> {
        self.current
            .read()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Replaces the set; connections check their token again.
    pub fn replace(&self, entries: Vec<TokenEntry>) {
        let mut guard = self.current.write().unwrap_or_else(|p| p.into_inner());
        *guard = Arc::new(entries);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Changes with every `replace`.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

/// What an open connection keeps to follow its token across reloads: the
/// digest of the token it presented and the generation it last checked.
#[derive(Debug, Clone)]
pub struct HeldToken {
    digest: Option<[u8; 32]>,
    seen: u64,
}

/// What a reload means for a held token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recheck {
    /// Nothing changed (or the connection presented no token).
    Same,
    /// The token now gives this role.
    Role(Role),
    /// The token is gone: close the connection (4401).
    Revoked,
}

impl HeldToken {
    pub fn new(tokens: &Tokens, digest: Option<[u8; 32]>) -> HeldToken {
        HeldToken {
            digest,
            seen: tokens.generation(),
        }
    }

    /// A token presented later (the `auth` message).
    pub fn set(&mut self, tokens: &Tokens, digest: [u8; 32]) {
        *self = HeldToken::new(tokens, Some(digest));
    }

    /// Checks the token again when the node's tokens changed since the last
    /// check; cheap otherwise (one atomic load).
    pub fn recheck(&mut self, tokens: &Tokens) -> Recheck {
        let now = tokens.generation();
        if now == self.seen {
            return Recheck::Same;
        }
        self.seen = now;
        let Some(digest) = self.digest else {
            return Recheck::Same;
        };
        match termesh_config::verify_digest(&tokens.current(), &digest) {
            Some(role) => Recheck::Role(role),
            None => Recheck::Revoked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use termesh_config::{hash_token, parse_token_hash};

    fn entry(token: &str, role: Role) -> TokenEntry {
        TokenEntry {
            name: None,
            hash: parse_token_hash(&hash_token(token)).unwrap(),
            role,
        }
    }

    #[test]
    fn a_replaced_set_is_seen_and_counted() {
        let tokens = Tokens::new(vec![entry("aaaaaaaaaaaaaaaa", Role::Admin)]);
        let seen = tokens.generation();
        let before = tokens.current();
        tokens.replace(vec![entry("bbbbbbbbbbbbbbbb", Role::Viewer)]);
        assert_ne!(tokens.generation(), seen);
        assert_eq!(
            termesh_config::verify(&before, "aaaaaaaaaaaaaaaa"),
            Some(Role::Admin)
        );
        let now = tokens.current();
        assert_eq!(termesh_config::verify(&now, "aaaaaaaaaaaaaaaa"), None);
        assert_eq!(
            termesh_config::verify(&now, "bbbbbbbbbbbbbbbb"),
            Some(Role::Viewer)
        );
    }

    #[test]
    fn a_held_token_follows_reloads() {
        let (a, b) = ("aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb");
        let tokens = Tokens::new(vec![entry(a, Role::Admin)]);
        let mut held = HeldToken::new(&tokens, Some(termesh_config::digest(a)));
        let mut open = HeldToken::new(&tokens, None);
        assert_eq!(held.recheck(&tokens), Recheck::Same);
        tokens.replace(vec![entry(a, Role::Viewer), entry(b, Role::Admin)]);
        assert_eq!(held.recheck(&tokens), Recheck::Role(Role::Viewer));
        assert_eq!(
            held.recheck(&tokens),
            Recheck::Same,
            "checked once per change"
        );
        tokens.replace(vec![entry(b, Role::Admin)]);
        assert_eq!(held.recheck(&tokens), Recheck::Revoked);
        assert_eq!(open.recheck(&tokens), Recheck::Same, "no token presented");
    }
}
