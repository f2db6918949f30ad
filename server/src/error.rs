//! `ApiError`: every HTTP error response, as `{ "code", "message" }` JSON.
//!
//! Calls only `store` (for `StoreError`); every layer may return it.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use moor_protocol::error::{ErrorBody, ErrorCode};

use crate::store::StoreError;

/// How long a client should wait before retrying a request the database could not serve.
pub const RETRY_UNAVAILABLE: Duration = Duration::from_secs(1);
/// How long a client should wait before retrying a write refused for a full disk: freeing
/// space takes a person, so sooner is only load.
pub const RETRY_STORAGE_FULL: Duration = Duration::from_secs(10);

/// Errors handlers return; each variant names the response it becomes.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 401: no or wrong token.
    #[error("missing or invalid token")]
    Unauthorized,
    /// 403: the caller may see the resource but not do this to it.
    #[error("your role does not allow this")]
    Forbidden,
    /// 403: a browser request with the user's cookie from a page that is not this server's
    /// (or not declared as JSON); the reason says which.
    #[error("cross-site request refused: {0}")]
    CrossSite(&'static str),
    /// 429: too many requests; retry after this many seconds.
    #[error("too many requests; retry in {0} s")]
    RateLimited(u64),
    /// 404: no such resource, or not visible to the caller.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// 409: the request conflicts with what is stored.
    #[error("{0}")]
    Conflict(String),
    /// 409: an input's `client_msg_id` already names a different input, the stored one.
    #[error("client_msg_id {:?} already names another input (seq {}); retry with the same input, or use a new id", .0.0, .0.1.seq)]
    InputConflict(Box<(String, moor_protocol::Entry)>),
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
    /// 503: the database cannot be reached right now; retry in [`RETRY_UNAVAILABLE`].
    #[error("the server cannot reach its database right now; retry in a moment")]
    Unavailable(#[source] anyhow::Error),
    /// 507: the server's disk is full; nothing was stored. Retry after
    /// [`RETRY_STORAGE_FULL`] (the operator has to free space first); reads still work.
    #[error("the server's disk is full, so nothing was stored; retry later (the operator must free space in moord's data dir or database)")]
    StorageFull(#[source] anyhow::Error),
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
            StoreError::Unavailable(e) => ApiError::Unavailable(e),
            StoreError::Full(e) => ApiError::StorageFull(e),
            StoreError::Other(e) => ApiError::Internal(e),
        }
    }
}

impl ApiError {
    /// Converts a store error as [`From`] does, except that a missing row is a 404 for `what`
    /// rather than for a session: for `map_err` on a store call that looks up a `what`.
    pub fn missing(what: &'static str) -> impl FnOnce(StoreError) -> ApiError {
        move |e| match e {
            StoreError::NotFound => ApiError::NotFound(what),
            e => e.into(),
        }
    }

    /// The status this error answers with, and its machine-readable code.
    pub fn status_and_code(&self) -> (StatusCode, ErrorCode) {
        match self {
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized),
            ApiError::Forbidden | ApiError::CrossSite(_) => {
                (StatusCode::FORBIDDEN, ErrorCode::Forbidden)
            }
            ApiError::RateLimited(_) => (StatusCode::TOO_MANY_REQUESTS, ErrorCode::RateLimited),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
            ApiError::Conflict(_) | ApiError::InputConflict(_) => {
                (StatusCode::CONFLICT, ErrorCode::Conflict)
            }
            ApiError::SessionEnded => (StatusCode::CONFLICT, ErrorCode::SessionEnded),
            ApiError::Gone(_) => (StatusCode::GONE, ErrorCode::Gone),
            ApiError::Invalid { .. } => (StatusCode::BAD_REQUEST, ErrorCode::BadRequest),
            ApiError::InvalidCursor(_) => (StatusCode::BAD_REQUEST, ErrorCode::InvalidCursor),
            ApiError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::TooLarge),
            ApiError::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::ShuttingDown),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable),
            ApiError::StorageFull(_) => (StatusCode::INSUFFICIENT_STORAGE, ErrorCode::StorageFull),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        match &self {
            ApiError::Internal(e) => tracing::error!(error = ?e, "request failed"),
            ApiError::Unavailable(e) => tracing::warn!(error = ?e, "database unavailable"),
            // Warned once per episode by whoever saw it first (the committer, the blob store);
            // a request per refused write would flood the log.
            ApiError::StorageFull(e) => tracing::debug!(error = ?e, "storage full"),
            _ => {}
        }
        let body = ErrorBody {
            code,
            message: self.to_string(),
            stored: match &self {
                ApiError::InputConflict(c) => Some(c.1.clone()),
                _ => None,
            },
        };
        let mut resp = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        let retry_after = match self {
            ApiError::RateLimited(secs) => Some(secs.max(1)),
            ApiError::Unavailable(_) => Some(RETRY_UNAVAILABLE.as_secs()),
            ApiError::StorageFull(_) => Some(RETRY_STORAGE_FULL.as_secs()),
            _ => None,
        };
        if let Some(secs) = retry_after {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use axum::body::to_bytes;

    use super::*;

    #[tokio::test]
    async fn an_unavailable_store_is_a_retryable_503_with_retry_after() {
        // arrange
        let err: ApiError = StoreError::Unavailable(anyhow::anyhow!("connection refused")).into();
        // act
        let resp = err.into_response();
        // assert
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            resp.headers()
                .get(axum::http::header::RETRY_AFTER)
                .map(|v| v.to_str().unwrap().to_owned()),
            Some(RETRY_UNAVAILABLE.as_secs().to_string())
        );
        let body = to_bytes(resp.into_body(), 4096).await.unwrap();
        let body: ErrorBody = serde_json::from_slice(&body).unwrap();
        assert_eq!(body.code, ErrorCode::Unavailable);
        assert!(
            !body.message.contains("refused"),
            "the cause stays in the log: {}",
            body.message
        );
    }

    #[tokio::test]
    async fn a_full_store_is_a_retryable_507_that_says_what_to_do() {
        // arrange
        let err: ApiError = StoreError::Full(anyhow::anyhow!("database or disk is full")).into();
        // act
        let resp = err.into_response();
        // assert
        assert_eq!(resp.status(), StatusCode::INSUFFICIENT_STORAGE);
        assert_eq!(
            resp.headers()
                .get(axum::http::header::RETRY_AFTER)
                .map(|v| v.to_str().unwrap().to_owned()),
            Some(RETRY_STORAGE_FULL.as_secs().to_string())
        );
        let body = to_bytes(resp.into_body(), 4096).await.unwrap();
        let body: ErrorBody = serde_json::from_slice(&body).unwrap();
        assert_eq!(body.code, ErrorCode::StorageFull);
        assert!(body.message.contains("free space"), "{}", body.message);
    }
}
