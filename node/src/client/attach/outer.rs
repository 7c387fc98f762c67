//! The outer terminal's modes: which of the program's modes (mouse, focus,
//! bracketed paste, keypad, cursor keys, modifyOtherKeys, kitty keyboard
//! flags, cursor style, title) are applied to it, the bytes that change
//! them, and the way in and out: the title pushed with `CSI 22 t` and the
//! alternate screen on the way in; on the way out every mode applied is
//! turned off again, the kitty flags popped and the title popped, so the
//! terminal is left as it was found.

use termesh_actors::session::modes::{ModeTracker, RESTORED_MODES};

/// The mouse modes the scroll mode turns on for the wheel.
const SCROLL_MOUSE: &[u16] = &[1000, 1006];

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Modes {
    /// DEC private modes on, among `RESTORED_MODES` (mouse, focus, paste).
    pub dec: Vec<u16>,
    pub cursor_keys: bool,
    pub keypad: bool,
    pub other_keys: u8,
    pub kitty: u32,
    pub cursor_style: u8,
    pub title: String,
}

impl Modes {
    /// What the program asked for, as `tracker` and the model saw it;
    /// `title` is what the outer terminal's title should say.
    pub fn of_program(tracker: &ModeTracker, cursor_keys: bool, title: String) -> Modes {
        Modes {
            dec: RESTORED_MODES
                .iter()
                .copied()
                .filter(|m| tracker.mode(*m))
                .collect(),
            cursor_keys,
            keypad: tracker.app_keypad(),
            other_keys: tracker.other_keys(),
            kitty: tracker.kitty_flags(),
            cursor_style: tracker.cursor_style(),
            title,
        }
    }

    /// These modes with the mouse reported to the attach (SGR encoding).
    pub fn with_mouse(mut self) -> Modes {
        for m in SCROLL_MOUSE {
            if !self.dec.contains(m) {
                self.dec.push(*m);
            }
        }
        self
    }

    /// The scroll mode's: the wheel reported (SGR encoding), keys plain.
    pub fn scrolling(title: String) -> Modes {
        Modes {
            dec: SCROLL_MOUSE.to_vec(),
            title,
            ..Modes::default()
        }
    }
}

#[derive(Debug, Default)]
pub struct Outer {
    applied: Modes,
    /// kitty flags pushed by this client (one entry at most).
    kitty_pushed: bool,
    entered: bool,
}

impl Outer {
    pub fn entered(&self) -> bool {
        self.entered
    }

    /// Saves the title and takes the alternate screen (the first frame
    /// clears it).
    pub fn enter(&mut self, out: &mut Vec<u8>) {
        if std::mem::replace(&mut self.entered, true) {
            return;
        }
        out.extend_from_slice(b"\x1b[22;0t\x1b[?1049h");
    }

    /// Applies `want`, writing only what differs from what is applied.
    pub fn sync(&mut self, want: &Modes, out: &mut Vec<u8>) {
        let have = &self.applied;
        let mut s = String::new();
        for m in have.dec.iter().filter(|m| !want.dec.contains(m)) {
            s.push_str(&format!("\x1b[?{m}l"));
        }
        for m in want.dec.iter().filter(|m| !have.dec.contains(m)) {
            s.push_str(&format!("\x1b[?{m}h"));
        }
        if want.cursor_keys != have.cursor_keys {
            s.push_str(if want.cursor_keys {
                "\x1b[?1h"
            } else {
                "\x1b[?1l"
            });
        }
        if want.keypad != have.keypad {
            s.push_str(if want.keypad { "\x1b=" } else { "\x1b>" });
        }
        if want.other_keys != have.other_keys {
            s.push_str(&format!("\x1b[>4;{}m", want.other_keys));
        }
        if want.kitty != have.kitty {
            if self.kitty_pushed {
                s.push_str(&format!("\x1b[={};1u", want.kitty));
            } else {
                s.push_str(&format!("\x1b[>{}u", want.kitty));
                self.kitty_pushed = true;
            }
        }
        if want.cursor_style != have.cursor_style {
            s.push_str(&format!("\x1b[{} q", want.cursor_style));
        }
        if want.title != have.title {
            let clean: String = want.title.chars().filter(|c| !c.is_control()).collect();
            s.push_str(&format!("\x1b]2;{clean}\x07"));
        }
        out.extend_from_slice(s.as_bytes());
        self.applied = want.clone();
    }

    /// Turns off every mode applied, pops what was pushed, leaves the
    /// alternate screen and shows the cursor in the default pen.
    pub fn leave(&mut self, out: &mut Vec<u8>) {
        if !std::mem::replace(&mut self.entered, false) {
            return;
        }
        let title = self.applied.title.clone();
        self.sync(
            &Modes {
                title,
                kitty: self.applied.kitty,
                ..Modes::default()
            },
            out,
        );
        if std::mem::take(&mut self.kitty_pushed) {
            out.extend_from_slice(b"\x1b[<u");
        }
        self.applied = Modes::default();
        out.extend_from_slice(b"\x1b[0m\x1b[?25h\x1b[?1049l\x1b[23;0t");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(out: &[u8]) -> String {
        String::from_utf8_lossy(out).into_owned()
    }

    #[test]
    fn only_changes_are_written_and_leave_undoes_them_all() {
        let mut tracker = ModeTracker::default();
        tracker.feed(b"\x1b[?1000h\x1b[?1006h\x1b[?2004h\x1b=\x1b[>4;2m\x1b[>5u\x1b[6 q");
        let want = Modes::of_program(&tracker, true, "vim".into());
        let mut outer = Outer::default();
        let mut out = Vec::new();
        outer.enter(&mut out);
        assert!(text(&out).starts_with("\x1b[22;0t\x1b[?1049h"));
        out.clear();
        outer.sync(&want, &mut out);
        let on = text(&out);
        for seq in [
            "\x1b[?1000h",
            "\x1b[?1006h",
            "\x1b[?2004h",
            "\x1b[?1h",
            "\x1b=",
            "\x1b[>4;2m",
            "\x1b[>5u",
            "\x1b[6 q",
            "\x1b]2;vim\x07",
        ] {
            assert!(on.contains(seq), "{seq:?} in {on:?}");
        }
        out.clear();
        outer.sync(&want, &mut out);
        assert!(out.is_empty(), "nothing changed: {:?}", text(&out));

        outer.leave(&mut out);
        let off = text(&out);
        for seq in [
            "\x1b[?1000l",
            "\x1b[?1006l",
            "\x1b[?2004l",
            "\x1b[?1l",
            "\x1b>",
            "\x1b[>4;0m",
            "\x1b[<u",
            "\x1b[0 q",
            "\x1b[?25h",
            "\x1b[?1049l",
            "\x1b[23;0t",
        ] {
            assert!(off.contains(seq), "{seq:?} in {off:?}");
        }
        // The kitty flags are popped, not set to 0 on the way out.
        assert!(!off.contains("\x1b[=0;1u"), "{off:?}");
        out.clear();
        outer.leave(&mut out);
        assert!(out.is_empty(), "left once");
    }

    #[test]
    fn a_terminal_never_touched_gets_no_resets() {
        let mut outer = Outer::default();
        let mut out = Vec::new();
        outer.enter(&mut out);
        outer.sync(
            &Modes::of_program(&ModeTracker::default(), false, "s".into()),
            &mut out,
        );
        out.clear();
        outer.leave(&mut out);
        assert_eq!(text(&out), "\x1b[0m\x1b[?25h\x1b[?1049l\x1b[23;0t");
    }
}
