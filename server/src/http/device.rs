//! Device login endpoints (RFC 8628 in spirit): start a grant, approve or deny it (a logged-in
//! user), and poll for the token pair. The grants themselves are `access::device`.
//!
//! Part of the HTTP transport: calls `access`; never `sse` or `ws`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::Deserialize;
use serde_json::json;

use super::auth::start_family;
use super::guard::ClientIp;
use crate::access::device::{user_code, Decision, GRANT_TTL};
use crate::access::{random_secret, token_hash, AuthUser};
use crate::error::ApiError;
use crate::extract::Json;
use crate::state::AppState;

/// `POST /api/v1/auth/device`: starts a grant.
#[utoipa::path(
    post, path = "/auth/device", operation_id = "startDeviceGrant", tag = "access", security(()),
    responses(
        (status = 200, description = "A new device grant", body = crate::openapi::DeviceGrant),
    )
)]
pub(crate) async fn start(
    State(state): State<AppState>,
    ip: Option<Extension<ClientIp>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let device_code = random_secret();
    let code = user_code();
    let address = ip.and_then(|Extension(ClientIp(ip))| ip);
    state
        .auth
        .devices
        .start(token_hash(&device_code), code.clone(), address)?;
    // The web app's routes are `#/page&key=value`: the complete link opens the approval page
    // with the code filled in.
    let uri = format!("{}/#/device", state.public_url);
    Ok(Json(json!({
        "device_code": device_code,
        "user_code": code,
        "verification_uri": uri,
        "verification_uri_complete": format!("{uri}&code={code}"),
        "expires_in": GRANT_TTL.as_secs(),
        "interval": 1,
    })))
}

/// `POST /api/v1/auth/device/approve` and `/deny`.
#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct Approve {
    /// The code the device shows.
    user_code: String,
}

/// `POST /api/v1/auth/device/approve` `{user_code}`: the logged-in user lends the device their
/// identity (a new token family of theirs).
#[utoipa::path(
    post, path = "/auth/device/approve", operation_id = "approveDevice", tag = "access",
    request_body = Approve,
    responses(
        (status = 204, description = "The device will get a token pair of the caller's"),
        crate::openapi::BodyLookupErrors,
    )
)]
pub(crate) async fn approve(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Json(req): Json<Approve>,
) -> Result<StatusCode, ApiError> {
    let Some(user) = who.user() else {
        return Err(ApiError::Invalid {
            field: "user_code",
            reason: "the admin token has no account to lend; log in as a user".into(),
        });
    };
    state
        .auth
        .devices
        .decide(&req.user_code, Decision::Approved(user.to_owned()))?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/v1/auth/device/deny` `{user_code}`: a logged-in user refuses the device; its next
/// poll is told so and the code is gone.
#[utoipa::path(
    post, path = "/auth/device/deny", operation_id = "denyDevice", tag = "access",
    request_body = Approve,
    responses(
        (status = 204, description = "The device is refused"),
        crate::openapi::BodyLookupErrors,
    )
)]
pub(crate) async fn deny(
    State(state): State<AppState>,
    AuthUser(_who): AuthUser,
    Json(req): Json<Approve>,
) -> Result<StatusCode, ApiError> {
    state
        .auth
        .devices
        .decide(&req.user_code, Decision::Denied)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/v1/auth/device/token`.
#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct Poll {
    /// The device's secret from `POST /api/v1/auth/device`.
    device_code: String,
}

/// `POST /api/v1/auth/device/token` `{device_code}`: `202 {"status":"pending"}` until approved,
/// then the token pair once; 403 once if it was denied; 404 for an unknown or expired code.
#[utoipa::path(
    post, path = "/auth/device/token", operation_id = "pollDeviceToken", tag = "access", security(()),
    request_body = Poll,
    responses(
        crate::openapi::TokensIssued,
        (status = 202, description = "Not decided yet: poll again after `interval` seconds", body = crate::openapi::DevicePending),
        crate::openapi::BadRequest, crate::openapi::NotFound, crate::openapi::TooLarge,
        (status = 403, description = "`forbidden`: the user denied the device (answered once)", body = moor_protocol::error::ErrorBody),
    )
)]
pub(crate) async fn token(
    State(state): State<AppState>,
    Json(req): Json<Poll>,
) -> Result<Response, ApiError> {
    let key = token_hash(&req.device_code);
    let user = {
        let mut grants = state.auth.devices.lock();
        match grants.get(&key).map(|g| &g.decision) {
            None => return Err(ApiError::NotFound("device code")),
            Some(Decision::Pending) => {
                return Ok(
                    (StatusCode::ACCEPTED, Json(json!({"status": "pending"}))).into_response()
                )
            }
            Some(_) => match grants.remove(&key).map(|g| g.decision) {
                Some(Decision::Approved(user)) => user,
                _ => return Err(ApiError::Forbidden),
            },
        }
    };
    start_family(&state, &user).await
}
