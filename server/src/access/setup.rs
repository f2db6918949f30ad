//! First start: while no administrator exists, `moord` holds a one-time setup code (printed in
//! its startup message as `{public_url}/#/setup&code=…`) and whoever presents it creates the first
//! administrator. The code lives in memory, only hashed, until it is used or expires; a restart
//! makes a new one. Once an administrator exists, setup is over for good (410).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::response::Response;
use axum::{Extension, Json};
use moor_protocol::now_ms;
use serde::Deserialize;

use super::guard::ClientIp;
use super::http::{start_family, validated_user};
use super::{random_secret, token_hash};
use crate::auth::constant_time_eq;
use crate::error::ApiError;
use crate::http::parse_json;
use crate::state::AppState;
use crate::store::StoreError;

type Body = Result<bytes::Bytes, axum::extract::rejection::BytesRejection>;

#[derive(Debug)]
struct Pending {
    hash: String,
    expires: Instant,
}

/// What presenting a code found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeCheck {
    /// The live code.
    Valid,
    /// Not the code, or no code is pending (used, or never issued).
    Wrong,
    /// The code, but past its lifetime.
    Expired,
}

/// This process's pending setup code, if any. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SetupCode {
    pending: Arc<Mutex<Option<Pending>>>,
}

impl SetupCode {
    /// Makes a new code valid for `ttl` (replacing any earlier one) and returns it: the only
    /// time it exists in the clear.
    pub fn issue(&self, ttl: Duration) -> String {
        let code = random_secret();
        *self.lock() = Some(Pending {
            hash: token_hash(&code),
            expires: Instant::now() + ttl,
        });
        code
    }

    /// Whether `code` is the pending code, and still valid.
    pub fn check(&self, code: &str) -> CodeCheck {
        let hash = token_hash(code);
        match &*self.lock() {
            Some(p) if constant_time_eq(p.hash.as_bytes(), hash.as_bytes()) => {
                if Instant::now() < p.expires {
                    CodeCheck::Valid
                } else {
                    CodeCheck::Expired
                }
            }
            _ => CodeCheck::Wrong,
        }
    }

    /// Whether a code is pending and unexpired.
    pub fn is_live(&self) -> bool {
        self.lock()
            .as_ref()
            .is_some_and(|p| Instant::now() < p.expires)
    }

    /// Forgets the code (setup is done).
    pub fn consume(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `GET /api/v1/auth/setup`: `{"open": bool}`: whether the setup page can create the first
/// administrator here (none exists and this server holds a live code). No credentials needed,
/// no secrets answered.
pub(crate) async fn status(
    State(state): State<AppState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let open = state.auth.setup.is_live() && !state.store.access.has_admin().await?;
    Ok(Json(serde_json::json!({ "open": open })))
}

#[derive(Deserialize)]
pub(crate) struct SetupRequest {
    code: String,
    name: String,
    password: String,
}

impl std::fmt::Debug for SetupRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetupRequest")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn setup_done() -> ApiError {
    ApiError::Gone(
        "setup is done: an administrator exists; log in (POST /api/v1/auth/login)".to_owned(),
    )
}

/// `POST /api/v1/auth/setup` `{code, name, password}`: creates the first administrator and
/// logs them in, answering exactly like `POST /api/v1/auth/login`. A wrong or expired code is
/// 401 (and throttled like a failed login); once an administrator exists, 410.
pub(crate) async fn setup(
    State(state): State<AppState>,
    ip: Option<Extension<ClientIp>>,
    body: Body,
) -> Result<Response, ApiError> {
    let req: SetupRequest = parse_json(body, state.config.max_body_bytes)?;
    let ip = ip.and_then(|Extension(ClientIp(ip))| ip);
    let throttle = format!("setup-ip:{}", ip.map(|i| i.to_string()).unwrap_or_default());
    let limits = &state.auth.limits.logins;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_is_valid_once_issued_until_consumed_or_expired() {
        let setup = SetupCode::default();
        assert_eq!(setup.check("anything"), CodeCheck::Wrong);
        assert!(!setup.is_live());
        let code = setup.issue(Duration::from_secs(60));
        assert!(setup.is_live());
        assert_eq!(setup.check(&code), CodeCheck::Valid);
        assert_eq!(setup.check(&format!("{code}x")), CodeCheck::Wrong);
        setup.consume();
        assert_eq!(setup.check(&code), CodeCheck::Wrong);
        let code = setup.issue(Duration::ZERO);
        assert_eq!(setup.check(&code), CodeCheck::Expired);
        assert!(!setup.is_live());
    }
}
