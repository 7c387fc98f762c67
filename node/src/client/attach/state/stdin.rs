//! Where an attach's keys come from: a terminal, or a pipe or file whose
//! end may end the attach. Piped input never sends a size; once input
//! that had bytes has ended, the attach ends when they are sent. Input
//! that ends with no byte at all (`</dev/null`), or a read-only attach,
//! follows the session instead.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stdin {
    #[default]
    Terminal,
    /// From a pipe or a file; whether a byte came yet.
    Piped { typed: bool },
    /// Piped input that had bytes ended: done once they are sent.
    Ended,
    /// Piped input ended with none (or the attach is read-only): watch.
    Watching,
}

impl Stdin {
    pub fn is_piped(self) -> bool {
        self != Stdin::Terminal
    }

    /// Keys came.
    pub fn typed(&mut self, bytes: &[u8]) {
        if let Stdin::Piped { typed } = self {
            *typed |= !bytes.is_empty();
        }
    }

    /// Stdin reached its end.
    pub fn ended(&mut self, read_only: bool) {
        if let Stdin::Piped { typed } = *self {
            *self = if typed && !read_only {
                Stdin::Ended
            } else {
                Stdin::Watching
            };
        }
    }

    /// The attach is done, given whether input still waits to be sent.
    pub fn done(self, pending: bool) -> bool {
        self == Stdin::Ended && !pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piped_input_that_had_bytes_ends_the_attach_once_sent() {
        let mut s = Stdin::Piped { typed: false };
        s.typed(b"");
        s.typed(b"y\r");
        s.ended(false);
        assert!(!s.done(true), "not while input waits");
        assert!(s.done(false));
        assert!(s.is_piped());
    }

    #[test]
    fn empty_or_read_only_input_watches_and_a_terminal_never_ends() {
        let mut empty = Stdin::Piped { typed: false };
        empty.ended(false);
        assert_eq!(empty, Stdin::Watching);
        let mut read_only = Stdin::Piped { typed: true };
        read_only.ended(true);
        assert!(!read_only.done(false));
        let mut term = Stdin::Terminal;
        term.typed(b"x");
        term.ended(false);
        assert!(!term.done(false) && !term.is_piped());
    }
}
