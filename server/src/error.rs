//! `ApiError`: every HTTP error response, as `{ "code", "message" }` JSON.
//!
//! Calls only `store` (for `StoreError`); every layer may return it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use moor_protocol::error::{ErrorBody, ErrorCode};

use crate::store::StoreError;

/// Errors handlers return; each variant names the response it becomes.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 401: no or wrong token.
    #[error("missing or invalid token")]
    Unauthorized,
    /// 403: the caller may see the resource but not do this to it.
    #[error("your role does not allow this")]
    Forbidden,
    /// 429: too many requests; retry after this many seconds.
    #[error("too many requests; retry in {0} s")]
    RateLimited(u64),
    /// 404: no such resource, or not visible to the caller.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// 409: the request conflicts with what is stored.
    #[error("{0}")]
    Conflict(String),
    /// 410: what was asked for is over for good (e.g. first-start setup once an administrator
    /// exists); the message says what to do instead.
    #[error("{0}")]
    Gone(String),
    /// 409: the session has ended.
    #[error("the session has ended")]
    SessionEnded,
    /// 400: a field is invalid.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// Which field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// 400: a cursor is not a number.
    #[error("invalid cursor {0:?}: expected a seq number")]
    InvalidCursor(String),
    /// 413: the body is too large.
    #[error("request body too large (limit {0} bytes)")]
    TooLarge(usize),
    /// 503: the server is shutting down.
    #[error("server is shutting down; retry on another node or in a moment")]
    ShuttingDown,
    /// 500: details go to the log, never to the client.
    #[error("internal error")]
    Internal(#[from] anyhow::Error),
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => ApiError::NotFound("session"),
            StoreError::SessionEnded => ApiError::SessionEnded,
            StoreError::Conflict(c) => ApiError::Conflict(c.to_owned()),
            StoreError::Other(e) => ApiError::Internal(e),
        }
    }
}

impl ApiError {
    fn status_and_code(&self) -> (StatusCode, ErrorCode) {
        match self {
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized),
            ApiError::Forbidden => (StatusCode::FORBIDDEN, ErrorCode::Forbidden),
            ApiError::RateLimited(_) => (StatusCode::TOO_MANY_REQUESTS, ErrorCode::RateLimited),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, ErrorCode::Conflict),
            ApiError::SessionEnded => (StatusCode::CONFLICT, ErrorCode::SessionEnded),
            ApiError::Gone(_) => (StatusCode::GONE, ErrorCode::Gone),
            ApiError::Invalid { .. } => (StatusCode::BAD_REQUEST, ErrorCode::BadRequest),
            ApiError::InvalidCursor(_) => (StatusCode::BAD_REQUEST, ErrorCode::InvalidCursor),
            ApiError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::TooLarge),
            ApiError::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::ShuttingDown),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if let ApiError::Internal(e) = &self {
            tracing::error!(error = ?e, "request failed");
        }
        let body = ErrorBody {
            code,
            message: self.to_string(),
        };
        let mut resp = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        if let ApiError::RateLimited(secs) = self {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.max(1).into());
        }
        resp
    }
}
