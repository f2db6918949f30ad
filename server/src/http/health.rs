//! `GET /healthz`: the only route that answers without a token.

use axum::extract::State;
use axum::Json;
use moor_protocol::api::Health;

use crate::error::ApiError;
use crate::state::AppState;

/// Healthy when the store answers.
pub(super) async fn get(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    state.store.log.list_sessions().await?;
    Ok(Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    }))
}
