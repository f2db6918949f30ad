//! Access endpoints: password login, refresh (rotating), logout, user management (admin) and
//! session members (owners). Passwords and tokens pass through here and are never logged.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{AppendHeaders, IntoResponse, Response};
use axum::Extension;
use axum::Json;
use moor_protocol::now_ms;
use serde::Deserialize;

use super::guard::ClientIp;
use super::{
    new_refresh, password, random_secret, revoke, session_for, token_hash, Role, TokenPair,
};
use crate::auth::{cookie, AuthUser, ACCESS_COOKIE, REFRESH_COOKIE};
use crate::error::ApiError;
use crate::http::parse_json;
use crate::state::AppState;
use crate::store::{RefreshOutcome, Revocation, ShareLinkRow, StoreError};

type Body = Result<bytes::Bytes, axum::extract::rejection::BytesRejection>;

/// Longest user name.
const MAX_NAME: usize = 64;
/// Longest password accepted (argon2 takes any length; this bounds the work).
const MAX_PASSWORD: usize = 1024;

#[derive(Deserialize)]
pub(crate) struct Credentials {
    name: String,
    password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Whether `name` may be a user name: 1 to 64 of `[A-Za-z0-9._-]`, and not `admin` (the
/// bootstrap admin's name in session roles and authorship).
pub fn valid_user_name(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && name != "admin"
}

async fn check_password(password: String, phc: String) -> bool {
    tokio::task::spawn_blocking(move || password::verify(&password, &phc))
        .await
        .unwrap_or(false)
}

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
pub(crate) async fn login(
    State(state): State<AppState>,
    ip: Option<Extension<ClientIp>>,
    body: Body,
) -> Result<Response, ApiError> {
    let req: Credentials = parse_json(body, state.config.max_body_bytes)?;
    let ip = ip.and_then(|Extension(ClientIp(ip))| ip);
    // Failed logins are throttled per client address and per name.
    let throttle = [
        format!("login-ip:{}", ip.map(|i| i.to_string()).unwrap_or_default()),
        format!("login-user:{}", req.name),
    ];
    for key in &throttle {
        state
            .auth
            .limits
            .logins
            .peek(key)
            .map_err(ApiError::RateLimited)?;
    }
    if req.password.len() > MAX_PASSWORD {
        return Err(ApiError::Unauthorized);
    }
    let user = match state.store.access.user(&req.name).await {
        Ok(u) => Some(u),
        Err(StoreError::NotFound) => None,
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
            state.auth.limits.logins.clear(&throttle[1]);
            start_family(&state, &u.name).await
        }
        _ => {
            for key in &throttle {
                let _ = state.auth.limits.logins.check(key);
            }
            tracing::info!(user = %req.name, "login refused");
            Err(ApiError::Unauthorized)
        }
    }
}

#[derive(Deserialize, Default)]
pub(crate) struct RefreshRequest {
    #[serde(default)]
    refresh_token: Option<String>,
}

/// `POST /api/v1/auth/refresh` `{refresh_token}` (or the `moor_refresh` cookie): spends the
/// token and answers with a new pair. A token that was spent already revokes its family and
/// ends its live connections.
pub(crate) async fn refresh(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let empty = body.as_ref().map(|b| b.is_empty()).unwrap_or(false);
    let req: RefreshRequest = if empty {
        RefreshRequest::default()
    } else {
        parse_json(body, state.config.max_body_bytes)?
    };
    let token = req
        .refresh_token
        .or_else(|| cookie(&headers, REFRESH_COOKIE))
        .ok_or(ApiError::Unauthorized)?;
    let (next, row) = new_refresh("", state.auth.refresh_ttl);
    match state
        .store
        .access
        .rotate_refresh(&token_hash(&token), &row, now_ms())
        .await?
    {
        RefreshOutcome::Rotated { family, user } => tokens_response(&state, &user, &family, next),
        RefreshOutcome::Reused { family, user } => {
            tracing::warn!(%user, "refresh token reused: its family is revoked");
            revoke(&state, Revocation::Family(family)).await;
            Err(ApiError::Unauthorized)
        }
        RefreshOutcome::Invalid => Err(ApiError::Unauthorized),
    }
}

/// `POST /api/v1/auth/logout`: revokes the caller's token family (its refresh tokens stop
/// working, its live connections end) and clears the cookies.
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
        revoke(&state, Revocation::Family(family.clone())).await;
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
    body: Body,
) -> Result<StatusCode, ApiError> {
    if !who.admin {
        return Err(ApiError::Forbidden);
    }
    let req: NewUser = parse_json(body, state.config.max_body_bytes)?;
    add_user(
        state.store.access.as_ref(),
        &req.name,
        req.password,
        req.admin,
    )
    .await?;
    Ok(StatusCode::CREATED)
}

/// Validates and stores a new user, an administrator when `admin` (shared by the API and
/// `moord user add`).
pub async fn add_user(
    store: &dyn crate::store::AccessStore,
    name: &str,
    password: String,
    admin: bool,
) -> Result<(), ApiError> {
    let phc = validated_user(name, password).await?;
    match store.create_user(name, &phc, admin, now_ms()).await {
        Err(StoreError::Conflict(_)) => {
            Err(ApiError::Conflict(format!("user {name:?} already exists")))
        }
        other => Ok(other?),
    }
}

/// Checks a new user's name and password; the password's argon2id hash.
pub(crate) async fn validated_user(name: &str, password: String) -> Result<String, ApiError> {
    if !valid_user_name(name) {
        return Err(ApiError::Invalid {
            field: "name",
            reason: "1 to 64 letters, digits, '.', '_' or '-', and not \"admin\"".into(),
        });
    }
    if password.len() < 8 || password.len() > MAX_PASSWORD {
        return Err(ApiError::Invalid {
            field: "password",
            reason: format!("must be 8 to {MAX_PASSWORD} bytes"),
        });
    }
    Ok(
        tokio::task::spawn_blocking(move || password::hash(&password))
            .await
            .map_err(|e| ApiError::Internal(e.into()))??,
    )
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
    revoke(&state, Revocation::User(name)).await;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
pub(crate) struct MemberRequest {
    role: String,
}

/// `PUT /api/v1/sessions/{id}/members/{user}` `{role}` (owner): shares the session.
pub(crate) async fn put_member(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path((key, user)): Path<(String, String)>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let req: MemberRequest = parse_json(body, state.config.max_body_bytes)?;
    let role = Role::parse(&req.role).ok_or_else(|| ApiError::Invalid {
        field: "role",
        reason: "one of viewer, controller, owner".into(),
    })?;
    let session = session_for(&state, &who, &key, Role::Owner).await?;
    match state.store.access.user(&user).await {
        Ok(u) if u.revoked_at.is_none() => {}
        Ok(_) | Err(StoreError::NotFound) => return Err(ApiError::NotFound("user")),
        Err(e) => return Err(e.into()),
    }
    state
        .store
        .access
        .set_member(session.id, &user, role)
        .await?;
    // Their open connections carry the old role: end them (they reconnect with the new one).
    let member = Revocation::Member {
        session: session.id,
        principal: user,
    };
    revoke(&state, member).await;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/v1/sessions/{id}/members/{user}` (owner): stops sharing with `user`.
pub(crate) async fn delete_member(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path((key, user)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let session = session_for(&state, &who, &key, Role::Owner).await?;
    state.store.access.remove_member(session.id, &user).await?;
    let member = Revocation::Member {
        session: session.id,
        principal: user,
    };
    revoke(&state, member).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Longest a share link may live.
const MAX_LINK_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Most uses of one share link.
const MAX_LINK_USES: i64 = 1000;

#[derive(Deserialize)]
pub(crate) struct NewShareLink {
    role: String,
    /// Seconds it stays valid (default one day).
    #[serde(default)]
    expires_in: Option<u64>,
    /// How many people may redeem it (default 1).
    #[serde(default)]
    uses: Option<i64>,
}

/// `POST /api/v1/sessions/{id}/share-links` `{role, expires_in?, uses?}` (owner): a link that
/// grants `role` to whoever logs in and redeems it. The secret is in the answer only.
pub(crate) async fn create_share_link(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
    body: Body,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let session = session_for(&state, &who, &key, Role::Owner).await?;
    let req: NewShareLink = parse_json(body, state.config.max_body_bytes)?;
    let role = Role::parse(&req.role).ok_or_else(|| ApiError::Invalid {
        field: "role",
        reason: "one of viewer, controller, owner".into(),
    })?;
    let ttl = Duration::from_secs(req.expires_in.unwrap_or(24 * 3600)).min(MAX_LINK_TTL);
    let uses = req.uses.unwrap_or(1);
    if !(1..=MAX_LINK_USES).contains(&uses) {
        return Err(ApiError::Invalid {
            field: "uses",
            reason: format!("1 to {MAX_LINK_USES}"),
        });
    }
    let secret = random_secret();
    let now = now_ms();
    let row = ShareLinkRow {
        id: uuid::Uuid::new_v4().to_string(),
        token_hash: token_hash(&secret),
        session: session.id,
        role,
        created_by: who.name.clone(),
        created_at: now,
        expires_at: now.saturating_add(ttl.as_millis() as i64),
        uses_left: uses,
        max_uses: Some(uses),
        revoked_at: None,
    };
    state.store.access.create_share_link(&row).await?;
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({
            "id": row.id,
            "token": secret,
            "url": format!("{}/#/join&link={secret}", state.public_url),
            "role": row.role,
            "expires_at": row.expires_at,
            "uses": uses,
        })),
    ))
}

#[derive(Deserialize)]
pub(crate) struct Redeem {
    token: String,
}

/// `POST /api/v1/share-links/redeem` `{token}` (a logged-in user): joins the session with the
/// link's role (an existing role is kept). 404 for an unknown, expired, used-up or revoked link.
pub(crate) async fn redeem_share_link(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    body: Body,
) -> Result<Json<serde_json::Value>, ApiError> {
    let req: Redeem = parse_json(body, state.config.max_body_bytes)?;
    if who.admin {
        return Err(ApiError::Invalid {
            field: "token",
            reason: "the admin owns every session already".into(),
        });
    }
    let (session, role) = state
        .store
        .access
        .redeem_share_link(&token_hash(&req.token), &who.name, now_ms())
        .await?
        .ok_or(ApiError::NotFound("share link"))?;
    Ok(Json(
        serde_json::json!({ "session": session, "role": role }),
    ))
}

/// `DELETE /api/v1/share-links/{id}` (the session's owner): the link stops working, and the
/// people who joined through it lose their role and their live connections.
pub(crate) async fn revoke_share_link(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let session = match state.store.access.share_link_session(&id).await {
        Ok(s) => s,
        Err(StoreError::NotFound) => return Err(ApiError::NotFound("share link")),
        Err(e) => return Err(e.into()),
    };
    session_for(&state, &who, &session.to_string(), Role::Owner)
        .await
        .map_err(|e| match e {
            ApiError::NotFound(_) => ApiError::NotFound("share link"),
            e => e,
        })?;
    let (session, members) = state.store.access.revoke_share_link(&id, now_ms()).await?;
    for principal in members {
        revoke(&state, Revocation::Member { session, principal }).await;
    }
    Ok(StatusCode::NO_CONTENT)
}
