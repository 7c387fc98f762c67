//! The node's access tokens, replaceable while it runs (a reload): every
//! request reads the current set; a generation number lets an open
//! connection notice a change and check its own token again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use termesh_config::TokenEntry;

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

#[cfg(test)]
mod tests {
    use super::*;
    use termesh_config::{hash_token, parse_token_hash, Role};

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
}
