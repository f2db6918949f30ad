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
use crate::store::{Revocation, StoreError};

#[derive(Deserialize)]
pub(crate) struct NewUser {
    name: String,
    password: String,
    #[serde(default)]
    admin: bool,
}

impl std::fmt::Debug for NewUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewUser")
            .field("name", &self.name)
            .field("admin", &self.admin)
            .finish_non_exhaustive()
    }
}

/// `POST /api/v1/users` `{name, password, admin?}` (admin): adds a user.
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
        .map_err(|e| match e {
            StoreError::NotFound => ApiError::NotFound("user"),
            e => e.into(),
        })?;
    revoke(&state.auth, &state.store, Revocation::User(name)).await;
    Ok(StatusCode::NO_CONTENT)
}
