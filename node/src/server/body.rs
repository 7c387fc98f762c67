//! Request bodies: read within a size bound and a time bound, and JSON
//! ones decoded with an error that says what was wrong.

use actix_web::web;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use termesh_actors::error::ApiError;
use termesh_transport::ErrorCode;

type Result<T> = std::result::Result<T, ApiError>;

/// Largest JSON body accepted.
const MAX_JSON: usize = 64 * 1024;

/// A request body must have arrived this long after its handler began
/// reading it (a client dribbling a body holds a connection no longer).
const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub(super) async fn read_body(mut payload: web::Payload, limit: usize) -> Result<Bytes> {
    let reading = async {
        let mut body = BytesMut::new();
        while let Some(chunk) = payload.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::bad_request(format!("cannot read the body: {e}")))?;
            if body.len() + chunk.len() > limit {
                return Err(ApiError::new(
                    ErrorCode::TooLarge,
                    format!("the body is over the {limit}-byte limit"),
                ));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    };
    tokio::time::timeout(BODY_TIMEOUT, reading)
        .await
        .unwrap_or_else(|_| {
            Err(ApiError::bad_request(format!(
                "the body did not arrive within {}s",
                BODY_TIMEOUT.as_secs()
            )))
        })
}

/// A JSON body; an empty body is `None`.
pub(super) async fn read_json<T: serde::de::DeserializeOwned>(
    payload: web::Payload,
) -> Result<Option<T>> {
    read_json_within(payload, MAX_JSON).await
}

/// A JSON body of at most `limit` bytes; an empty body is `None`.
pub(super) async fn read_json_within<T: serde::de::DeserializeOwned>(
    payload: web::Payload,
    limit: usize,
) -> Result<Option<T>> {
    let body = read_body(payload, limit).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| ApiError::bad_request(format!("the body is not the expected JSON: {e}")))
}

pub(super) async fn required_json<T: serde::de::DeserializeOwned>(
    payload: web::Payload,
) -> Result<T> {
    read_json(payload)
        .await?
        .ok_or_else(|| ApiError::bad_request("this request needs a JSON body"))
}
