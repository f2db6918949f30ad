//! The web client's static shell, embedded in the binary. The shell holds no data and needs no
//! token; everything it shows comes from the authenticated API.

use axum::http::{header, HeaderValue};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::state::AppState;

const INDEX_HTML: &str = include_str!("../web/index.html");

/// Routes of the web shell.
pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/", get(index))
}

async fn index() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8")),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
                ),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        ],
        INDEX_HTML,
    )
}
