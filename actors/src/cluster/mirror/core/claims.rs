//! The mirror in the size policy (docs/cli.md, "Sizes"): it keeps which
//! of this node's viewers sized the session and stands for them at the
//! owner (`Ask::ClaimSize`, the peer's `claim_size`).

use super::{Ask, MirrorCore};
use crate::output::publisher::Sink;
use crate::session::sizes::Left;
use crate::session::SubId;

impl<S: Sink> MirrorCore<S> {
    /// A viewer here is about to resize the session (its resize goes to
    /// the owner as a request): the mirror claims that size at the owner.
    pub fn claim_size(&mut self, sub: SubId, size: (u16, u16)) {
        if !self
            .publisher
            .as_ref()
            .is_some_and(|p| p.is_subscribed(sub))
        {
            return;
        }
        self.claims.claim(sub, size, self.size);
        self.ask_size(Some(size), false);
    }

    /// A viewer here left: its holder leaving gives the size to the next
    /// sizer here (applied at the owner); any other change of what this
    /// node stands for is told (none left: the owner gives the size back).
    pub(super) fn sizer_left(&mut self, sub: SubId) {
        let before = self.claims.latest();
        match self.claims.leave(sub) {
            Left::Back(size) => {
                self.claims.giving_back(size);
                self.ask_size(Some(size), true);
            }
            _ if self.claims.latest() != before => self.ask_size(self.claims.latest(), false),
            _ => {}
        }
    }

    /// The owner ended the last subscription with the link, and with it
    /// this node's claim: claimed again, not applied.
    pub(super) fn claim_again(&mut self) {
        if let Some(size) = self.claims.latest() {
            self.ask_size(Some(size), false);
        }
    }

    fn ask_size(&mut self, size: Option<(u16, u16)>, apply: bool) {
        self.asks.push(Ask::ClaimSize { size, apply });
    }
}
