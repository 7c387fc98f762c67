//! asciicast v2 (the asciinema file format) from a session's stored
//! output: a header line, then one `[seconds, "o", text]` line per stored
//! frame, with `[seconds, "r", "COLSxROWS"]` where the session was resized.
//! Seconds count from the session's creation, from the time each frame was
//! stored. Frames split UTF-8 sequences anywhere: a sequence cut at a
//! frame's end is carried into the next; bytes that are not UTF-8 become
//! U+FFFD.

use serde_json::{json, Value};
use termesh_transport::{SessionInfo, StoredFrame};

/// A stored `resized` event: when, the seq of the output before it
/// (events stored before it was kept have none: their time places them),
/// and the new size.
#[derive(Clone, Copy)]
struct Resize {
    at: u64,
    after_seq: Option<u64>,
    cols: u16,
    rows: u16,
}

impl Resize {
    /// Whether it comes before the frame `seq` stored at `ts`: by seq when
    /// it has one (a millisecond clock cannot order a resize and output
    /// of the same millisecond), else by time.
    fn before(&self, seq: u64, ts: u64) -> bool {
        match self.after_seq {
            Some(after) => after < seq,
            None => self.at <= ts,
        }
    }
}

/// Turns pages of stored frames into asciicast lines.
pub struct CastWriter {
    start_ms: u64,
    /// Resizes not yet written, oldest first.
    resizes: std::collections::VecDeque<Resize>,
    /// The start of a UTF-8 sequence the last frame cut.
    carry: Vec<u8>,
    last_seq: u64,
}

impl CastWriter {
    /// The writer and the header line, from the session and its stored
    /// events (`created` gives the first size, `resized` the changes).
    pub fn new(info: &SessionInfo, events: &[Value]) -> (CastWriter, String) {
        let size = |e: &Value| {
            Some((
                e.get("cols")?.as_u64()? as u16,
                e.get("rows")?.as_u64()? as u16,
            ))
        };
        let kind = |e: &Value, k: &str| e.get("kind").and_then(Value::as_str) == Some(k);
        let (cols, rows) = events
            .iter()
            .find(|e| kind(e, "created"))
            .and_then(size)
            .unwrap_or((info.cols, info.rows));
        let resizes = events
            .iter()
            .filter(|e| kind(e, "resized"))
            .filter_map(|e| {
                let (cols, rows) = size(e)?;
                Some(Resize {
                    at: e.get("ts")?.as_u64()?,
                    after_seq: e.get("after_seq").and_then(Value::as_u64),
                    cols,
                    rows,
                })
            })
            .collect();
        let mut header = json!({
            "version": 2,
            "width": cols,
            "height": rows,
            "timestamp": info.created_at / 1000,
            "env": { "TERM": "xterm-256color" },
        });
        let title = info.name.clone().unwrap_or_else(|| info.command.join(" "));
        header["title"] = json!(title);
        let writer = CastWriter {
            start_ms: info.created_at,
            resizes,
            carry: Vec::new(),
            last_seq: 0,
        };
        (writer, header.to_string() + "\n")
    }

    fn time(&self, at_ms: u64) -> f64 {
        at_ms.saturating_sub(self.start_ms) as f64 / 1000.0
    }

    /// The lines for one page of frames (oldest first).
    pub fn page(&mut self, frames: &[StoredFrame]) -> String {
        let mut out = String::new();
        for frame in frames {
            self.last_seq = frame.seq;
            self.resizes_until(frame.seq, frame.ts, &mut out);
            let text = self.decode(&frame.data);
            if !text.is_empty() {
                let line = json!([self.time(frame.ts), "o", text]);
                out.push_str(&line.to_string());
                out.push('\n');
            }
        }
        out
    }

    /// The seq of the last frame written (0: none yet).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// The resizes after the last frame.
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        self.resizes_until(u64::MAX, u64::MAX, &mut out);
        if !self.carry.is_empty() {
            // A sequence the output never finished.
            self.carry.clear();
        }
        out
    }

    /// The resizes before the frame `seq` stored at `ts` (never later
    /// than it in time, so time goes forward).
    fn resizes_until(&mut self, seq: u64, ts: u64, out: &mut String) {
        while let Some(&r) = self.resizes.front() {
            if !r.before(seq, ts) {
                break;
            }
            self.resizes.pop_front();
            let (at, cols, rows) = (r.at.min(ts), r.cols, r.rows);
            let line = json!([self.time(at), "r", format!("{cols}x{rows}")]);
            out.push_str(&line.to_string());
            out.push('\n');
        }
    }

    /// `data` after what the last frame left, as text; an incomplete
    /// sequence at the end waits for the next frame.
    fn decode(&mut self, data: &[u8]) -> String {
        let mut bytes = std::mem::take(&mut self.carry);
        bytes.extend_from_slice(data);
        let mut text = String::new();
        let mut rest = &bytes[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    text.push_str(s);
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    text.push_str(std::str::from_utf8(good).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            text.push('\u{FFFD}');
                            rest = &bad[n..];
                        }
                        None => {
                            self.carry = bad.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> SessionInfo {
        serde_json::from_value(json!({
            "id": "abc", "node": "n", "command": ["sh"], "status": "exited",
            "created_at": 10_000, "cols": 100, "rows": 40, "last_seq": 3,
            "viewers": 0, "idle_ms": 0, "at_prompt": false, "tags": []
        }))
        .unwrap()
    }

    fn frame(seq: u64, ts: u64, data: &[u8]) -> StoredFrame {
        StoredFrame {
            seq,
            ts,
            data: data.to_vec(),
        }
    }

    #[test]
    fn frames_resizes_and_split_utf8_make_an_asciicast() {
        let events = vec![
            json!({"id": 1, "ts": 10_000, "kind": "created", "cols": 80, "rows": 24}),
            json!({"id": 2, "ts": 11_500, "kind": "resized", "cols": 100, "rows": 40}),
        ];
        let (mut w, header) = CastWriter::new(&info(), &events);
        let h: Value = serde_json::from_str(&header).unwrap();
        assert_eq!(
            (
                h["version"].clone(),
                h["width"].clone(),
                h["height"].clone()
            ),
            (json!(2), json!(80), json!(24))
        );
        assert_eq!(h["timestamp"], json!(10));
        let euro = "€".as_bytes();
        let mut body = w.page(&[frame(1, 10_250, b"hi "), frame(2, 11_000, &euro[..1])]);
        body += &w.page(&[frame(3, 12_000, &[&euro[1..], b"\xff!"].concat())]);
        body += &w.finish();
        let lines = cast_lines(&body);
        assert_eq!(
            lines,
            vec![
                json!([0.25, "o", "hi "]),
                json!([1.5, "r", "100x40"]),
                json!([2.0, "o", "€\u{FFFD}!"]),
            ]
        );
    }

    /// The cast's lines after its header, as JSON.
    fn cast_lines(body: &str) -> Vec<Value> {
        body.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn a_resize_in_the_same_millisecond_as_output_sits_by_its_seq() {
        let events = vec![
            json!({"id": 1, "ts": 10_000, "kind": "created", "cols": 80, "rows": 24}),
            json!({"id": 2, "ts": 10_500, "kind": "resized", "cols": 100, "rows": 40, "after_seq": 1}),
        ];
        let (mut w, _) = CastWriter::new(&info(), &events);
        let body = w.page(&[frame(1, 10_500, b"one"), frame(2, 10_500, b"two")]) + &w.finish();
        let lines = cast_lines(&body);
        assert_eq!(
            lines,
            vec![
                json!([0.5, "o", "one"]),
                json!([0.5, "r", "100x40"]),
                json!([0.5, "o", "two"]),
            ]
        );
    }
}
