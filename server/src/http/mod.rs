//! The HTTP transport: JSON API routes and request/response mapping, one file per resource,
//! plus the request guard (`guard`). Handlers extract, call `access`, the session core, the
//! store or the hub, and map the result; no SQL here, no hub locks held. It never calls `sse` or
//! `ws` (the application router in `app` puts the transports side by side).

mod auth;
mod checkpoints;
mod device;
pub(crate) mod guard;
mod health;
mod inputs;
mod recovery;
mod sessions;
mod setup;
mod sharing;
mod users;

use axum::routing::{delete, get, post, put};
use axum::Router;

use crate::access::AuthUser;
use crate::error::ApiError;
use crate::state::AppState;

/// The JSON API routes, relative to `/api/v1`.
pub(crate) fn api() -> Router<AppState> {
    Router::new()
        .route("/me", get(sessions::me))
        .route("/sessions", get(sessions::list))
        .route("/sessions/{id}", get(sessions::get))
        .route("/sessions/{id}/entries", get(sessions::entries))
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
        .route("/auth/login", post(auth::login))
        .route("/auth/setup", get(setup::status).post(setup::setup))
        .route("/auth/refresh", post(auth::refresh))
        .route("/auth/logout", post(auth::logout))
        .route("/auth/device", post(device::start))
        .route("/auth/device/approve", post(device::approve))
        .route("/auth/device/deny", post(device::deny))
        .route("/auth/device/token", post(device::token))
        .route("/users", post(users::create_user))
        .route("/users/{name}/revoke", post(users::revoke_user))
        .route(
            "/sessions/{id}/share-links",
            post(sharing::create_share_link).get(sharing::list_share_links),
        )
        .route("/sessions/{id}/members", get(sharing::list_members))
        .route("/share-links/redeem", post(sharing::redeem_share_link))
        .route("/share-links/{id}", delete(sharing::revoke_share_link))
        .route(
            "/sessions/{id}/members/{user}",
            put(sharing::put_member).delete(sharing::delete_member),
        )
}

/// Answer for an unknown API route: 401 without credentials, else 404.
pub(crate) async fn not_found(_: AuthUser) -> ApiError {
    ApiError::NotFound("route")
}

/// `/healthz`.
pub(crate) fn health() -> Router<AppState> {
    Router::new().route("/healthz", get(health::get))
}
