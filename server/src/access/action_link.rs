//! Signed one-use links that decide a permission request from outside a browser: the Approve
//! and Deny buttons of an ntfy notification (and the links a webhook is given). A link is a JWT
//! of its own audience (`moor-action`), so it never passes for an access token nor an access
//! token for it, naming its user, the session, the request and the decision, valid for
//! `--notify-action-ttl-secs`.
//!
//! Both links of one notification share a `pair` id, from which the input's `client_msg_id` is
//! made: the first use stores the decision, the same link again is the same input (refused as
//! used), the other button is a different input under the same id (refused as a conflict), and
//! once the agent has the answer the request is no longer pending (refused, G9).

use std::sync::Arc;
use std::time::Duration;

use moor_protocol::payload::PermissionDecision;
use serde::{Deserialize, Serialize};

use super::jwt::{JwtError, Keys};

/// Audience of action links.
pub const ACTION_AUDIENCE: &str = "moor-action";

/// What an action link says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionClaims {
    /// The user deciding (a member with the controller role when the link is used).
    pub sub: String,
    /// Issuer.
    pub iss: String,
    /// Audience: [`ACTION_AUDIENCE`].
    pub aud: String,
    /// Issued at (s).
    pub iat: u64,
    /// Not before (s).
    pub nbf: u64,
    /// Expires (s).
    pub exp: u64,
    /// The session.
    pub sid: String,
    /// The permission request.
    pub rid: String,
    /// The decision.
    pub dec: PermissionDecision,
    /// Shared by the Approve and Deny links of one notification.
    pub pair: String,
}

impl ActionClaims {
    /// The `client_msg_id` the decision is stored under.
    pub fn client_msg_id(&self) -> String {
        format!("link-{}", self.pair)
    }
}

/// Issues and checks action links with the server's token keys.
#[derive(Clone)]
pub struct ActionLinks {
    keys: Arc<Keys>,
    issuer: Arc<str>,
    ttl: Duration,
}

moor_protocol::debug_fields!(ActionLinks { ttl });

impl ActionLinks {
    pub(super) fn new(keys: Arc<Keys>, issuer: Arc<str>, ttl: Duration) -> Self {
        Self { keys, issuer, ttl }
    }

    /// The Approve and Deny tokens for `user` on `request` of `session`.
    pub fn pair(
        &self,
        user: &str,
        session: &str,
        request: &str,
    ) -> anyhow::Result<(String, String)> {
        let now = super::unix_now();
        let pair = super::random_secret();
        let sign = |dec| {
            self.keys.sign(&ActionClaims {
                sub: user.to_owned(),
                iss: self.issuer.to_string(),
                aud: ACTION_AUDIENCE.to_owned(),
                iat: now,
                nbf: now,
                exp: now + self.ttl.as_secs().max(1),
                sid: session.to_owned(),
                rid: request.to_owned(),
                dec,
                pair: pair.clone(),
            })
        };
        Ok((
            sign(PermissionDecision::Allow)?,
            sign(PermissionDecision::Deny)?,
        ))
    }

    /// Checks a presented link's signature, times, issuer and audience.
    pub fn verify(&self, token: &str) -> Result<ActionClaims, JwtError> {
        self.keys.verify(token, &self.issuer, ACTION_AUDIENCE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(ttl: u64) -> ActionLinks {
        ActionLinks::new(
            Arc::new(Keys::ephemeral()),
            "https://moor.example".into(),
            Duration::from_secs(ttl),
        )
    }

    #[test]
    fn both_links_of_a_pair_verify_and_share_one_client_msg_id() {
        let links = links(600);
        let (allow, deny) = links.pair("alice", "s1", "req-1").unwrap();
        let a = links.verify(&allow).unwrap();
        let d = links.verify(&deny).unwrap();
        assert_eq!(
            (a.dec, d.dec),
            (PermissionDecision::Allow, PermissionDecision::Deny)
        );
        assert_eq!(
            (a.sub.as_str(), a.sid.as_str(), a.rid.as_str()),
            ("alice", "s1", "req-1")
        );
        assert_eq!(a.client_msg_id(), d.client_msg_id());
        let (again, _) = links.pair("alice", "s1", "req-1").unwrap();
        assert_ne!(links.verify(&again).unwrap().pair, a.pair);
    }

    #[test]
    fn an_access_token_is_not_an_action_link_nor_the_reverse() {
        let keys = Arc::new(Keys::ephemeral());
        let links = ActionLinks::new(keys.clone(), "i".into(), Duration::from_secs(60));
        let now = crate::access::unix_now();
        let access = keys
            .sign(&crate::access::jwt::Claims {
                sub: "alice".into(),
                fam: "f".into(),
                iss: "i".into(),
                aud: crate::access::AUDIENCE.into(),
                iat: now,
                nbf: now,
                exp: now + 60,
                mch: None,
            })
            .unwrap();
        assert!(links.verify(&access).is_err());
        let (allow, _) = links.pair("alice", "s1", "r").unwrap();
        assert!(keys
            .verify::<crate::access::jwt::Claims>(&allow, "i", crate::access::AUDIENCE)
            .is_err());
    }

    #[test]
    fn a_tampered_or_foreign_link_is_refused() {
        let links = links(600);
        let (allow, _) = links.pair("alice", "s1", "r").unwrap();
        let mut tampered = allow.clone();
        tampered.pop();
        tampered.push(if allow.ends_with('A') { 'B' } else { 'A' });
        assert!(links.verify(&tampered).is_err());
        let (foreign, _) = self::links(600).pair("alice", "s1", "r").unwrap();
        assert!(links.verify(&foreign).is_err());
    }
}
