//! Device login (RFC 8628 in spirit): a program without a browser (`moor login`) asks for a
//! grant and shows its short user code; a logged-in user approves the code (web UI or API);
//! the program polls and receives its own token family. Pending grants live in memory for ten
//! minutes: a restart only means running `moor login` again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rand::Rng;
use serde::Deserialize;
use serde_json::json;

use super::{random_secret, token_hash};
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::http::parse_json;
use crate::state::AppState;

/// How long a grant waits for approval.
pub const GRANT_TTL: Duration = Duration::from_secs(600);
/// Most pending grants at once (they cost nothing to ask for).
const MAX_GRANTS: usize = 10_000;
/// User codes: no vowels (no words), no look-alikes.
const ALPHABET: &[u8] = b"BCDFGHJKLMNPQRSTVWXZ23456789";

#[derive(Debug)]
struct Grant {
    user_code: String,
    created: Instant,
    decision: Decision,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Decision {
    Pending,
    Approved(String),
    Denied,
}

/// Pending device grants, by the hash of their device code.
#[derive(Debug, Clone, Default)]
pub struct DeviceGrants {
    grants: Arc<Mutex<HashMap<String, Grant>>>,
}

impl DeviceGrants {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Grant>> {
        let mut g = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        g.retain(|_, grant| grant.created.elapsed() < GRANT_TTL);
        g
    }
}

fn user_code() -> String {
    let mut rng = rand::thread_rng();
    let mut code: String = (0..8)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect();
    code.insert(4, '-');
    code
}

fn normalise(code: &str) -> String {
    let raw: String = code
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_uppercase())
        .collect();
    if raw.len() == 8 {
        format!("{}-{}", &raw[..4], &raw[4..])
    } else {
        raw
    }
}

/// `POST /api/v1/auth/device`: starts a grant.
#[utoipa::path(
    post, path = "/auth/device", operation_id = "startDeviceGrant", tag = "access", security(()),
    responses(
        (status = 200, description = "A new device grant", body = crate::openapi::DeviceGrant),
    )
)]
pub(crate) async fn start(
    State(state): State<AppState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let device_code = random_secret();
    let code = user_code();
    {
        let mut grants = state.auth.devices.lock();
        if grants.len() >= MAX_GRANTS {
            return Err(ApiError::RateLimited(GRANT_TTL.as_secs() / 10));
        }
        grants.insert(
            token_hash(&device_code),
            Grant {
                user_code: code.clone(),
                created: Instant::now(),
                decision: Decision::Pending,
            },
        );
    }
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
        crate::openapi::BadRequest,
        crate::openapi::Unauthorized,
        crate::openapi::NotFound,
        crate::openapi::TooLarge,
    )
)]
pub(crate) async fn approve(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    body: Result<bytes::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let req: Approve = parse_json(body, state.config.max_body_bytes)?;
    let Some(user) = who.user() else {
        return Err(ApiError::Invalid {
            field: "user_code",
            reason: "the admin token has no account to lend; log in as a user".into(),
        });
    };
    decide(&state, &req.user_code, Decision::Approved(user.to_owned()))
}

/// `POST /api/v1/auth/device/deny` `{user_code}`: a logged-in user refuses the device; its next
/// poll is told so and the code is gone.
#[utoipa::path(
    post, path = "/auth/device/deny", operation_id = "denyDevice", tag = "access",
    request_body = Approve,
    responses(
        (status = 204, description = "The device is refused"),
        crate::openapi::BadRequest,
        crate::openapi::Unauthorized,
        crate::openapi::NotFound,
        crate::openapi::TooLarge,
    )
)]
pub(crate) async fn deny(
    State(state): State<AppState>,
    AuthUser(_who): AuthUser,
    body: Result<bytes::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let req: Approve = parse_json(body, state.config.max_body_bytes)?;
    decide(&state, &req.user_code, Decision::Denied)
}

fn decide(state: &AppState, user_code: &str, decision: Decision) -> Result<StatusCode, ApiError> {
    let code = normalise(user_code);
    let mut grants = state.auth.devices.lock();
    let grant = grants
        .values_mut()
        .find(|g| g.user_code == code && g.decision == Decision::Pending)
        .ok_or(ApiError::NotFound("device code"))?;
    grant.decision = decision;
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
        (status = 200, description = "A new token pair; also set as the `moor_access` and `moor_refresh` cookies", body = super::TokenPair, headers(("Set-Cookie" = String, description = "`moor_access` and `moor_refresh`"))),
        (status = 202, description = "Not decided yet: poll again after `interval` seconds", body = crate::openapi::DevicePending),
        crate::openapi::BadRequest, crate::openapi::NotFound, crate::openapi::TooLarge,
        (status = 403, description = "`forbidden`: the user denied the device (answered once)", body = moor_protocol::error::ErrorBody),
    )
)]
pub(crate) async fn token(
    State(state): State<AppState>,
    body: Result<bytes::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let req: Poll = parse_json(body, state.config.max_body_bytes)?;
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
    super::http::start_family(&state, &user).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_codes_are_short_unambiguous_and_typed_any_way() {
        let c = user_code();
        assert_eq!(c.len(), 9);
        assert!(c
            .chars()
            .all(|ch| ch == '-' || ALPHABET.contains(&(ch as u8))));
        assert_eq!(normalise(&c.to_lowercase().replace('-', " ")), c);
    }
}
