//! Token extraction for HTTP requests (header or `?token=`), the JSON
//! error responses every HTTP route answers with, and the helpers every
//! handler uses (`respond`, `query`).

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use termesh_actors::error::ApiError;
use termesh_actors::front::tokens::Tokens;
use termesh_config::Role;
use termesh_transport::ErrorCode;

/// The token a request presents, from `Authorization: Bearer` or `?token=`.
pub fn presented_token(req: &HttpRequest) -> Option<String> {
    if let Some(value) = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
    {
        if let Some(token) = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
        {
            return Some(token.trim().to_string());
        }
    }
    url_token(req.query_string())
}

fn url_token(query: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == "token").then(|| percent_decode(v))
    })
}

fn percent_decode(text: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The role of an HTTP request: `Ok(None)` when it presents no token,
/// an error when it presents a wrong one. With no tokens configured,
/// everyone is admin.
pub fn role_of(req: &HttpRequest, tokens: &Tokens) -> Result<Option<Role>, ApiError> {
    let tokens = tokens.current();
    if tokens.is_empty() {
        return Ok(Some(Role::Admin));
    }
    match presented_token(req) {
        None => Ok(None),
        Some(token) => termesh_config::verify(&tokens, &token)
            .map(Some)
            .ok_or_else(|| ApiError::new(ErrorCode::Unauthorized, "unknown token")),
    }
}

/// Requires at least `needed`.
pub fn require(req: &HttpRequest, tokens: &Tokens, needed: Role) -> Result<Role, ApiError> {
    let role = role_of(req, tokens)?.ok_or_else(|| {
        ApiError::new(
            ErrorCode::Unauthorized,
            "send a token: Authorization: Bearer <token>, or ?token=",
        )
    })?;
    termesh_actors::front::request::check_role("this request", needed, role)?;
    Ok(role)
}

pub fn status(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::BadFrame | ErrorCode::UnknownType | ErrorCode::BadRequest => {
            StatusCode::BAD_REQUEST
        }
        ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorCode::Forbidden => StatusCode::FORBIDDEN,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::Exited => StatusCode::CONFLICT,
        ErrorCode::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorCode::Timeout => StatusCode::REQUEST_TIMEOUT,
    }
}

pub fn error_response(err: &ApiError) -> HttpResponse {
    HttpResponse::build(status(err.code)).json(serde_json::json!({
        "code": err.code.as_str(),
        "message": err.message,
    }))
}

/// A handler's result as its response: an error as its HTTP status and
/// `{code, message}` body.
pub(super) fn respond(result: Result<HttpResponse, ApiError>) -> HttpResponse {
    result.unwrap_or_else(|e| error_response(&e))
}

/// The request's query string as `T`, or `bad_request` saying why not.
pub(super) fn query<T: serde::de::DeserializeOwned>(req: &HttpRequest) -> Result<T, ApiError> {
    actix_web::web::Query::<T>::from_query(req.query_string())
        .map(|q| q.into_inner())
        .map_err(|e| ApiError::bad_request(format!("bad query string: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_tokens_are_decoded() {
        assert_eq!(url_token("a=1&token=ab%2Fc"), Some("ab/c".to_string()));
        assert_eq!(url_token("token=x%"), Some("x%".to_string()));
        assert_eq!(url_token("token=%e2%82%ac%zz%"), Some("€%zz%".to_string()));
        assert_eq!(url_token("token=é%"), Some("é%".to_string()));
        assert_eq!(url_token("x=1"), None);
    }
}
