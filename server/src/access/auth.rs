//! Who is calling: the bootstrap admin (the token in `<data-dir>/admin.token`) or a user (an
//! administrator or not) with a JWT access token (`access::jwt`), presented as a bearer header,
//! an `access_token` query parameter or the `moor_access` cookie. [`Auth`] holds the key
//! material; [`AuthUser`] is the extractor, generic over any state that yields an [`Auth`] and
//! the store (`FromRef`), so this module never names the application state. Tokens are never
//! logged.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::{FromRef, FromRequestParts, MatchedPath};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use rand::RngCore;

use super::action_link::{ActionClaims, ActionLinks};
use super::device::DeviceGrants;
use super::jwt::{Claims, JwtError, Keys};
use super::limits::Limits;
use super::principal::Principal;
use super::revocations::Revocations;
use super::setup::SetupCode;
use crate::error::ApiError;
use crate::store::AccessStore;
use crate::util::{cookie, query_param, write_private};

/// Audience of access tokens this server issues.
pub const AUDIENCE: &str = "moor";
/// Default issuer of access tokens.
pub const ISSUER: &str = crate::config::DEFAULT_TOKEN_ISSUER;
/// Name of the cookie holding the browser's access token.
pub const ACCESS_COOKIE: &str = "moor_access";
/// Name of the cookie holding the browser's refresh token.
pub const REFRESH_COOKIE: &str = "moor_refresh";

/// Verifies credentials and issues access tokens.
#[derive(Clone)]
pub struct Auth {
    admin_token: String,
    keys: Arc<Keys>,
    /// Lifetime of access tokens.
    pub access_ttl: Duration,
    /// Lifetime of refresh tokens.
    pub refresh_ttl: Duration,
    /// How long after a refresh token was spent it may be presented again while its successor
    /// is unused (the answer carrying the successor was lost).
    pub refresh_grace: Duration,
    issuer: Arc<str>,
    /// Live connections by credential, for revocation.
    pub revocations: Revocations,
    /// Rate limits (requests, failed logins).
    pub limits: Limits,
    /// Pending device logins.
    pub devices: DeviceGrants,
    /// The first-start setup code, while no administrator exists.
    pub setup: SetupCode,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Auth { .. }")
    }
}

impl Auth {
    /// Uses `token` as the admin token, with in-memory signing keys (see [`Auth::with_keys`]).
    pub fn with_admin_token(token: String) -> Self {
        Self {
            admin_token: token,
            keys: Arc::new(Keys::ephemeral()),
            access_ttl: Duration::from_secs(15 * 60),
            refresh_ttl: Duration::from_secs(30 * 24 * 3600),
            refresh_grace: Duration::from_secs(30),
            issuer: ISSUER.into(),
            revocations: Revocations::default(),
            limits: Limits::default(),
            devices: DeviceGrants::default(),
            setup: SetupCode::default(),
        }
    }

    /// Signs access tokens with `keys` (normally `<data-dir>/jwt-keys.json`).
    pub fn with_keys(mut self, keys: Keys) -> Self {
        self.keys = Arc::new(keys);
        self
    }

    /// Uses `revocations` (whose root is the server's shutdown token) for live connections.
    pub fn with_revocations(mut self, revocations: Revocations) -> Self {
        self.revocations = revocations;
        self
    }

    /// Sets the issuer written into and required of access tokens.
    pub fn with_issuer(mut self, issuer: &str) -> Self {
        self.issuer = issuer.into();
        self
    }

    /// Signs an access token for `user` in token family `family`.
    pub fn issue(&self, user: &str, family: &str) -> anyhow::Result<String> {
        let now = super::unix_now();
        self.keys.sign(&Claims {
            sub: user.to_owned(),
            fam: family.to_owned(),
            iss: self.issuer.to_string(),
            aud: AUDIENCE.to_owned(),
            iat: now,
            nbf: now,
            exp: now + self.access_ttl.as_secs().max(1),
            mch: None,
        })
    }

    /// Signs a host credential for machine `machine`, for `who` (see `access::host`): their
    /// token family (the bootstrap admin's is bound to the admin token), living as long as a
    /// refresh token, since the sessions the machine starts run on it. `None` for a caller
    /// with no family to bind it to.
    pub fn issue_host(&self, who: &Principal, machine: &str) -> anyhow::Result<Option<String>> {
        let family = match (&who.family, who.bootstrap) {
            (_, true) => super::host::admin_family(&self.admin_token),
            (Some(f), false) => f.clone(),
            (None, false) => return Ok(None),
        };
        let now = super::unix_now();
        self.keys
            .sign(&Claims {
                sub: who.name.clone(),
                fam: family,
                iss: self.issuer.to_string(),
                aud: AUDIENCE.to_owned(),
                iat: now,
                nbf: now,
                exp: now + self.refresh_ttl.as_secs().max(1),
                mch: Some(machine.to_owned()),
            })
            .map(Some)
    }

    /// Checks an access token's signature, algorithm, times, issuer and audience (not whether
    /// its family was revoked since: that takes the store, see [`AuthUser`]).
    pub fn verify_jwt(&self, token: &str) -> Result<Claims, JwtError> {
        self.keys.verify(token, &self.issuer, AUDIENCE)
    }

    /// Issues one-use decision links valid for `ttl` (`access::action_link`).
    pub fn action_links(&self, ttl: Duration) -> ActionLinks {
        ActionLinks::new(self.keys.clone(), self.issuer.clone(), ttl)
    }

    /// Checks a presented decision link (not whether its user may still decide: the caller
    /// asks the store).
    pub fn verify_action(&self, token: &str) -> Result<ActionClaims, JwtError> {
        self.action_links(Duration::ZERO).verify(token)
    }

    /// Loads `<data_dir>/admin.token`, creating it (mode 0600) with a fresh random token when
    /// missing. Returns the auth and whether the token was just created.
    pub fn load_or_create(data_dir: &Path) -> anyhow::Result<(Self, bool)> {
        let path = data_dir.join("admin.token");
        match std::fs::read_to_string(&path) {
            Ok(s) if !s.trim().is_empty() => {
                return Ok((Self::with_admin_token(s.trim().to_owned()), false))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
        }
        let mut bytes = [0u8; 24];
        rand::thread_rng().fill_bytes(&mut bytes);
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        write_private(&path, &token).with_context(|| format!("write {}", path.display()))?;
        Ok((Self::with_admin_token(token), true))
    }

    /// The admin token, for printing once at first start.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// Whether `token` is the bootstrap admin token.
    pub fn is_admin_token(&self, token: &str) -> bool {
        super::constant_time_eq(token.as_bytes(), self.admin_token.as_bytes())
    }

    /// The name a presented token was issued to, if its signature and claims check out (the
    /// bootstrap admin token is `admin`), without asking the store whether it was revoked since:
    /// enough to count its requests against that name rather than against the address.
    pub fn verified_name(&self, token: &str) -> Option<String> {
        if self.is_admin_token(token) {
            return Some(Principal::bootstrap().name);
        }
        self.verify_jwt(token).ok().map(|c| c.sub)
    }

    /// The principal a presented token belongs to, checking revocation in the store.
    pub async fn principal(&self, store: &dyn AccessStore, token: &str) -> Option<Principal> {
        if self.is_admin_token(token) {
            return Some(Principal::bootstrap());
        }
        let claims = match self.verify_jwt(token) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(reason = %e, "access token refused");
                return None;
            }
        };
        if claims.mch.is_some() && claims.fam.starts_with("admin:") {
            // A host credential of the bootstrap admin: valid while the admin token is the one
            // it was minted with.
            let bound = claims.fam == super::host::admin_family(&self.admin_token);
            return bound.then(|| Principal::bootstrap().for_machine(claims.mch));
        }
        match store.active_family(&claims.fam).await {
            // The name comes from the signed claims; the store confirms it is the family's.
            Ok(Some(user)) if user.name == claims.sub => Some(
                Principal::for_user(claims.sub, Some(claims.fam))
                    .as_admin(user.admin)
                    .for_machine(claims.mch),
            ),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = ?e, "could not check a token family");
                None
            }
        }
    }
}

/// Extractor for an authenticated caller: `Authorization: Bearer <token>`, an `access_token`
/// query parameter for clients that cannot set headers (`EventSource`, browser WebSockets), or
/// the access cookie (see [`presented_token`]). A host credential is refused (403) on every
/// route but those `access::host::HOST_ROUTES` lists.
#[derive(Debug, Clone)]
pub struct AuthUser(pub Principal);

impl<S> FromRequestParts<S> for AuthUser
where
    Auth: FromRef<S>,
    Arc<dyn AccessStore>: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Some((token, _)) = presented_token(&parts.headers, parts.uri.query()) else {
            return Err(ApiError::Unauthorized);
        };
        let auth = Auth::from_ref(state);
        let store = <Arc<dyn AccessStore>>::from_ref(state);
        let who = auth
            .principal(store.as_ref(), &token)
            .await
            .ok_or(ApiError::Unauthorized)?;
        if who.machine.is_some() {
            let matched = parts
                .extensions
                .get::<MatchedPath>()
                .map(MatchedPath::as_str);
            if !super::host::may_use_route(&parts.method, matched) {
                return Err(ApiError::Forbidden);
            }
        }
        Ok(AuthUser(who))
    }
}

/// Where a request's credential came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// `Authorization: Bearer`: set by a program (or a page's own script), never by a browser
    /// on its own.
    Header,
    /// The `access_token` query parameter.
    Query,
    /// The `moor_access` cookie, which a browser attaches by itself.
    Cookie,
}

/// The credential a request presents, trimmed, and where it came from: the bearer header, else
/// the `access_token` query parameter, else the access cookie (the order [`AuthUser`] uses).
pub fn presented_token(headers: &HeaderMap, query: Option<&str>) -> Option<(String, TokenSource)> {
    let found = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| (t.to_owned(), TokenSource::Header))
        .or_else(|| {
            query_param(query.unwrap_or(""), "access_token").map(|t| (t, TokenSource::Query))
        })
        .or_else(|| cookie(headers, ACCESS_COOKIE).map(|t| (t, TokenSource::Cookie)))?;
    Some((found.0.trim().to_owned(), found.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_admin_token_is_the_admin_token() {
        let auth = Auth::with_admin_token("secret".into());
        assert!(auth.is_admin_token("secret"));
        assert!(!auth.is_admin_token("secreT"));
        assert!(!auth.is_admin_token(""));
    }

    #[test]
    fn issued_tokens_verify_and_carry_user_and_family() {
        let auth = Auth::with_admin_token("secret".into());
        let t = auth.issue("ann", "f1").unwrap();
        let c = auth.verify_jwt(&t).unwrap();
        assert_eq!((c.sub.as_str(), c.fam.as_str()), ("ann", "f1"));
        assert!(Auth::with_admin_token("secret".into())
            .verify_jwt(&t)
            .is_err());
        assert!(auth.clone().with_issuer("other").verify_jwt(&t).is_err());
    }
}
