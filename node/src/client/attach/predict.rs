//! Predictive local echo (`attach --predict`), after mosh: while the link's
//! round trip is over 30 ms, printable keys typed where the program echoes
//! (not on its alternate screen) are drawn at once, underlined, at the
//! cursor. Output whose seq is newer than the key's that shows the same
//! character in that cell confirms a guess; one not confirmed in time (a
//! password prompt, a program that does not echo) is taken back with every
//! later one, and guesses stay hidden until an echo confirms one again.

use std::time::{Duration, Instant};

/// Below this round trip the echo is quick enough: no guesses.
const MIN_RTT: Duration = Duration::from_millis(30);
/// Guesses kept at most (a fast typist on a slow link).
const MAX_GUESSES: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guess {
    pub row: usize,
    pub col: usize,
    pub ch: char,
    /// The newest seq shown when the key was typed.
    after_seq: u64,
    at: Instant,
}

#[derive(Debug, Default)]
pub struct Predictor {
    enabled: bool,
    /// The link's smoothed round trip.
    srtt: Option<Duration>,
    guesses: Vec<Guess>,
    /// A guess was taken back: the next ones are made but not shown until
    /// an echo confirms one (mosh's tentative state).
    doubtful: bool,
    /// A key that moves the cursor in ways not guessed (Enter, arrows,
    /// backspace) was typed at this seq: no guesses until newer output.
    paused: Option<u64>,
}

impl Predictor {
    pub fn new(enabled: bool) -> Predictor {
        Predictor {
            enabled,
            ..Predictor::default()
        }
    }

    /// A measured round trip (ping to pong).
    pub fn rtt(&mut self, sample: Duration) {
        self.srtt = Some(match self.srtt {
            Some(s) => (s * 7 + sample) / 8,
            None => sample,
        });
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn active(&self) -> bool {
        self.enabled && self.srtt.is_some_and(|r| r > MIN_RTT)
    }

    /// How long a guess may wait for its echo.
    fn patience(&self) -> Duration {
        self.srtt.unwrap_or(MIN_RTT) * 2 + Duration::from_millis(250)
    }

    /// Keys typed while the cursor is at `cursor` (row, col) of a screen
    /// `cols` wide and the stream at `seq`. Anything but printable ASCII
    /// ends the guessing until the echo catches up.
    pub fn typed(
        &mut self,
        keys: &[u8],
        cursor: (usize, usize),
        cols: usize,
        alt_screen: bool,
        seq: u64,
    ) {
        if !self.active() || alt_screen {
            self.guesses.clear();
            return;
        }
        let now = Instant::now();
        for &b in keys {
            // Backspace over a guess takes the guess back.
            if matches!(b, 0x7f | 0x08) && self.paused.is_none() && self.guesses.pop().is_some() {
                continue;
            }
            if !(0x20..0x7f).contains(&b) {
                self.guesses.clear();
                self.paused = Some(seq);
                continue;
            }
            if self.paused.is_some() {
                continue;
            }
            let (row, col) = match self.guesses.last() {
                Some(g) => (g.row, g.col + 1),
                None => cursor,
            };
            if col >= cols || self.guesses.len() >= MAX_GUESSES {
                continue;
            }
            self.guesses.push(Guess {
                row,
                col,
                ch: char::from(b),
                after_seq: seq,
                at: now,
            });
        }
    }

    /// After output (the stream at `seq`, the screen's character at a
    /// cell from `cell`) and on every tick: confirms what the echo shows,
    /// takes back what waited too long. True when something changed.
    pub fn check(&mut self, seq: u64, cell: impl Fn(usize, usize) -> Option<char>) -> bool {
        let before = self.guesses.len();
        if self.paused.is_some_and(|at| seq > at) {
            // A new line (or wherever the key took the cursor): guesses
            // there are shown once one is confirmed (a password prompt
            // may follow).
            self.paused = None;
            self.doubtful = true;
        }
        if let Some(last) = self
            .guesses
            .iter()
            .rposition(|g| seq > g.after_seq && cell(g.row, g.col) == Some(g.ch))
        {
            // Confirmed, and everything typed before it.
            self.guesses.drain(..=last);
            self.doubtful = false;
        }
        let patience = self.patience();
        if self
            .guesses
            .first()
            .is_some_and(|g| g.at.elapsed() > patience)
        {
            self.guesses.clear();
            self.doubtful = true;
        }
        self.guesses.len() != before
    }

    /// The guesses to draw, in order; none while in doubt.
    pub fn shown(&self) -> &[Guess] {
        if self.doubtful {
            &[]
        } else {
            &self.guesses
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slow() -> Predictor {
        let mut p = Predictor::new(true);
        p.rtt(Duration::from_millis(200));
        p
    }

    #[test]
    fn only_on_a_slow_link_and_off_the_alternate_screen() {
        let mut p = Predictor::new(true);
        p.typed(b"ls", (0, 2), 80, false, 5);
        assert!(p.shown().is_empty(), "no round trip measured yet");
        p.rtt(Duration::from_millis(5));
        p.typed(b"ls", (0, 2), 80, false, 5);
        assert!(p.shown().is_empty(), "a fast link");
        let mut p = slow();
        p.typed(b"ls", (0, 2), 80, true, 5);
        assert!(p.shown().is_empty(), "vim and the like");
        p.typed(b"ls", (0, 2), 80, false, 5);
        let at: Vec<_> = p.shown().iter().map(|g| (g.row, g.col, g.ch)).collect();
        assert_eq!(at, [(0, 2, 'l'), (0, 3, 's')]);
    }

    #[test]
    fn the_echo_confirms_by_seq() {
        let mut p = slow();
        p.typed(b"ab", (3, 2), 80, false, 10);
        // The same characters already on screen at seq 10 confirm nothing.
        assert!(!p.check(10, |_, _| Some('a')));
        assert_eq!(p.shown().len(), 2);
        // Output 11 echoes the first.
        let screen = |r: usize, c: usize| Some(if (r, c) == (3, 2) { 'a' } else { ' ' });
        assert!(p.check(11, screen));
        assert_eq!(p.shown().len(), 1);
        assert_eq!(p.shown()[0].ch, 'b');
    }

    #[test]
    fn a_key_that_is_not_echoed_is_taken_back_and_later_ones_stay_hidden() {
        let mut p = slow();
        p.typed(b"secret", (0, 10), 80, false, 1);
        assert_eq!(p.shown().len(), 6);
        // Pretend they were typed long ago.
        for g in &mut p.guesses {
            g.at -= Duration::from_secs(5);
        }
        assert!(p.check(2, |_, _| Some(' ')));
        assert!(p.shown().is_empty());
        p.typed(b"x", (0, 10), 80, false, 2);
        assert!(p.shown().is_empty(), "in doubt");
        assert!(p.check(3, |_, c| Some(if c == 10 { 'x' } else { ' ' })));
        p.typed(b"y", (0, 11), 80, false, 3);
        assert_eq!(p.shown().len(), 1, "trusted again");
    }

    #[test]
    fn backspace_takes_back_the_last_guess() {
        let mut p = slow();
        p.typed(b"abc\x7f", (0, 0), 80, false, 1);
        assert_eq!(p.shown().iter().map(|g| g.ch).collect::<String>(), "ab");
        p.typed(b"d", (0, 0), 80, false, 1);
        assert_eq!(p.shown().last().map(|g| (g.col, g.ch)), Some((2, 'd')));
        // With nothing guessed, backspace is not guessed.
        p.typed(b"\x7f\x7f\x7f\x7f", (0, 0), 80, false, 1);
        p.typed(b"e", (0, 0), 80, false, 1);
        assert!(p.shown().is_empty());
    }

    #[test]
    fn control_keys_end_the_guessing_and_the_right_edge_stops_it() {
        let mut p = slow();
        p.typed(b"ab\rc", (0, 0), 80, false, 1);
        assert!(
            p.shown().is_empty(),
            "after Enter the cursor is not guessed"
        );
        // Newer output: guessing goes on from the screen's cursor, shown
        // once the echo confirms a guess on the new line.
        p.check(2, |_, _| Some(' '));
        p.typed(b"de", (1, 2), 80, false, 2);
        assert!(p.shown().is_empty(), "in doubt on a new line");
        p.check(3, |r, c| Some(if (r, c) == (1, 2) { 'd' } else { ' ' }));
        assert_eq!(
            p.shown().iter().map(|g| (g.row, g.ch)).collect::<Vec<_>>(),
            [(1, 'e')]
        );
        let mut p = slow();
        p.typed(b"abc", (0, 78), 80, false, 1);
        assert_eq!(p.shown().len(), 2);
    }
}
