//! Who gave a session its size (docs/cli.md, "Sizes"): the subscribers
//! that sized it, most recent last, so that when the one holding the size
//! leaves, the session returns to the size of the most recent one left,
//! as tmux's `window-size latest` does. Pure logic; the session applies
//! the sizes it returns, and a mirror keeps one for its own viewers (what
//! they hold, it holds at the owner).

use crate::output::vocab::SubId;

pub type Size = (u16, u16);

/// What a subscriber's leaving does to the size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    /// It did not hold the size.
    Nothing,
    /// It held the size; nobody that sized the session is left.
    Nobody,
    /// It held the size: back to this one's, who holds it now.
    Back(Size),
}

#[derive(Debug, Default)]
pub struct SizeClaims {
    /// One entry per subscriber that sized the session, most recent last.
    claims: Vec<(SubId, Size)>,
    /// The subscriber whose size the session has now, if one gave it.
    holder: Option<SubId>,
    /// Claims whose resizes are on their way (each claim comes just
    /// before its resize), at most one per subscriber.
    pending: Vec<(SubId, Size)>,
}

impl SizeClaims {
    /// `sub` asks for `size`; the session has `current`.
    pub fn claim(&mut self, sub: SubId, size: Size, current: Size) {
        self.claims.retain(|(s, _)| *s != sub);
        self.claims.push((sub, size));
        self.pending.retain(|(s, _)| *s != sub);
        if size == current {
            self.holder = Some(sub);
        } else {
            self.pending.push((sub, size));
        }
    }

    /// The session took `size` (from a resize, claimed or not): the most
    /// recent claim on its way of that size holds it, else nobody. Every
    /// other claim of that size on its way has landed too (a session
    /// resized to the size it has already ignores the resize).
    pub fn resized(&mut self, size: Size) {
        let claimed = self.pending.iter().rposition(|(_, s)| *s == size);
        self.holder = claimed.map(|at| self.pending[at].0);
        self.pending.retain(|(_, s)| *s != size);
    }

    /// The size `leave` gave back is on its way, not applied yet (a
    /// mirror asks the owner for it): when it lands, its holder still
    /// holds it.
    pub fn giving_back(&mut self, size: Size) {
        if let Some(holder) = self.holder {
            self.pending.push((holder, size));
        }
    }

    /// `sub` left: the size to go back to when it held the size and a
    /// subscriber that sized the session is left (which then holds it).
    pub fn left(&mut self, sub: SubId) -> Option<Size> {
        match self.leave(sub) {
            Left::Back(size) => Some(size),
            Left::Nothing | Left::Nobody => None,
        }
    }

    /// `sub` left: what that does to the size. One whose resize is still
    /// on its way counts as the holder: that resize lands after it left
    /// (a mirror hears of it from the owner later), and nobody would then
    /// give the size back.
    pub fn leave(&mut self, sub: SubId) -> Left {
        self.claims.retain(|(s, _)| *s != sub);
        let on_its_way = self.pending.iter().any(|(s, _)| *s == sub);
        self.pending.retain(|(s, _)| *s != sub);
        if self.holder != Some(sub) && !on_its_way {
            return Left::Nothing;
        }
        self.holder = None;
        match self.claims.last() {
            Some(&(next, size)) => {
                self.holder = Some(next);
                Left::Back(size)
            }
            None => Left::Nobody,
        }
    }

    /// The size the most recent sizer asked for.
    pub fn latest(&self) -> Option<Size> {
        self.claims.last().map(|(_, size)| *size)
    }

    #[cfg(test)]
    fn holder(&self) -> Option<SubId> {
        self.holder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_to_size_holds_it_and_leaving_gives_it_back() {
        let mut c = SizeClaims::default();
        c.claim(1, (120, 40), (80, 24));
        c.resized((120, 40));
        assert_eq!(c.holder(), Some(1));
        c.claim(2, (40, 20), (120, 40));
        c.resized((40, 20));
        assert_eq!(c.holder(), Some(2));
        // The phone leaves: back to the desktop's size.
        assert_eq!(c.left(2), Some((120, 40)));
        assert_eq!(c.holder(), Some(1));
        // The last one leaves: nobody to go back to.
        assert_eq!(c.left(1), None);
        assert_eq!(c.holder(), None);
    }

    #[test]
    fn a_watcher_or_an_earlier_sizer_leaving_changes_nothing() {
        let mut c = SizeClaims::default();
        c.claim(1, (100, 30), (80, 24));
        c.resized((100, 30));
        c.claim(2, (60, 20), (100, 30));
        c.resized((60, 20));
        assert_eq!(c.left(7), None, "never sized it");
        assert_eq!(c.left(1), None, "did not hold it");
        assert_eq!(c.holder(), Some(2));
    }

    #[test]
    fn a_resize_nobody_here_claimed_has_no_holder_to_give_back() {
        let mut c = SizeClaims::default();
        c.claim(1, (100, 30), (80, 24));
        c.resized((100, 30));
        // REST, another node's viewer: no claim before it.
        c.resized((90, 25));
        assert_eq!(c.left(1), None);
    }

    #[test]
    fn two_claims_on_their_way_at_once_each_find_their_resize() {
        let mut c = SizeClaims::default();
        c.claim(1, (100, 30), (80, 24));
        c.claim(2, (60, 20), (80, 24));
        c.resized((100, 30));
        assert_eq!(c.holder(), Some(1));
        c.resized((60, 20));
        assert_eq!(c.holder(), Some(2));
        assert_eq!(c.left(2), Some((100, 30)));
    }

    #[test]
    fn a_sizer_that_leaves_before_its_resize_lands_gives_the_size_back() {
        let mut c = SizeClaims::default();
        c.claim(1, (90, 30), (80, 24));
        c.resized((90, 30));
        // 2's resize is on its way when 2 leaves: back to 1's size, which
        // lands after 2's.
        c.claim(2, (50, 25), (90, 30));
        assert_eq!(c.left(2), Some((90, 30)));
        assert_eq!(c.holder(), Some(1));
        // At a mirror both land later, 2's first: 1 holds its size again.
        c.giving_back((90, 30));
        c.resized((50, 25));
        assert_eq!(c.holder(), None);
        c.resized((90, 30));
        assert_eq!(c.holder(), Some(1));
        assert_eq!(c.leave(1), Left::Nobody);
        // The last one's on its way: nobody is left to give it to.
        c.claim(3, (70, 20), (90, 30));
        assert_eq!(c.leave(3), Left::Nobody);
    }

    #[test]
    fn claims_of_one_size_all_land_with_its_one_resize() {
        let mut c = SizeClaims::default();
        c.claim(1, (100, 30), (80, 24));
        c.claim(2, (100, 30), (80, 24));
        // The second resize to the size the session has is ignored.
        c.resized((100, 30));
        assert_eq!(c.holder(), Some(2));
        // Another node's viewer, REST: nobody here holds the size, and
        // 1 leaving, its claim long landed, changes nothing.
        c.resized((120, 40));
        assert_eq!(c.left(1), None);
        assert_eq!(c.holder(), None);
    }

    #[test]
    fn an_unclaimed_resize_to_an_older_sizers_size_is_nobodys() {
        let mut c = SizeClaims::default();
        c.claim(1, (100, 30), (80, 24));
        c.resized((100, 30));
        c.claim(2, (60, 20), (100, 30));
        c.resized((60, 20));
        // REST sets 1's size again: 1 leaving does not undo it.
        c.resized((100, 30));
        assert_eq!(c.left(1), None);
        assert_eq!(c.left(2), None);
    }

    #[test]
    fn claiming_the_size_the_session_has_holds_it_at_once() {
        let mut c = SizeClaims::default();
        c.claim(1, (100, 30), (80, 24));
        c.resized((100, 30));
        c.claim(2, (90, 25), (100, 30));
        c.resized((90, 25));
        // 1 types again: its size, which it asks for again.
        c.claim(1, (100, 30), (90, 25));
        c.resized((100, 30));
        assert_eq!(c.left(1), Some((90, 25)));
        c.claim(3, (90, 25), (90, 25));
        assert_eq!(c.holder(), Some(3));
    }
}
