//! `GET /healthz` (liveness) and `GET /readyz` (readiness): the only routes that answer without
//! a token.
//!
//! Part of the HTTP transport: calls `store`; never `sse` or `ws`.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use moor_protocol::api::Health;
use moor_protocol::error::{ErrorBody, ErrorCode};
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::extract::Json;
use crate::state::AppState;

/// Longest the readiness probe waits for the store.
const READY_TIMEOUT: Duration = Duration::from_secs(3);

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

/// A ready node's answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Readiness {
    /// Always `ready`.
    status: &'static str,
}

/// Ready when the store answers within a bounded time, its schema is the one this build
/// migrates to, and (on Postgres) this node is listening to the other nodes' notices.
#[utoipa::path(
    get, path = "/readyz", operation_id = "ready", tag = "server", security(()),
    responses(
        (status = 200, description = "The node can serve", body = Readiness),
        (status = 503, description = "The node cannot serve; `message` says why", body = moor_protocol::error::ErrorBody),
    )
)]
pub(super) async fn ready(State(state): State<AppState>) -> Response {
    match not_ready(&state).await {
        None => Json(Readiness { status: "ready" }).into_response(),
        Some(reason) => {
            tracing::warn!(%reason, "not ready");
            let body = ErrorBody {
                code: ErrorCode::Unavailable,
                message: reason,
                stored: None,
            };
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}

/// Why the node is not ready, if it is not, in words safe to show anyone (causes are logged).
async fn not_ready(state: &AppState) -> Option<String> {
    let probe = tokio::time::timeout(READY_TIMEOUT, state.store.log.schema_versions()).await;
    let (applied, built) = match probe {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            state.hub.metrics().store_errors.inc();
            tracing::warn!(error = ?e, "readiness: the store failed");
            return Some("the store cannot be reached".to_owned());
        }
        Err(_) => {
            state.hub.metrics().store_errors.inc();
            return Some(format!(
                "the store did not answer within {} s",
                READY_TIMEOUT.as_secs()
            ));
        }
    };
    if applied != built {
        return Some(format!(
            "the database schema is at migration {applied}, this build expects {built}"
        ));
    }
    match &state.store.cluster {
        Some(cluster) if !cluster.listening() => {
            Some("not listening to the other nodes' notices".to_owned())
        }
        _ => None,
    }
}
