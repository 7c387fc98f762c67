//! The bounds and types of the requests that drive agents (PROTOCOL.md
//! section 15, and `grep`: docs/protocol.md section 16): `send`, `wait`,
//! `read` and `grep`.

use serde::{Deserialize, Serialize};

/// Most bytes of text one `send` types (a long paste; under the frame
/// bound of a client message and of a forwarded request).
pub const MAX_SEND: usize = 512 * 1024;

/// A `wait`'s `timeout_ms` by default, and at most.
pub const WAIT_DEFAULT_MS: u64 = 30_000;
pub const WAIT_MAX_MS: u64 = 3_600_000;

/// One line of stored output that matched a `grep`, with its context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrepHit {
    pub session: String,
    pub node: String,
    /// The frame the line ended in.
    pub seq: u64,
    pub line: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub before: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
}

impl GrepHit {
    /// Its size in a reply, about.
    pub fn reply_bytes(&self) -> usize {
        let lines = self.before.iter().chain(&self.after).map(|l| l.len() + 8);
        48 + self.session.len() + self.node.len() + self.line.len() + lines.sum::<usize>()
    }
}

/// `grep`: hits at most (and by default), lines of context at most, time
/// limit by default and at most (a node's part is a forwarded request,
/// answered within the forward's bound).
pub const GREP_MAX_HITS: u32 = 10_000;
pub const GREP_DEFAULT_HITS: u32 = 1_000;
pub const GREP_MAX_CONTEXT: u32 = 10;
pub const GREP_DEFAULT_MS: u64 = 5_000;
pub const GREP_MAX_MS: u64 = 6_000;
