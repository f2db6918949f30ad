//! `GET /metrics`: the Prometheus exposition, for a scraper presenting the metrics token.
//!
//! Part of the HTTP transport: reads the hub's metrics; never `sse` or `ws`.

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};

use crate::access::constant_time_eq;
use crate::error::ApiError;
use crate::state::AppState;

/// The metrics, to a bearer of `--metrics-token`; 404 when the server has none.
#[utoipa::path(
    get, path = "/metrics", operation_id = "metrics", tag = "server", security(()),
    responses(
        (status = 200, description = "The Prometheus (OpenMetrics) exposition", content_type = "application/openmetrics-text", body = String),
        (status = 401, description = "No or a wrong `Authorization: Bearer <metrics token>`", body = moor_protocol::error::ErrorBody),
        (status = 404, description = "Metrics are not served on this address (no `--metrics-token`)", body = moor_protocol::error::ErrorBody),
    )
)]
pub(super) async fn scrape(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let Some(token) = state.config.metrics_token.as_deref() else {
        return ApiError::NotFound("metrics").into_response();
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(p) if constant_time_eq(p.as_bytes(), token.as_bytes()) => exposition(&state),
        _ => ApiError::Unauthorized.into_response(),
    }
}

/// The exposition as an HTTP response (also what `--metrics-listen` serves).
pub(crate) fn exposition(state: &AppState) -> Response {
    let text = state.hub.metrics().render(state.hub.live_sessions());
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
        )],
        text,
    )
        .into_response()
}
