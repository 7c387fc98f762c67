//! How the attach takes the node's `error` replies: which end it (with a
//! message), which are noted in the status row, which drop the link.

use anyhow::anyhow;
use termesh_transport::ErrorCode;

use super::*;

impl State {
    pub(super) fn on_error(
        &mut self,
        id: Option<u64>,
        code: ErrorCode,
        message: String,
    ) -> anyhow::Result<Step> {
        let session = &self.opts.label;
        match (id, code) {
            (Some(DETACH_ID), _) => {
                self.notify(format!("other attaches stay: {message}"));
                Ok(Step::Continue)
            }
            // The look for a `lost` status is a nicety: without it the
            // stream's own events still end the attach.
            (Some(LIST_ID), _) => Ok(Step::Continue),
            (Some(HISTORY_ID), _) => {
                self.scroll_wanted = None;
                self.notify(format!("no scroll mode: {message}"));
                Ok(Step::Continue)
            }
            (Some(id @ (HISTORY_OLDER_ID | HISTORY_SCAN_ID | HISTORY_FILL_ID)), _) => {
                let what = match id {
                    HISTORY_OLDER_ID => Failed::Older,
                    HISTORY_SCAN_ID => Failed::Scan,
                    _ => Failed::Fill,
                };
                self.view.scroll_failed(what, &message);
                Ok(Step::Continue)
            }
            // The screen after a resize: the model stays as it is.
            (Some(id), _) if id >= SCREEN_IDS => {
                self.resync = None;
                Ok(Step::Continue)
            }
            // A resize the node refused (its bounds): said, not retried.
            (None, ErrorCode::BadRequest | ErrorCode::TooLarge) => {
                self.notify(message);
                Ok(Step::Continue)
            }
            (Some(SUBSCRIBE_ID), ErrorCode::NotFound) => Err(Fatal::wrap(anyhow!(
                "session {session} no longer exists: it was removed, or its node restarted"
            ))),
            // The session went away while attached.
            (None, ErrorCode::NotFound) => Ok(Step::End(Ended::Removed)),
            // A viewer's token: input and resize are refused.
            (None, ErrorCode::Forbidden) => {
                if !self.read_only {
                    self.read_only = true;
                    self.read_only_note = "read-only (a viewer's token): keys are not sent";
                    self.pending_input.clear();
                    // Said now unless it answers a size the session had
                    // already; then at the first key.
                    if !self.quiet_claim {
                        self.notify(self.read_only_note.into());
                    }
                }
                Ok(Step::Continue)
            }
            // Input that raced the program's exit: `exited` follows.
            (None, ErrorCode::Exited) => Ok(Step::Continue),
            (
                Some(SUBSCRIBE_ID),
                ErrorCode::Unauthorized | ErrorCode::Forbidden | ErrorCode::BadRequest,
            ) => Err(Fatal::wrap(anyhow!(
                "cannot attach to {session}: {message}"
            ))),
            // Anything else ends this subscription; a new connection retries.
            (_, code) => Err(anyhow!("{}: {message}", code.as_str())),
        }
    }
}
