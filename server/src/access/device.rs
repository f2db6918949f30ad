//! Device login (RFC 8628 in spirit): a program without a browser (`moor login`) asks for a
//! grant and shows its short user code; a logged-in user approves the code (web UI or API);
//! the program polls and receives its own token family. Pending grants live in memory for ten
//! minutes: a restart only means running `moor login` again. The endpoints are `http::device`.
//!
//! Calls nothing above `error`; no HTTP, no state.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;

use crate::error::ApiError;

/// How long a grant waits for approval.
pub const GRANT_TTL: Duration = Duration::from_secs(600);
/// Most pending grants at once (they cost nothing to ask for).
pub(crate) const MAX_GRANTS: usize = 10_000;
/// Most pending grants one client address may hold: a flood from a few addresses cannot fill
/// the table and lock everyone else out of `moor login`.
pub(crate) const MAX_GRANTS_PER_ADDRESS: usize = 10;
/// User codes: no vowels (no words), no look-alikes.
const ALPHABET: &[u8] = b"BCDFGHJKLMNPQRSTVWXZ23456789";

/// One pending (or decided, not yet collected) device login.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) user_code: String,
    /// The client address that asked for it.
    pub(crate) address: Option<IpAddr>,
    pub(crate) created: Instant,
    pub(crate) decision: Decision,
}

/// What the user decided about a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
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
    /// Adds a pending grant asked for from `address`, under the hash of its device code.
    /// `429` (with the seconds until a slot frees) past [`MAX_GRANTS_PER_ADDRESS`] pending for
    /// this address, or [`MAX_GRANTS`] in all.
    pub(crate) fn start(
        &self,
        device_code_hash: String,
        user_code: String,
        address: Option<IpAddr>,
    ) -> Result<(), ApiError> {
        let mut grants = self.lock();
        let retry = |oldest: Option<Instant>| {
            let left = oldest.map_or(GRANT_TTL, |t| GRANT_TTL.saturating_sub(t.elapsed()));
            ApiError::RateLimited(left.as_secs().max(1))
        };
        let mine = grants.values().filter(|g| g.address == address);
        if mine.clone().count() >= MAX_GRANTS_PER_ADDRESS {
            return Err(retry(mine.map(|g| g.created).min()));
        }
        if grants.len() >= MAX_GRANTS {
            return Err(retry(grants.values().map(|g| g.created).min()));
        }
        grants.insert(
            device_code_hash,
            Grant {
                user_code,
                address,
                created: Instant::now(),
                decision: Decision::Pending,
            },
        );
        Ok(())
    }

    /// Approves or denies the pending grant showing `user_code` (typed any way).
    pub(crate) fn decide(&self, user_code: &str, decision: Decision) -> Result<(), ApiError> {
        let code = normalise(user_code);
        let mut grants = self.lock();
        let grant = grants
            .values_mut()
            .find(|g| g.user_code == code && g.decision == Decision::Pending)
            .ok_or(ApiError::NotFound("device code"))?;
        grant.decision = decision;
        Ok(())
    }

    /// The grants, expired ones dropped.
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Grant>> {
        let mut g = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        g.retain(|_, grant| grant.created.elapsed() < GRANT_TTL);
        g
    }
}

/// A fresh user code, `XXXX-XXXX`.
pub(crate) fn user_code() -> String {
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
