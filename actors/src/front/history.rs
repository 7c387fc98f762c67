//! `history` by pages (PROTOCOL.md section 14), on the session's owner:
//! the stored output before `before_seq` read backwards from the output
//! log, a chunk at a time until a page's worth of lines is found, and
//! rendered off the connection's thread (`session::page`); or raw, whole
//! frames before `before_seq` up to a byte limit, so that any tail of the
//! retained output can be walked in bounded requests.

use termesh_transport::ErrorCode;

use super::ops::NodeCtx;
use crate::error::ApiError;
use crate::session::page::{self, RenderedPage};
use crate::session::{RawTail, RawTailResult, ScreenWant};

/// Stored output read for a page at first, and at most (a page of very
/// long lines reads more, a chunk four times larger each time).
const FIRST_CHUNK: usize = 256 << 10;
const MAX_CHUNK: usize = 16 << 20;

impl NodeCtx {
    /// A page of `rows` rendered lines of `id`'s stored output before
    /// `before_seq` (the newest without it).
    pub async fn history_page(
        &self,
        id: &str,
        before_seq: Option<u64>,
        rows: Option<u32>,
    ) -> Result<RenderedPage, ApiError> {
        let handle = self.session(id)?;
        let rows = match rows {
            None => page::DEFAULT_ROWS,
            Some(r) if r >= 1 && r as usize <= page::MAX_ROWS => r as usize,
            Some(r) => {
                return Err(ApiError::bad_request(format!(
                    "`rows` must be 1 to {}, not {r}",
                    page::MAX_ROWS
                )))
            }
        };
        if before_seq == Some(0) {
            return Err(ApiError::bad_request("`before_seq` must be 1 or more"));
        }
        let before = before_seq.unwrap_or(u64::MAX);
        let (cols, screen_rows) = {
            let info = handle.shared.info();
            (info.cols, info.rows)
        };
        let Some(store) = self.store.as_ref() else {
            // No store (`--no-store`): what the ring renders is all there
            // is, one page.
            let screen = self.screen(id, ScreenWant::Lines { max: rows }).await?;
            if before_seq.is_some() {
                return Ok(RenderedPage {
                    lines: Vec::new(),
                    first_seq: 0,
                    last_seq: 0,
                    more: false,
                    wants_more: false,
                });
            }
            return Ok(RenderedPage {
                lines: screen.out.into_lines().unwrap_or_default(),
                first_seq: 1,
                last_seq: screen.seq,
                more: false,
                wants_more: false,
            });
        };
        let mut chunk = FIRST_CHUNK;
        loop {
            let read = store
                .output_before(id, before, chunk)
                .await
                .map_err(|e| ApiError::new(ErrorCode::Internal, e))?;
            let older = read.more;
            let frames = read.frames;
            let rendered = tokio::task::spawn_blocking(move || {
                page::render(&frames, cols, screen_rows, rows, older)
            })
            .await
            .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?;
            if rendered.wants_more && chunk < MAX_CHUNK {
                chunk *= 4;
                continue;
            }
            return Ok(rendered);
        }
    }

    /// The whole frames before `before_seq` holding at most `limit` bytes
    /// (at least one), from the output log, or from the ring without a
    /// store or when the log holds none of them (its writes failed).
    pub async fn raw_page(
        &self,
        id: &str,
        before_seq: u64,
        limit: usize,
    ) -> Result<RawTailResult, ApiError> {
        if before_seq == 0 {
            return Err(ApiError::bad_request("`before_seq` must be 1 or more"));
        }
        let handle = self.session(id)?;
        if let Some(store) = self.store.as_ref() {
            let page = store
                .output_before(id, before_seq, limit)
                .await
                .map_err(|e| ApiError::new(ErrorCode::Internal, e))?;
            if let (Some(first), Some(last)) = (page.frames.first(), page.frames.last()) {
                let mut data = bytes::BytesMut::with_capacity(limit.min(8 << 20));
                for f in &page.frames {
                    data.extend_from_slice(&f.data);
                }
                return Ok(RawTailResult {
                    last_seq: handle.shared.info().last_seq,
                    data: data.freeze(),
                    first_seq: first.seq,
                    end_seq: last.seq,
                    more: page.more,
                });
            }
        }
        handle
            .addr
            .send(RawTail {
                limit,
                before: Some(before_seq),
            })
            .await
            .map_err(|_| super::ops::gone(id))
    }
}
