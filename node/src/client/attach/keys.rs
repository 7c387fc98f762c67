//! The attach client's keyboard: the prefix key (default Ctrl-]) and its
//! commands, and bracketed pastes, inside which every byte goes to the
//! session as typed (a pasted Ctrl-] never detaches). While the program
//! has asked for modifyOtherKeys or kitty's keyboard protocol, the outer
//! terminal encodes the prefix key (`CSI 27;5;93~`, `CSI 93;5u`): those
//! count as the prefix too.

/// What the typed bytes mean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// Bytes for the session.
    Input(Vec<u8>),
    /// Prefix, then `d`.
    Detach,
    /// Prefix, then `s`: make the session this terminal's size.
    TakeSize,
    /// Prefix, then `[`: the scroll mode.
    Scroll,
    /// Prefix, then a key that means nothing: show what does.
    Help,
}

/// Start and end of a bracketed paste, as the outer terminal sends them.
const PASTE_START: &[u8] = b"\x1b[200~";
const PASTE_END: &[u8] = b"\x1b[201~";

#[derive(Debug)]
pub struct KeyFilter {
    prefix: u8,
    /// The prefix was pressed; the next key is a command.
    armed: bool,
    in_paste: bool,
    /// The bytes of a paste marker seen so far (markers may be split
    /// across reads; the bytes themselves are passed on as they come).
    marker: Vec<u8>,
}

impl KeyFilter {
    pub fn new(prefix: u8) -> KeyFilter {
        KeyFilter {
            prefix,
            armed: false,
            in_paste: false,
            marker: Vec::new(),
        }
    }

    /// Whether the prefix was pressed and a command key is awaited.
    pub fn armed(&self) -> bool {
        self.armed
    }

    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Key> {
        let chunk = self.decode_prefix(chunk);
        let mut keys = Vec::new();
        let mut run = Vec::new();
        let mut i = 0;
        while i < chunk.len() {
            let mut byte = chunk[i];
            i += 1;
            let in_paste = self.in_paste;
            self.scan_marker(byte);
            if self.armed {
                self.armed = false;
                if byte == 0x1b {
                    // A key sent as an escape sequence after the prefix is
                    // the command key, whole: kitty's `CSI 100 u` is `d`;
                    // an arrow or a function key only shows the help.
                    let (len, key) = escaped_key(&chunk[i - 1..]);
                    for &b in &chunk[i..i - 1 + len] {
                        self.scan_marker(b);
                    }
                    i += len - 1;
                    byte = key.unwrap_or(0x1b);
                }
                let command = match byte {
                    b if b == self.prefix => {
                        run.push(b);
                        continue;
                    }
                    b'd' | b'D' => Key::Detach,
                    b's' | b'S' => Key::TakeSize,
                    b'[' => Key::Scroll,
                    _ => Key::Help,
                };
                if !run.is_empty() {
                    keys.push(Key::Input(std::mem::take(&mut run)));
                }
                keys.push(command);
            } else if byte == self.prefix && !in_paste {
                self.armed = true;
            } else {
                run.push(byte);
            }
        }
        if !run.is_empty() {
            keys.push(Key::Input(run));
        }
        keys
    }

    /// The chunk with the prefix key's encoded forms (outside a paste)
    /// replaced by its byte.
    fn decode_prefix<'a>(&self, chunk: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        if self.in_paste || !chunk.windows(2).any(|w| w == b"\x1b[") {
            return chunk.into();
        }
        let code = u32::from(self.prefix + b'@').to_string();
        let code = if self.prefix + b'@' >= b'A' && self.prefix + b'@' <= b'Z' {
            u32::from(self.prefix + b'`').to_string()
        } else {
            code
        };
        let forms = [format!("\x1b[27;5;{code}~"), format!("\x1b[{code};5u")];
        let mut out = Vec::with_capacity(chunk.len());
        let mut rest = chunk;
        'scan: while !rest.is_empty() {
            for form in &forms {
                if let Some(after) = rest.strip_prefix(form.as_bytes()) {
                    out.push(self.prefix);
                    rest = after;
                    continue 'scan;
                }
            }
            out.push(rest[0]);
            rest = &rest[1..];
        }
        out.into()
    }

    fn scan_marker(&mut self, byte: u8) {
        self.marker.push(byte);
        let seen = &self.marker[..];
        if seen == PASTE_START {
            self.in_paste = true;
        } else if seen == PASTE_END {
            self.in_paste = false;
        } else if PASTE_START.starts_with(seen) || PASTE_END.starts_with(seen) {
            return;
        }
        if seen == PASTE_START || seen == PASTE_END || byte != 0x1b {
            self.marker.clear();
        } else {
            self.marker.clear();
            self.marker.push(byte);
        }
    }
}

/// The length of the escape sequence `seq` starts with (CSI up to its
/// final byte, SS3 and one byte, else the ESC alone) and the plain key it
/// stands for when it is kitty's `CSI code u` / `CSI code ; 1 u` of a
/// printable character.
fn escaped_key(seq: &[u8]) -> (usize, Option<u8>) {
    match seq {
        [0x1b, b'[', rest @ ..] => match rest.iter().position(|b| (0x40..=0x7e).contains(b)) {
            Some(at) => {
                let params = &rest[..at];
                let key = (rest[at] == b'u')
                    .then(|| {
                        let text = std::str::from_utf8(params).ok()?;
                        let (code, mods) = text.split_once(';').unwrap_or((text, "1"));
                        let code: u8 = code.parse().ok()?;
                        (mods == "1" && (0x20..0x7f).contains(&code)).then_some(code)
                    })
                    .flatten();
                (at + 3, key)
            }
            None => (seq.len(), None),
        },
        [0x1b, b'O', _, ..] => (3, None),
        _ => (1, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u8 = 0x1d;

    fn input(b: &[u8]) -> Key {
        Key::Input(b.to_vec())
    }

    #[test]
    fn prefix_commands() {
        let mut k = KeyFilter::new(P);
        assert_eq!(k.feed(b"ls\r"), vec![input(b"ls\r")]);
        assert_eq!(
            k.feed(&[b'a', P, b'd', b'z']),
            vec![input(b"a"), Key::Detach, input(b"z")]
        );
        // Pressing it twice sends it once.
        assert_eq!(k.feed(&[P, P]), vec![input(&[P])]);
        assert!(!k.armed());
        // The command key may come in a later read.
        assert_eq!(k.feed(&[P]), vec![]);
        assert!(k.armed());
        assert_eq!(k.feed(b"s"), vec![Key::TakeSize]);
        assert_eq!(k.feed(&[P, b'x', b'y']), vec![Key::Help, input(b"y")]);
    }

    #[test]
    fn the_prefix_key_encoded_by_a_keyboard_protocol_still_works() {
        let mut k = KeyFilter::new(P);
        assert_eq!(k.feed(b"\x1b[27;5;93~d"), vec![Key::Detach]);
        assert_eq!(k.feed(b"\x1b[93;5u"), vec![]);
        assert_eq!(k.feed(b"s"), vec![Key::TakeSize]);
        // Other encoded keys pass as they are.
        assert_eq!(k.feed(b"\x1b[27;5;97~"), vec![input(b"\x1b[27;5;97~")]);
        // Ctrl-A as prefix: its letter in lower case.
        let mut k = KeyFilter::new(0x01);
        assert_eq!(k.feed(b"\x1b[97;5ud"), vec![Key::Detach]);
    }

    #[test]
    fn an_escape_sequence_after_the_prefix_is_one_key() {
        let mut k = KeyFilter::new(P);
        // An arrow: help, and nothing of it reaches the program.
        assert_eq!(
            k.feed(&[P, 0x1b, b'[', b'A', b'x']),
            vec![Key::Help, input(b"x")]
        );
        // kitty's encoding of `d` (flag 8: every key as an escape code).
        assert_eq!(k.feed(b"\x1b[93;5u\x1b[100u"), vec![Key::Detach]);
        assert_eq!(k.feed(b"\x1b[93;5u\x1b[91;1u"), vec![Key::Scroll]);
        // A lone ESC after the prefix cancels.
        assert_eq!(k.feed(&[P, 0x1b]), vec![Key::Help]);
    }

    #[test]
    fn a_paste_never_detaches_even_split_across_reads() {
        let mut k = KeyFilter::new(P);
        let mut paste = b"\x1b[200~one".to_vec();
        paste.extend([P, b'd']);
        assert_eq!(k.feed(&paste), vec![input(&paste)]);
        assert_eq!(k.feed(&[P]), vec![input(&[P])], "still in the paste");
        // The end marker split across two reads.
        assert_eq!(k.feed(b"two\x1b[20"), vec![input(b"two\x1b[20")]);
        assert_eq!(k.feed(b"1~"), vec![input(b"1~")]);
        // The paste ended: the prefix works again.
        assert_eq!(k.feed(&[P, b'd']), vec![Key::Detach]);
        // An ESC before a marker does not hide it.
        assert_eq!(k.feed(b"\x1b\x1b[200~"), vec![input(b"\x1b\x1b[200~")]);
        assert_eq!(k.feed(&[P]), vec![input(&[P])]);
    }
}
