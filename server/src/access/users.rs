//! Accounts: which names are valid, password checks and hashes, and adding a user (shared by
//! the API and `moord user add`). Never logs a password.
//!
//! Calls `store` and `error` only; no HTTP.

use moor_protocol::now_ms;

use super::password;
use crate::error::ApiError;
use crate::store::{AccessStore, StoreError};

/// Longest user name.
pub(crate) const MAX_NAME: usize = 64;
/// Longest password accepted (argon2 takes any length; this bounds the work).
pub(crate) const MAX_PASSWORD: usize = 1024;

/// Whether `name` may be a user name: 1 to 64 of `[A-Za-z0-9._-]`, and not `admin` (the
/// bootstrap admin's name in session roles and authorship).
pub fn valid_user_name(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && name != "admin"
}

/// A 400 naming `field` unless `name` may be a user name ([`valid_user_name`]).
pub(crate) fn checked_user_name(field: &'static str, name: &str) -> Result<(), ApiError> {
    if valid_user_name(name) {
        return Ok(());
    }
    Err(ApiError::Invalid {
        field,
        reason: "1 to 64 letters, digits, '.', '_' or '-', and not \"admin\"".into(),
    })
}

/// Whether `password` matches the argon2 hash `phc` (checked off the async threads).
pub(crate) async fn check_password(password: String, phc: String) -> bool {
    tokio::task::spawn_blocking(move || password::verify(&password, &phc))
        .await
        .unwrap_or(false)
}

/// Validates and stores a new user, an administrator when `admin` (shared by the API and
/// `moord user add`).
pub async fn add_user(
    store: &dyn AccessStore,
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
    checked_user_name("name", name)?;
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
