//! First-start setup endpoints: whether setup is open, and creating the first administrator
//! with the one-time code (`access::setup`).
//!
//! Part of the HTTP transport: calls `access` and `store`; never `sse` or `ws`.

use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use moor_protocol::now_ms;
use serde::Deserialize;

use super::auth::start_family;
use super::guard::ClientIp;
use crate::access::setup::CodeCheck;
use crate::access::users::validated_user;
use crate::error::ApiError;
use crate::extract::Json;
use crate::state::AppState;
use crate::store::StoreError;

/// `GET /api/v1/auth/setup`: `{"open": bool}`: whether the setup page can create the first
/// administrator here (none exists and this server holds a live code). No credentials needed,
/// no secrets answered.
#[utoipa::path(
    get, path = "/auth/setup", operation_id = "getSetupStatus", tag = "access", security(()),
    responses(
        (status = 200, description = "Whether first-start setup is open", body = crate::openapi::SetupStatus),
    )
)]
pub(crate) async fn status(
    State(state): State<AppState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let open = state.auth.setup.is_live() && !state.store.access.has_admin().await?;
    Ok(Json(serde_json::json!({ "open": open })))
}

/// `POST /api/v1/auth/setup`.
#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct SetupRequest {
    /// The setup code `moord` printed at start.
    code: String,
    /// The first administrator's user name.
    name: String,
    /// Their password.
    password: String,
}

moor_protocol::debug_fields!(SetupRequest { name });

fn setup_done() -> ApiError {
    ApiError::Gone(
        "setup is done: an administrator exists; log in (POST /api/v1/auth/login)".to_owned(),
    )
}

/// `POST /api/v1/auth/setup` `{code, name, password}`: creates the first administrator and
/// logs them in, answering exactly like `POST /api/v1/auth/login`. A wrong or expired code is
/// 401 (and throttled like a failed login); once an administrator exists, 410.
#[utoipa::path(
    post, path = "/auth/setup", operation_id = "setup", tag = "access", security(()),
    request_body = SetupRequest,
    responses(
        crate::openapi::TokensIssued,
        crate::openapi::BodyErrors, crate::openapi::Conflict, crate::openapi::Gone,
    )
)]
pub(crate) async fn setup(
    State(state): State<AppState>,
    ip: Option<Extension<ClientIp>>,
    Json(req): Json<SetupRequest>,
) -> Result<Response, ApiError> {
    let ip = ip.and_then(|Extension(ClientIp(ip))| ip);
    let throttle = format!("setup-ip:{}", ip.map(|i| i.to_string()).unwrap_or_default());
    let limits = &state.auth.limits.setup;
    limits.peek(&throttle).map_err(ApiError::RateLimited)?;
    if state.store.access.has_admin().await? {
        return Err(setup_done());
    }
    match state.auth.setup.check(&req.code) {
        CodeCheck::Valid => {}
        check => {
            let _ = limits.check(&throttle);
            tracing::info!(expired = check == CodeCheck::Expired, "setup code refused");
            return Err(ApiError::Unauthorized);
        }
    }
    let phc = validated_user(&req.name, req.password).await?;
    match state
        .store
        .access
        .create_first_admin(&req.name, &phc, now_ms())
        .await
    {
        Ok(true) => {}
        Ok(false) => return Err(setup_done()),
        Err(StoreError::Conflict(_)) => {
            return Err(ApiError::Conflict(format!(
                "user {:?} already exists; choose another name",
                req.name
            )))
        }
        Err(e) => return Err(e.into()),
    }
    state.auth.setup.consume();
    limits.clear(&throttle);
    tracing::info!(user = %req.name, "first administrator created");
    start_family(&state, &req.name).await
}
