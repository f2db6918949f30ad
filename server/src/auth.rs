//! Who is calling. Today one principal exists, the admin, holding the bootstrap token; accounts,
//! roles and JWTs slot in behind the same extractor. Tokens are never logged.

use std::path::Path;

use anyhow::Context;
use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use rand::RngCore;

use crate::error::ApiError;
use crate::state::AppState;

/// Verifies credentials.
#[derive(Clone)]
pub struct Auth {
    admin_token: String,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Auth { .. }")
    }
}

/// A verified caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Name written as the author of what this caller appends (`user:<name>`).
    pub name: String,
}

impl Principal {
    /// The `author` of entries this caller writes.
    pub fn author(&self) -> String {
        format!("user:{}", self.name)
    }
}

impl Auth {
    /// Uses `token` as the admin token.
    pub fn with_admin_token(token: String) -> Self {
        Self { admin_token: token }
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

    /// The principal a presented token belongs to.
    pub fn verify(&self, token: &str) -> Option<Principal> {
        constant_time_eq(token.as_bytes(), self.admin_token.as_bytes()).then(|| Principal {
            name: "admin".to_owned(),
        })
    }
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path)?;
    f.write_all(contents.as_bytes())?;
    f.sync_all()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Extractor for an authenticated caller: `Authorization: Bearer <token>`, or an
/// `access_token` query parameter for clients that cannot set headers (`EventSource`,
/// browser WebSockets).
#[derive(Debug, Clone)]
pub struct AuthUser(pub Principal);

impl<S> FromRequestParts<S> for AuthUser
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let state = AppState::from_ref(state);
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned);
        let token = header.or_else(|| query_param(parts.uri.query().unwrap_or(""), "access_token"));
        token
            .and_then(|t| state.auth.verify(t.trim()))
            .map(AuthUser)
            .ok_or(ApiError::Unauthorized)
    }
}

/// The value of `name` in a query string, percent-decoded.
pub(crate) fn query_param(query: &str, name: &str) -> Option<String> {
    url_pairs(query).find(|(k, _)| k == name).map(|(_, v)| v)
}

fn url_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k), percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = match bytes[i] {
            b'%' if i + 2 < bytes.len() => hex(bytes[i + 1])
                .zip(hex(bytes[i + 2]))
                .map(|(h, l)| h * 16 + l),
            _ => None,
        };
        match (decoded, bytes[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
            }
            (None, b'+') => {
                out.push(b' ');
                i += 1;
            }
            (None, b) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_params_are_percent_decoded() {
        assert_eq!(
            query_param("a=1&access_token=ab%2Fc+d&x", "access_token").as_deref(),
            Some("ab/c d")
        );
        assert_eq!(query_param("t=%zz%", "t").as_deref(), Some("%zz%"));
        assert_eq!(query_param("", "t"), None);
    }

    #[test]
    fn only_the_admin_token_verifies() {
        let auth = Auth::with_admin_token("secret".into());
        assert!(auth.verify("secret").is_some());
        assert!(auth.verify("secreT").is_none());
        assert!(auth.verify("").is_none());
    }
}
