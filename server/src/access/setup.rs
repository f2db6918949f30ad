//! First start: while no administrator exists, `moord` holds a one-time setup code (printed in
//! its startup message as `{public_url}/#/setup&code=…`) and whoever presents it creates the first
//! administrator. The code lives in memory, only hashed, until it is used or expires; a restart
//! makes a new one. Once an administrator exists, setup is over for good (410). The endpoints are
//! `http::setup`.
//!
//! Calls nothing above `access`; no HTTP, no store.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{constant_time_eq, random_secret, token_hash};

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
