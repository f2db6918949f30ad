//! Password hashes: argon2id with the crate's default (OWASP) parameters, as PHC strings.
//! Hashing is slow on purpose, so callers run it on the blocking pool.
//!
//! Calls nothing in the crate.

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

/// Hashes a password (argon2id, random salt).
pub fn hash(password: &str) -> anyhow::Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| anyhow::anyhow!("hash password: {e}"))
}

/// Whether `password` matches a stored PHC string. A malformed hash never matches.
pub fn verify(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc)
        .map(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false)
}

/// A hash of a password nobody has, checked when the user does not exist so that the answer
/// takes as long as for a real user.
pub(crate) fn dummy_hash() -> &'static str {
    "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$ZEVmJ2y3mXUAVbAvfB8qmSD5UOR8RH5yqV8m1vbp3ck"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argon2id_hashes_verify_only_their_password() {
        let h = hash("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify("correct horse", &h));
        assert!(!verify("correct hors", &h));
        assert!(!verify("correct horse", "not a hash"));
        assert!(!verify("x", dummy_hash()));
    }
}
