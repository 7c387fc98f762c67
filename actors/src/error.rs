//! The error every request path answers with: a protocol code and a message.

use termesh_transport::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    pub fn not_found(session: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("no session `{session}`"))
    }

    pub fn exited(session: &str) -> Self {
        Self::new(ErrorCode::Exited, format!("session `{session}` has exited"))
    }
}
