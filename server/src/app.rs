//! The application router: puts the transports side by side (the JSON API, SSE, viewer and
//! bridge WebSockets, the web client) under the request guard and one trace layer. The only
//! module that names every transport; none of them calls another.

use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use axum::Router;

use crate::state::AppState;

/// The whole application.
pub fn router(state: AppState) -> Router {
    let max_body = state.config.max_body_bytes;
    let api = crate::http::api()
        .route("/sessions/{id}/events", get(crate::sse::events))
        .route("/sessions/{id}/ws", get(crate::ws::viewer::upgrade))
        .route("/bridge", get(crate::ws::bridge::upgrade))
        .fallback(crate::http::not_found);
    crate::http::health()
        .nest("/api/v1", api)
        .merge(crate::web::router())
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::http::guard::layer,
        ))
        .layer(
            tower_http::trace::TraceLayer::new_for_http().make_span_with(
                // The path only: query strings may carry access tokens.
                |req: &axum::http::Request<_>| {
                    tracing::info_span!("http", method = %req.method(), path = %req.uri().path())
                },
            ),
        )
        .with_state(state)
}
