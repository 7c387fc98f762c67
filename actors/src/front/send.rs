//! `send` (PROTOCOL.md section 15): text typed into a session as its
//! program expects typed text (inside bracketed paste marks when it turned
//! them on), then Enter; with `when: waiting`, held by the session until it
//! waits for its person. The text and its Enter are one message to the
//! program's writer, written whole before any later input, and `ok` comes
//! once its last byte is written.

use bytes::Bytes;
use termesh_transport::{ErrorCode, SendWhen, MAX_SEND};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::oneshot;

use super::ops::NodeCtx;
use crate::error::ApiError;
use crate::session::WhenWaiting;

const PASTE_START: &[u8] = b"\x1b[200~";
const PASTE_END: &[u8] = b"\x1b[201~";

impl NodeCtx {
    pub async fn send(
        &self,
        id: &str,
        text: String,
        submit: bool,
        when: SendWhen,
    ) -> Result<(), ApiError> {
        if text.len() > MAX_SEND {
            return Err(ApiError::new(
                ErrorCode::TooLarge,
                format!(
                    "send text of {} bytes is over the {MAX_SEND}-byte limit",
                    text.len()
                ),
            ));
        }
        let handle = self.running(id)?;
        if when == SendWhen::Waiting {
            let (reply, answer) = oneshot::channel();
            handle.addr.do_send(WhenWaiting(reply));
            answer.await.map_err(|_| ApiError::exited(id))??;
        }
        let paste = handle
            .shared
            .bracketed_paste
            .load(std::sync::atomic::Ordering::Relaxed);
        let written = handle
            .input
            .try_send_typed(typed(&text, paste, submit))
            .map_err(|e| match e {
                TrySendError::Closed(_) => ApiError::exited(id),
                TrySendError::Full(_) => ApiError::new(
                    ErrorCode::Unavailable,
                    format!(
                        "input queue of session `{id}` is full: its program is not reading input"
                    ),
                ),
            })?;
        // The writer ends (without writing it all) only when the program is gone.
        written.await.map_err(|_| ApiError::exited(id))
    }
}

/// `text` as typed: inside paste marks when the program asked for them
/// (any end mark inside the text removed, so it cannot end the paste
/// early), then Enter (`\r`) when `submit`.
pub fn typed(text: &str, paste: bool, submit: bool) -> Bytes {
    let mut out = Vec::with_capacity(text.len() + 13);
    if paste {
        out.extend_from_slice(PASTE_START);
        out.extend_from_slice(text.replace("\x1b[201~", "").as_bytes());
        out.extend_from_slice(PASTE_END);
    } else {
        out.extend_from_slice(text.as_bytes());
    }
    if submit {
        out.push(b'\r');
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_typed_in_paste_marks_when_asked_then_enter() {
        assert_eq!(&typed("yes", false, true)[..], b"yes\r");
        assert_eq!(&typed("yes", false, false)[..], b"yes");
        assert_eq!(
            &typed("a\nb\x1b[201~c", true, true)[..],
            b"\x1b[200~a\nbc\x1b[201~\r"
        );
    }
}
