//! `POST /api/v1/sessions/{id}/inputs`: remote input over HTTP (controllers). Validation and
//! the append are the session core's (`session::input`).
//!
//! Part of the HTTP transport: never `sse` or `ws`.

use axum::extract::{Path, State};
use moor_protocol::api::{InputAccepted, InputRequest};
use moor_protocol::SessionId;

use crate::access::{session_for, AuthUser, Principal, Role};
use crate::error::ApiError;
use crate::extract::Json;
use crate::session::input::submit;
use crate::state::AppState;

/// `POST /api/v1/sessions/{id}/inputs`.
#[utoipa::path(
    post, path = "/sessions/{id}/inputs", operation_id = "postInput", tag = "sessions",
    params(("id" = String, Path, description = "Session id or name")),
    request_body = InputRequest,
    responses(
        (status = 200, description = "Stored (or the same input already stored under this `client_msg_id`); `queued` when no bridge holds the session's lease", body = InputAccepted),
        crate::openapi::RoleBodyErrors,
        crate::openapi::Conflict,
    )
)]
pub(super) async fn create(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
    Json(req): Json<InputRequest>,
) -> Result<Json<InputAccepted>, ApiError> {
    let session = session_for(&state.store, &who, &key, Role::Controller).await?;
    Ok(Json(submit_input(&state, session.id, &who, req).await?))
}

/// Submits `req` to `session` as `who`: validated and appended by [`submit`].
pub(super) async fn submit_input(
    state: &AppState,
    session: SessionId,
    who: &Principal,
    req: InputRequest,
) -> Result<InputAccepted, ApiError> {
    submit(
        &state.log,
        &*state.store.log,
        &state.leases,
        &state.states,
        session,
        who.author(),
        req,
    )
    .await
}
