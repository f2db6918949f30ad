//! Login endpoints: password login, refresh (rotating), logout, and the token pair and cookies
//! every login answers with. Passwords and tokens pass through here and are never logged.
//!
//! Part of the HTTP transport: calls `access`, `store` and `extract`; never `sse` or `ws`.

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{AppendHeaders, IntoResponse, Response};
use axum::Extension;
use moor_protocol::now_ms;
use serde::Deserialize;

use super::guard::ClientIp;
use crate::access::throttle::{ADDRESS_BACKOFF, NAME_BACKOFF};
use crate::access::users::{check_password, MAX_NAME, MAX_PASSWORD};
use crate::access::{
    new_refresh, password, random_secret, revoke, token_hash, AuthUser, TokenPair, ACCESS_COOKIE,
    REFRESH_COOKIE,
};
use crate::error::ApiError;
use crate::extract::Json;
use crate::state::AppState;
use crate::store::{RefreshOutcome, Revocation, StoreError};
use crate::util::{cookie, LogStr};

/// `POST /api/v1/auth/login`.
#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct Credentials {
    /// User name.
    name: String,
    /// Password.
    password: String,
}

moor_protocol::debug_fields!(Credentials { name });

/// Issues a new token family for `user` and answers with the pair and the browser cookies.
pub(crate) async fn start_family(state: &AppState, user: &str) -> Result<Response, ApiError> {
    let family = random_secret();
    let (refresh, row) = new_refresh(user, state.auth.refresh_ttl);
    state
        .store
        .access
        .create_token_family(&family, &row)
        .await?;
    tokens_response(state, user, &family, refresh)
}

fn tokens_response(
    state: &AppState,
    user: &str,
    family: &str,
    refresh: String,
) -> Result<Response, ApiError> {
    let pair = TokenPair {
        access_token: state.auth.issue(user, family)?,
        token_type: "Bearer",
        expires_in: state.auth.access_ttl.as_secs().max(1),
        refresh_token: refresh,
    };
    let secure = state.public_url.starts_with("https:") || state.config.tls.is_some();
    let access = cookie_header(
        ACCESS_COOKIE,
        &pair.access_token,
        "/",
        pair.expires_in,
        secure,
    )?;
    let refresh = cookie_header(
        REFRESH_COOKIE,
        &pair.refresh_token,
        "/api/v1/auth",
        state.auth.refresh_ttl.as_secs(),
        secure,
    )?;
    Ok((
        AppendHeaders([(header::SET_COOKIE, access), (header::SET_COOKIE, refresh)]),
        Json(pair),
    )
        .into_response())
}

fn cookie_header(
    name: &str,
    value: &str,
    path: &str,
    max_age: u64,
    secure: bool,
) -> Result<HeaderValue, ApiError> {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    ))
    .map_err(|e| ApiError::Internal(e.into()))
}

/// `POST /api/v1/auth/login` `{name, password}`: a new token family.
#[utoipa::path(
    post, path = "/auth/login", operation_id = "login", tag = "access", security(()),
    request_body = Credentials,
    responses(
        crate::openapi::TokensIssued,
        crate::openapi::BodyErrors,
    )
)]
pub(crate) async fn login(
    State(state): State<AppState>,
    ip: Option<Extension<ClientIp>>,
    Json(req): Json<Credentials>,
) -> Result<Response, ApiError> {
    let ip = ip.and_then(|Extension(ClientIp(ip))| ip);
    if req.name.len() > MAX_NAME {
        return Err(ApiError::Invalid {
            field: "name",
            reason: format!("at most {MAX_NAME} bytes"),
        });
    }
    // Counted before the password is checked, so concurrent guesses cannot pass the throttle.
    let keys = [
        (format!("name:{}", req.name), NAME_BACKOFF),
        (
            format!("addr:{}", ip.map(|i| i.to_string()).unwrap_or_default()),
            ADDRESS_BACKOFF,
        ),
    ];
    let attempt = state
        .auth
        .limits
        .logins
        .begin(&keys)
        .map_err(ApiError::RateLimited)?;
    if req.password.len() > MAX_PASSWORD {
        attempt.failed();
        return Err(ApiError::Unauthorized);
    }
    let user = match state.store.access.user(&req.name).await {
        Ok(u) => Some(u),
        Err(StoreError::NotFound) => None,
        // The attempt is dropped unsettled and counts as a failure: an unreachable store must
        // not be a way around the throttle.
        Err(e) => return Err(e.into()),
    };
    // Unknown users cost a hash check too, so timing does not tell which names exist.
    let phc = user
        .as_ref()
        .map(|u| u.password_hash.clone())
        .unwrap_or_else(|| password::dummy_hash().to_owned());
    let ok = check_password(req.password, phc).await;
    match user {
        Some(u) if ok && u.revoked_at.is_none() => {
            attempt.succeeded();
            start_family(&state, &u.name).await
        }
        _ => {
            attempt.failed();
            tracing::info!(user = %LogStr(&req.name), "login refused");
            Err(ApiError::Unauthorized)
        }
    }
}

/// `POST /api/v1/auth/refresh`.
#[derive(Deserialize, Default, utoipa::ToSchema)]
pub(crate) struct RefreshRequest {
    /// The refresh token (else the `moor_refresh` cookie).
    #[serde(default)]
    refresh_token: Option<String>,
}

/// `POST /api/v1/auth/refresh` `{refresh_token}` (or the `moor_refresh` cookie): spends the
/// token and answers with a new pair. A token that was spent already revokes its family and
/// ends its live connections, unless it was spent within `--refresh-grace-ms` and the token
/// that replaced it is unused: the answer was lost, and a new pair replaces that one.
#[utoipa::path(
    post, path = "/auth/refresh", operation_id = "refresh", tag = "access", security(()),
    request_body(content = Option<RefreshRequest>, description = "The refresh token; without a body, the `moor_refresh` cookie is used"),
    responses(
        crate::openapi::TokensIssued,
        crate::openapi::BodyErrors,
    )
)]
pub(crate) async fn refresh(
    State(state): State<AppState>,
    headers: HeaderMap,
    req: Option<Json<RefreshRequest>>,
) -> Result<Response, ApiError> {
    let req = req.map(|Json(r)| r).unwrap_or_default();
    let token = req
        .refresh_token
        .or_else(|| cookie(&headers, REFRESH_COOKIE))
        .ok_or(ApiError::Unauthorized)?;
    let (next, row) = new_refresh("", state.auth.refresh_ttl);
    match state
        .store
        .access
        .rotate_refresh(
            &token_hash(&token),
            &row,
            now_ms(),
            state.auth.refresh_grace.as_millis() as i64,
        )
        .await?
    {
        RefreshOutcome::Rotated { family, user } => tokens_response(&state, &user, &family, next),
        RefreshOutcome::Reused { family, user } => {
            tracing::warn!(%user, "refresh token reused: its family is revoked");
            revoke(&state.auth, &state.store, Revocation::Family(family)).await;
            Err(ApiError::Unauthorized)
        }
        RefreshOutcome::Invalid => Err(ApiError::Unauthorized),
    }
}

/// `POST /api/v1/auth/logout`: revokes the caller's token family (its refresh tokens stop
/// working, its live connections end) and clears the cookies.
#[utoipa::path(
    post, path = "/auth/logout", operation_id = "logout", tag = "access",
    responses(
        (status = 204, description = "The token family is revoked and the cookies cleared", headers(("Set-Cookie" = String, description = "Clears `moor_access` and `moor_refresh`"))),
        crate::openapi::Unauthorized,
    )
)]
pub(crate) async fn logout(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
) -> Result<Response, ApiError> {
    if let Some(family) = &who.family {
        state
            .store
            .access
            .revoke_token_family(family, now_ms())
            .await?;
        revoke(
            &state.auth,
            &state.store,
            Revocation::Family(family.clone()),
        )
        .await;
    }
    let clear = |name: &str, path: &str| {
        HeaderValue::from_str(&format!(
            "{name}=; Path={path}; Max-Age=0; HttpOnly; SameSite=Strict"
        ))
        .map_err(|e| ApiError::Internal(e.into()))
    };
    Ok((
        StatusCode::NO_CONTENT,
        AppendHeaders([
            (header::SET_COOKIE, clear(ACCESS_COOKIE, "/")?),
            (header::SET_COOKIE, clear(REFRESH_COOKIE, "/api/v1/auth")?),
        ]),
    )
        .into_response())
}
