//! Cheap terminal state tracked inline as output flows: the modes avt's
//! `dump()` does not restore (bracketed paste, mouse, focus, keypad, the
//! keyboard protocols modifyOtherKeys and kitty's, the cursor style), the
//! alternate-screen flag, the window title and whether the program sits at
//! a shell prompt. A byte-at-a-time scanner that jumps between ESC bytes,
//! with every buffer bounded.

/// Longest CSI parameter string or OSC payload kept; longer ones are dropped.
const MAX_SEQ: usize = 512;
/// Bytes of the last output line kept for the prompt check.
const TAIL: usize = 256;
/// DEC private modes restored after a dump, in the order they are re-sent.
pub const RESTORED_MODES: &[u16] = &[1000, 1002, 1003, 1004, 1005, 1006, 1015, 2004];
/// Entries of kitty's keyboard-flags stack kept (kitty keeps as many).
const KITTY_STACK: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ground,
    Esc,
    Csi,
    Osc,
    OscEsc,
}

#[derive(Debug, Clone)]
pub struct ModeTracker {
    state: State,
    seq: Vec<u8>,
    /// Set DEC private modes among `RESTORED_MODES`, as a bit per entry.
    modes: u16,
    alt_screen: bool,
    app_keypad: bool,
    /// xterm's modifyOtherKeys level (`CSI > 4 ; n m`).
    other_keys: u8,
    /// kitty's keyboard flags, a stack (`CSI > f u` pushes, `CSI < n u`
    /// pops, `CSI = f ; m u` changes the top); empty means 0.
    kitty: Vec<u32>,
    /// DECSCUSR's cursor style (`CSI n SP q`), 0 the terminal's default.
    cursor_style: u8,
    /// Bells rung (BEL outside an escape sequence), wrapping.
    bells: u64,
    title: Option<String>,
    /// The end of the output with trailing CR/LF kept; see `at_prompt`.
    tail: Vec<u8>,
}

impl Default for ModeTracker {
    fn default() -> Self {
        ModeTracker {
            state: State::Ground,
            seq: Vec::new(),
            modes: 0,
            alt_screen: false,
            app_keypad: false,
            other_keys: 0,
            kitty: Vec::new(),
            cursor_style: 0,
            bells: 0,
            title: None,
            tail: Vec::with_capacity(TAIL),
        }
    }
}

impl ModeTracker {
    pub fn feed(&mut self, data: &[u8]) {
        self.remember_tail(data);
        let mut i = 0;
        while i < data.len() {
            if self.state == State::Ground {
                match memchr::memchr2(0x1b, 0x07, &data[i..]) {
                    Some(at) if data[i + at] == 0x07 => {
                        i += at + 1;
                        self.bells = self.bells.wrapping_add(1);
                    }
                    Some(at) => {
                        i += at + 1;
                        self.state = State::Esc;
                    }
                    None => return,
                }
                continue;
            }
            self.step(data[i]);
            i += 1;
        }
    }

    fn step(&mut self, byte: u8) {
        match self.state {
            State::Ground => {}
            State::Esc => {
                self.seq.clear();
                self.state = match byte {
                    b'[' => State::Csi,
                    b']' => State::Osc,
                    b'=' => {
                        self.app_keypad = true;
                        State::Ground
                    }
                    b'>' => {
                        self.app_keypad = false;
                        State::Ground
                    }
                    b'c' => {
                        *self = ModeTracker {
                            tail: std::mem::take(&mut self.tail),
                            bells: self.bells,
                            ..ModeTracker::default()
                        };
                        State::Ground
                    }
                    0x1b => State::Esc,
                    _ => State::Ground,
                };
            }
            State::Csi => match byte {
                0x40..=0x7e => {
                    self.csi(byte);
                    self.state = State::Ground;
                }
                0x1b => self.state = State::Esc,
                _ => self.push_seq(byte),
            },
            State::Osc => match byte {
                0x07 => {
                    self.osc();
                    self.state = State::Ground;
                }
                0x1b => self.state = State::OscEsc,
                _ => self.push_seq(byte),
            },
            State::OscEsc => {
                if byte == b'\\' {
                    self.osc();
                    self.state = State::Ground;
                } else {
                    self.state = State::Esc;
                    self.step(byte);
                }
            }
        }
    }

    fn push_seq(&mut self, byte: u8) {
        if self.seq.len() < MAX_SEQ {
            self.seq.push(byte);
        }
    }

    fn csi(&mut self, final_byte: u8) {
        match (self.seq.first(), final_byte) {
            (Some(b'>'), b'm') => return self.modify_other_keys(),
            (Some(b'>' | b'<' | b'='), b'u') => return self.kitty_keys(),
            (_, b'q') if self.seq.last() == Some(&b' ') => {
                let n = &self.seq[..self.seq.len() - 1];
                self.cursor_style = number(n).unwrap_or(0).min(6) as u8;
                return;
            }
            _ => {}
        }
        let on = match final_byte {
            b'h' => true,
            b'l' => false,
            _ => return,
        };
        let Some(params) = self.seq.strip_prefix(b"?") else {
            return;
        };
        for param in params.split(|b| *b == b';') {
            let Some(mode) = std::str::from_utf8(param)
                .ok()
                .and_then(|p| p.parse::<u16>().ok())
            else {
                continue;
            };
            match mode {
                47 | 1047 | 1049 => self.alt_screen = on,
                _ => {
                    if let Some(bit) = RESTORED_MODES.iter().position(|m| *m == mode) {
                        if on {
                            self.modes |= 1 << bit;
                        } else {
                            self.modes &= !(1 << bit);
                        }
                    }
                }
            }
        }
    }

    /// `CSI > 4 ; n m` sets the level, `CSI > 4 m` resets it.
    fn modify_other_keys(&mut self) {
        let mut params = self.seq[1..].split(|b| *b == b';');
        if params.next().and_then(number) == Some(4) {
            self.other_keys = params.next().and_then(number).unwrap_or(0).min(3) as u8;
        }
    }

    fn kitty_keys(&mut self) {
        let mut params = self.seq[1..].split(|b| *b == b';');
        let first = params.next().and_then(number);
        match self.seq[0] {
            b'>' => {
                if self.kitty.len() == KITTY_STACK {
                    self.kitty.remove(0);
                }
                self.kitty.push(first.unwrap_or(0));
            }
            b'<' => {
                let n = first.unwrap_or(1).max(1) as usize;
                self.kitty.truncate(self.kitty.len().saturating_sub(n));
            }
            _ => {
                let flags = first.unwrap_or(0);
                let top = self.kitty.last().copied().unwrap_or(0);
                let new = match params.next().and_then(number).unwrap_or(1) {
                    2 => top | flags,
                    3 => top & !flags,
                    _ => flags,
                };
                match self.kitty.last_mut() {
                    Some(top) => *top = new,
                    None => self.kitty.push(new),
                }
            }
        }
    }

    fn osc(&mut self) {
        let text = String::from_utf8_lossy(&self.seq);
        if let Some((kind, title)) = text.split_once(';') {
            if kind == "0" || kind == "2" {
                self.title = Some(title.to_string());
            }
        }
    }

    fn remember_tail(&mut self, data: &[u8]) {
        let keep = &data[data.len().saturating_sub(TAIL)..];
        let overflow = (self.tail.len() + keep.len()).saturating_sub(TAIL);
        self.tail.drain(..overflow);
        self.tail.extend_from_slice(keep);
    }

    pub fn alt_screen(&self) -> bool {
        self.alt_screen
    }

    /// Application keypad (DECKPAM).
    pub fn app_keypad(&self) -> bool {
        self.app_keypad
    }

    /// modifyOtherKeys' level, 0 off.
    pub fn other_keys(&self) -> u8 {
        self.other_keys
    }

    /// kitty's keyboard flags in effect (0: the legacy encoding).
    pub fn kitty_flags(&self) -> u32 {
        self.kitty.last().copied().unwrap_or(0)
    }

    /// How many bells the program rang (wrapping): a display rings the
    /// terminal's bell when this moves.
    pub fn bells(&self) -> u64 {
        self.bells
    }

    /// DECSCUSR's cursor style, 0 the default.
    pub fn cursor_style(&self) -> u8 {
        self.cursor_style
    }

    pub fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }

    pub fn mode(&self, mode: u16) -> bool {
        RESTORED_MODES
            .iter()
            .position(|m| *m == mode)
            .is_some_and(|bit| self.modes & (1 << bit) != 0)
    }

    /// The last output line, trailing CR/LF removed, ends in `$ `, `# `,
    /// `% ` or `> ` (PROTOCOL.md `SessionInfo.at_prompt`).
    pub fn at_prompt(&self) -> bool {
        let mut end = self.tail.len();
        while end > 0 && matches!(self.tail[end - 1], b'\r' | b'\n') {
            end -= 1;
        }
        let line = &self.tail[..end];
        [b"$ ", b"# ", b"% ", b"> "]
            .iter()
            .any(|p| line.ends_with(*p))
    }

    /// Escape sequences that set, on a fresh terminal, what avt's dump omits.
    pub fn restore_sequence(&self) -> String {
        let mut out = String::new();
        for (bit, mode) in RESTORED_MODES.iter().enumerate() {
            if self.modes & (1 << bit) != 0 {
                out.push_str(&format!("\x1b[?{mode}h"));
            }
        }
        if self.app_keypad {
            out.push_str("\x1b=");
        }
        if self.other_keys != 0 {
            out.push_str(&format!("\x1b[>4;{}m", self.other_keys));
        }
        if self.kitty_flags() != 0 {
            out.push_str(&format!("\x1b[>{}u", self.kitty_flags()));
        }
        if self.cursor_style != 0 {
            out.push_str(&format!("\x1b[{} q", self.cursor_style));
        }
        if let Some(title) = &self.title {
            let clean: String = title.chars().filter(|c| !c.is_control()).collect();
            out.push_str(&format!("\x1b]2;{clean}\x07"));
        }
        out
    }
}

/// A decimal CSI parameter (bounded: longer ones are not numbers).
fn number(param: &[u8]) -> Option<u32> {
    if param.is_empty() || param.len() > 9 {
        return None;
    }
    std::str::from_utf8(param).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn tracks_modes_across_split_frames() {
        let mut m = ModeTracker::default();
        m.feed(b"hello \x1b[?10");
        m.feed(b"49h\x1b[?2004h\x1b[?1000;1006h");
        assert!(m.alt_screen());
        assert!(m.mode(2004) && m.mode(1000) && m.mode(1006));
        m.feed(b"\x1b[?1000l\x1b[?1049l");
        assert!(!m.alt_screen() && !m.mode(1000) && m.mode(2004));
        assert_eq!(m.restore_sequence(), "\x1b[?1006h\x1b[?2004h");
    }

    #[test]
    fn title_keypad_and_reset() {
        let mut m = ModeTracker::default();
        m.feed(b"\x1b]0;my title\x07\x1b=");
        assert_eq!(m.title(), Some("my title"));
        m.feed(b"\x1b]2;other\x1b\\");
        assert_eq!(m.title(), Some("other"));
        assert!(m.restore_sequence().contains("\x1b="));
        m.feed(b"\x1bc");
        assert_eq!(m.title(), None);
        assert_eq!(m.restore_sequence(), "");
    }

    #[test]
    fn keyboard_protocols_and_cursor_style() {
        let mut m = ModeTracker::default();
        m.feed(b"\x1b[>4;2m\x1b[>1u\x1b[>3u\x1b[6 q");
        assert_eq!(
            (m.other_keys(), m.kitty_flags(), m.cursor_style()),
            (2, 3, 6)
        );
        assert_eq!(m.restore_sequence(), "\x1b[>4;2m\x1b[>3u\x1b[6 q");
        m.feed(b"\x1b[<u");
        assert_eq!(m.kitty_flags(), 1);
        m.feed(b"\x1b[=8;2u");
        assert_eq!(m.kitty_flags(), 9);
        m.feed(b"\x1b[<5u\x1b[>4m\x1b[0 q");
        assert_eq!(
            (m.other_keys(), m.kitty_flags(), m.cursor_style()),
            (0, 0, 0)
        );
        assert_eq!(m.restore_sequence(), "");
        // The stack is bounded.
        for _ in 0..100 {
            m.feed(b"\x1b[>1u");
        }
        assert_eq!(m.kitty.len(), KITTY_STACK);
    }

    #[test]
    fn bells_outside_escape_sequences_are_counted() {
        let mut m = ModeTracker::default();
        m.feed(b"done\x07 \x1b]2;title\x07\x07");
        assert_eq!(m.bells(), 2, "the OSC's terminator is not a bell");
    }

    #[test]
    fn prompt_detection() {
        let mut m = ModeTracker::default();
        m.feed(b"output\r\n\x1b[32muser@host\x1b[0m:~$ ");
        assert!(m.at_prompt());
        m.feed(b"ls\r\n");
        assert!(!m.at_prompt());
        m.feed(b"root# \r\n");
        assert!(m.at_prompt(), "trailing CR/LF is removed first");
        m.feed(&[b'x'; 1000]);
        assert!(!m.at_prompt());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_keep_bounds(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..700), 0..20)) {
            let mut m = ModeTracker::default();
            for c in &chunks {
                m.feed(c);
                prop_assert!(m.seq.len() <= MAX_SEQ && m.tail.len() <= TAIL);
            }
        }

        #[test]
        fn split_point_does_not_matter(data in proptest::collection::vec(prop_oneof![Just(0x1bu8), Just(b'['), Just(b'?'), Just(b'h'), Just(b'l'), Just(b'2'), Just(b'0'), Just(b'4'), Just(b'1'), Just(b';'), any::<u8>()], 0..200), cut in 0usize..200) {
            let cut = cut.min(data.len());
            let mut whole = ModeTracker::default();
            whole.feed(&data);
            let mut split = ModeTracker::default();
            split.feed(&data[..cut]);
            split.feed(&data[cut..]);
            prop_assert_eq!(whole.restore_sequence(), split.restore_sequence());
            prop_assert_eq!(whole.alt_screen(), split.alt_screen());
        }
    }
}
