//! The HTTP surface: routes, and request/response mapping. No SQL here, no hub locks held.

mod checkpoints;
mod health;
pub(crate) mod inputs;
mod recovery;
mod sessions;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post, put};
use axum::Router;

use crate::access::http as access;
use crate::error::ApiError;
use crate::state::AppState;

/// The whole application.
pub fn router(state: AppState) -> Router {
    let max_body = state.config.max_body_bytes;
    let api = Router::new()
        .route("/me", get(sessions::me))
        .route("/sessions", get(sessions::list))
        .route("/sessions/{id}", get(sessions::get))
        .route("/sessions/{id}/entries", get(sessions::entries))
        .route("/sessions/{id}/events", get(crate::sse::events))
        .route("/sessions/{id}/ws", get(crate::ws::viewer::upgrade))
        .route("/sessions/{id}/inputs", post(inputs::create))
        .route("/sessions/{id}/recovery", get(recovery::brief))
        .route("/sessions/{id}/transcript", get(recovery::transcript))
        .route("/sessions/{id}/bridge/close", post(sessions::close_bridge))
        .route("/sessions/{id}/checkpoints", get(checkpoints::list))
        .route(
            "/sessions/{id}/checkpoints/{checkpoint}",
            put(checkpoints::put),
        )
        .route("/checkpoints/{checkpoint}", get(checkpoints::get))
        .route("/checkpoints/{checkpoint}/diff", get(checkpoints::diff))
        .route(
            "/checkpoints/{checkpoint}/archive",
            get(checkpoints::archive),
        )
        .route("/blobs/missing", post(checkpoints::missing))
        .route(
            "/blobs/{sha256}",
            get(checkpoints::get_blob).put(checkpoints::put_blob),
        )
        .route("/bridge", get(crate::ws::bridge::upgrade))
        .route("/auth/login", post(access::login))
        .route(
            "/auth/setup",
            get(crate::access::setup::status).post(crate::access::setup::setup),
        )
        .route("/auth/refresh", post(access::refresh))
        .route("/auth/logout", post(access::logout))
        .route("/auth/device", post(crate::access::device::start))
        .route("/auth/device/approve", post(crate::access::device::approve))
        .route("/auth/device/deny", post(crate::access::device::deny))
        .route("/auth/device/token", post(crate::access::device::token))
        .route("/users", post(access::create_user))
        .route("/users/{name}/revoke", post(access::revoke_user))
        .route(
            "/sessions/{id}/share-links",
            post(access::create_share_link).get(crate::access::sharing::list_share_links),
        )
        .route(
            "/sessions/{id}/members",
            get(crate::access::sharing::list_members),
        )
        .route("/share-links/redeem", post(access::redeem_share_link))
        .route(
            "/share-links/{id}",
            axum::routing::delete(access::revoke_share_link),
        )
        .route(
            "/sessions/{id}/members/{user}",
            put(access::put_member).delete(access::delete_member),
        )
        .fallback(|_: crate::auth::AuthUser| async { ApiError::NotFound("route") });
    Router::new()
        .route("/healthz", get(health::get))
        .nest("/api/v1", api)
        .merge(crate::web::router())
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::access::guard::layer,
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

/// Parses a JSON body into `T`, answering with our error format for anything wrong with it.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    body: Result<bytes::Bytes, axum::extract::rejection::BytesRejection>,
    limit: usize,
) -> Result<T, ApiError> {
    let body = body.map_err(|e| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge(limit)
        } else {
            ApiError::Invalid {
                field: "body",
                reason: e.body_text(),
            }
        }
    })?;
    serde_json::from_slice(&body).map_err(|e| ApiError::Invalid {
        field: "body",
        reason: e.to_string(),
    })
}
