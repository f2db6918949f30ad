//! [`Json`]: the one JSON body extractor of every handler, answering anything wrong with the
//! body (too large, unreadable, not the expected JSON) with an [`ApiError`] in our error format.
//! Sits just above `error`: it knows no handler, no state type (the limit comes through
//! `FromRef`) and no transport.

use axum::extract::{FromRef, FromRequest, OptionalFromRequest, Request};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::ApiError;

/// A JSON request body (or response): `axum::Json` with our rejection.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

/// The largest request body accepted, in bytes (named in the 413 answer).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// Whether the request declares its body as JSON (`application/json` or `…+json`). Browser
/// requests must (the cross-site check in `http::csrf`): a cross-site form cannot send it.
pub(crate) fn declares_json(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            let v = v.trim();
            v.eq_ignore_ascii_case("application/json")
                || (v.len() > 5 && v[v.len() - 5..].eq_ignore_ascii_case("+json"))
        })
}

/// Reads the body, answering 413 past `limit`.
async fn body<S: Send + Sync>(req: Request, state: &S, limit: usize) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(|e| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge(limit)
        } else {
            ApiError::Invalid {
                field: "body",
                reason: e.body_text(),
            }
        }
    })
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::Invalid {
        field: "body",
        reason: e.to_string(),
    })
}

impl<S, T> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    BodyLimit: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limit = BodyLimit::from_ref(state).0;
        let body = body(req, state, limit).await?;
        parse(&body).map(Json)
    }
}

/// `Option<Json<T>>`: `None` for an empty body, for endpoints whose body is optional.
impl<S, T> OptionalFromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    BodyLimit: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Option<Self>, Self::Rejection> {
        let limit = BodyLimit::from_ref(state).0;
        let body = body(req, state, limit).await?;
        if body.is_empty() {
            return Ok(None);
        }
        parse(&body).map(|t| Some(Json(t)))
    }
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types_are_recognised() {
        let mut h = HeaderMap::new();
        assert!(!declares_json(&h));
        h.insert(
            "content-type",
            "application/json; charset=utf-8".parse().unwrap(),
        );
        assert!(declares_json(&h));
        h.insert(
            "content-type",
            "application/merge-patch+json".parse().unwrap(),
        );
        assert!(declares_json(&h));
        h.insert("content-type", "text/plain".parse().unwrap());
        assert!(!declares_json(&h));
    }
}
