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

    /// As the `error` message a client is sent.
    pub fn to_message(
        &self,
        id: Option<u64>,
        session: Option<String>,
    ) -> termesh_transport::ServerMsg {
        termesh_transport::ServerMsg::Error {
            id,
            session,
            code: self.code,
            message: self.message.clone(),
        }
    }

    /// From an `error` message a peer relayed.
    pub fn from_message(msg: &termesh_transport::ServerMsg) -> Option<Self> {
        match msg {
            termesh_transport::ServerMsg::Error { code, message, .. } => {
                Some(Self::new(*code, message.clone()))
            }
            _ => None,
        }
    }
}
