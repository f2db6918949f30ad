//! Access control, all of it: who is calling (`auth`, `principal`, `jwt`), accounts and
//! passwords (`users`, `password`), per-session roles (here), token families and refresh tokens,
//! revocations of live connections, device grants, the first-start setup code and rate limits.
//! It sits below the transports and the application state: it takes the store and an [`Auth`]
//! as arguments and never calls `state`, `http`, `sse`, `ws` or the session core. Its HTTP
//! endpoints live in `http::{auth, device, setup, users, sharing}`. It never logs a password or
//! a token.

pub mod action_link;
pub mod auth;
pub mod device;
pub mod host;
pub mod jwt;
pub mod limits;
pub mod password;
pub mod principal;
pub mod revocations;
pub mod setup;
pub mod throttle;
pub mod users;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

pub use auth::{
    presented_token, Auth, AuthUser, TokenSource, ACCESS_COOKIE, AUDIENCE, ISSUER, REFRESH_COOKIE,
};
pub use principal::Principal;

use crate::error::ApiError;
use crate::store::{RefreshRow, Revocation, SessionRow, StoreError, Stores};

/// What a principal may do on one session (the wire type: ordered, each role includes the ones
/// below it).
pub use moor_protocol::api::Role;

/// The role `who` has on a session, if any. Administrators own every session; a host
/// credential has none outside its machine's sessions.
pub async fn role_on(
    store: &Stores,
    who: &Principal,
    session: &SessionRow,
) -> Result<Option<Role>, ApiError> {
    if let Some(machine) = &who.machine {
        // A host credential reaches only its machine's own sessions, whatever its user may.
        if !host::in_scope(store, machine, &session.name).await? {
            return Ok(None);
        }
    }
    if who.admin {
        return Ok(Some(Role::Owner));
    }
    Ok(store.access.member_role(session.id, &who.name).await?)
}

/// The session `key` names, if `who` may act on it with at least `need`. A session the caller
/// has no role on is answered as missing (404), so its existence does not leak; a role too low
/// is 403.
pub async fn session_for(
    store: &Stores,
    who: &Principal,
    key: &str,
    need: Role,
) -> Result<SessionRow, ApiError> {
    Ok(session_with_role(store, who, key, need).await?.0)
}

/// [`session_for`], with the caller's role on it.
pub async fn session_with_role(
    store: &Stores,
    who: &Principal,
    key: &str,
    need: Role,
) -> Result<(SessionRow, Role), ApiError> {
    let session = match store.log.find_session(key).await {
        Err(StoreError::NotFound) => return Err(deleted_or_missing(store, key).await),
        found => found?,
    };
    match role_on(store, who, &session).await? {
        None => Err(ApiError::NotFound("session")),
        Some(r) if r < need => Err(ApiError::Forbidden),
        Some(r) => Ok((session, r)),
    }
}

/// The answer for a session `key` that no lookup finds: 410 saying when and why it was
/// deleted when `key` is the id of a deleted session (ids are unguessable: whoever has one was
/// given it), else 404.
pub async fn deleted_or_missing(store: &Stores, key: &str) -> ApiError {
    let Ok(id) = key.parse::<moor_protocol::SessionId>() else {
        return ApiError::NotFound("session");
    };
    match store.retention.retired_session(id).await {
        Ok(Some(r)) => ApiError::Gone(format!(
            "session {:?} was deleted on {} ({}); its history is no longer kept",
            r.name,
            moor_protocol::utc(r.retired_at),
            r.reason
        )),
        Ok(None) => ApiError::NotFound("session"),
        Err(e) => e.into(),
    }
}

/// Ends the live connections `revocation` names on this node and, on a store shared by
/// several nodes, on every other node too. Call it after the revocation is stored, so a
/// connection reopened anywhere is refused.
pub async fn revoke(auth: &Auth, store: &Stores, revocation: Revocation) {
    auth.revocations.apply(&revocation);
    announce(store, &revocation).await;
}

/// Tells the other nodes sharing `store` (if any) about `revocation`. A failure is logged, not
/// returned: the revocation is stored and applied here already, and other nodes refuse the
/// credential at its next request anyway.
pub async fn announce(store: &Stores, revocation: &Revocation) {
    if let Some(cluster) = &store.cluster {
        if let Err(e) = cluster.announce_revocation(revocation).await {
            tracing::warn!(error = ?e, "could not tell the other nodes about a revocation");
        }
    }
}

/// Seconds since the epoch.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A fresh opaque secret (refresh tokens, family ids): 32 random bytes, base64url.
pub(crate) fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The stored form of a refresh token.
pub(crate) fn token_hash(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Compares two secrets in time independent of where they differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// An access token and its refresh token, as handed to a client.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct TokenPair {
    /// The JWT.
    pub access_token: String,
    /// Always `Bearer`.
    pub token_type: &'static str,
    /// Seconds the access token lives.
    pub expires_in: u64,
    /// Single-use refresh token; the response to using it carries its successor.
    pub refresh_token: String,
}

/// A new refresh token row for `user` (its secret and the row to store).
pub(crate) fn new_refresh(user: &str, ttl: Duration) -> (String, RefreshRow) {
    let secret = random_secret();
    let now = moor_protocol::now_ms();
    let row = RefreshRow {
        token_hash: token_hash(&secret),
        user: user.to_owned(),
        created_at: now,
        expires_at: now.saturating_add(ttl.as_millis() as i64),
    };
    (secret, row)
}
