//! `GET /healthz`: the only route that answers without a token.
//!
//! Part of the HTTP transport: calls `store`; never `sse` or `ws`.

use crate::extract::Json;
use axum::extract::State;
use moor_protocol::api::Health;

use crate::error::ApiError;
use crate::state::AppState;

/// Healthy when the store answers.
#[utoipa::path(
    get, path = "/healthz", operation_id = "health", tag = "server", security(()),
    responses((status = 200, description = "The store answers", body = moor_protocol::api::Health))
)]
pub(super) async fn get(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    state.store.log.list_sessions(None, 1).await?;
    Ok(Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    }))
}
