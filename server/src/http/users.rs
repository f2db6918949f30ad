//! User management endpoints (administrators): add a user, revoke a user. Names and passwords
//! are checked by `access::users`; nothing here logs a password.
//!
//! Part of the HTTP transport: calls `access` and `store`; never `sse` or `ws`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use moor_protocol::now_ms;
use serde::Deserialize;

use crate::access::users::add_user;
use crate::access::{revoke, AuthUser};
use crate::error::ApiError;
use crate::extract::Json;
use crate::state::AppState;
use crate::store::Revocation;

/// `POST /api/v1/users`.
#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct NewUser {
    /// 1 to 64 of `[A-Za-z0-9._-]`, not `admin`.
    name: String,
    /// 8 to 1024 bytes.
    password: String,
    /// Make an administrator.
    #[serde(default)]
    admin: bool,
}

moor_protocol::debug_fields!(NewUser { name, admin });

/// `POST /api/v1/users` `{name, password, admin?}` (admin): adds a user.
#[utoipa::path(
    post, path = "/users", operation_id = "createUser", tag = "access",
    request_body = NewUser,
    responses(
        (status = 201, description = "The user was added"),
        crate::openapi::BodyErrors, crate::openapi::Forbidden, crate::openapi::Conflict,
    )
)]
pub(crate) async fn create_user(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Json(req): Json<NewUser>,
) -> Result<StatusCode, ApiError> {
    if !who.admin {
        return Err(ApiError::Forbidden);
    }
    add_user(
        state.store.access.as_ref(),
        &req.name,
        req.password,
        req.admin,
    )
    .await?;
    Ok(StatusCode::CREATED)
}

/// `POST /api/v1/users/{name}/revoke` (admin): the user can no longer log in, refresh or use
/// any token, and their live streams and sockets end.
#[utoipa::path(
    post, path = "/users/{name}/revoke", operation_id = "revokeUser", tag = "access",
    params(("name" = String, Path, description = "The user name")),
    responses(
        (status = 204, description = "The user is revoked"),
        crate::openapi::RoleErrors,
    )
)]
pub(crate) async fn revoke_user(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if !who.admin {
        return Err(ApiError::Forbidden);
    }
    state
        .store
        .access
        .revoke_user(&name, now_ms())
        .await
        .map_err(ApiError::missing("user"))?;
    revoke(&state.auth, &state.store, Revocation::User(name)).await;
    Ok(StatusCode::NO_CONTENT)
}
