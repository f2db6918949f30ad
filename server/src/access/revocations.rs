//! Per-principal cancellation: every live stream and socket holds the token of the credential
//! it was opened with, and revoking that credential cancels the token, which ends them at once.
//!
//! The registry is this process's: on a shared Postgres store, `access::revoke` also announces
//! each revocation, and every other node's relay applies it to its own registry.
//!
//! Tokens form a tree under the server's shutdown token: shutdown → user → token family. So
//! revoking a user ends all their families' connections, and shutdown ends everything.
//!
//! Calls only `access::principal` and `store` types; never a transport.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use moor_protocol::SessionId;

use super::principal::Principal;
use crate::store::Revocation;

#[derive(Debug, Default)]
struct Tree {
    users: HashMap<String, CancellationToken>,
    families: HashMap<String, CancellationToken>,
    /// One token per (session, principal) role, cancelled when the role is removed or changed.
    members: HashMap<(SessionId, String), CancellationToken>,
}

/// The registry. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Revocations {
    root: CancellationToken,
    tree: Arc<Mutex<Tree>>,
}

impl Default for Revocations {
    fn default() -> Self {
        Self::new(CancellationToken::new())
    }
}

impl Revocations {
    /// A registry whose tokens are all cancelled with `root`.
    pub fn new(root: CancellationToken) -> Self {
        Self {
            root,
            tree: Arc::default(),
        }
    }

    /// The token a connection opened by `who` watches.
    pub fn token_for(&self, who: &Principal) -> CancellationToken {
        let Some(user) = who.user() else {
            return self.root.child_token();
        };
        let mut tree = self.tree.lock().unwrap_or_else(|p| p.into_inner());
        let Tree {
            users, families, ..
        } = &mut *tree;
        let user_token = users
            .entry(user.to_owned())
            .or_insert_with(|| self.root.child_token());
        // Entries stay until revoked: one per user and per token family (login or device),
        // not per connection.
        let token = match &who.family {
            Some(fam) => families
                .entry(fam.clone())
                .or_insert_with(|| user_token.child_token())
                .child_token(),
            None => user_token.child_token(),
        };
        token
    }

    /// The token a connection of `who` to `session` also watches: cancelled when their role on
    /// it is removed or changed (they reconnect with the new role, or get 404).
    pub fn member_token(&self, who: &Principal, session: SessionId) -> CancellationToken {
        if who.admin {
            return self.root.child_token();
        }
        let mut tree = self.tree.lock().unwrap_or_else(|p| p.into_inner());
        tree.members
            .entry((session, who.name.clone()))
            .or_insert_with(|| self.root.child_token())
            .child_token()
    }

    /// Ends the connections `principal` holds to `session` through their role.
    pub fn revoke_member(&self, session: SessionId, principal: &str) {
        let mut tree = self.tree.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = tree.members.remove(&(session, principal.to_owned())) {
            t.cancel();
        }
    }

    /// Ends every connection of `user`.
    pub fn revoke_user(&self, user: &str) {
        let mut tree = self.tree.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = tree.users.remove(user) {
            t.cancel();
        }
        // Their families' tokens are children of the user token, already cancelled.
        tree.families.retain(|_, t| !t.is_cancelled());
    }

    /// Ends every connection opened with a token of `family`.
    pub fn revoke_family(&self, family: &str) {
        let mut tree = self.tree.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = tree.families.remove(family) {
            t.cancel();
        }
    }

    /// Everything this registry holds live connections for: users, token families and
    /// (session, principal) roles. After notices may have been lost, the relay checks each
    /// against the store.
    pub fn held(&self) -> Vec<Revocation> {
        let tree = self.tree.lock().unwrap_or_else(|p| p.into_inner());
        let users = tree.users.keys().cloned().map(Revocation::User);
        let families = tree.families.keys().cloned().map(Revocation::Family);
        let members = tree
            .members
            .keys()
            .map(|(session, principal)| Revocation::Member {
                session: *session,
                principal: principal.clone(),
            });
        users.chain(families).chain(members).collect()
    }

    /// Ends the connections `revocation` names (here; see `access::revoke` for every node).
    pub fn apply(&self, revocation: &Revocation) {
        match revocation {
            Revocation::User(name) => self.revoke_user(name),
            Revocation::Family(family) => self.revoke_family(family),
            Revocation::Member { session, principal } => self.revoke_member(*session, principal),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, fam: &str) -> Principal {
        Principal::for_user(name.into(), Some(fam.into()))
    }

    #[test]
    fn revoking_a_family_ends_only_its_connections() {
        let r = Revocations::default();
        let a1 = r.token_for(&user("ann", "f1"));
        let a2 = r.token_for(&user("ann", "f2"));
        let b = r.token_for(&user("bob", "f3"));
        r.revoke_family("f1");
        assert!(a1.is_cancelled());
        assert!(!a2.is_cancelled() && !b.is_cancelled());
        r.revoke_user("ann");
        assert!(a2.is_cancelled());
        assert!(!b.is_cancelled());
    }

    #[test]
    fn the_root_ends_everything() {
        let root = CancellationToken::new();
        let r = Revocations::new(root.clone());
        let a = r.token_for(&user("ann", "f1"));
        let admin = r.token_for(&Principal::bootstrap());
        root.cancel();
        assert!(a.is_cancelled() && admin.is_cancelled());
    }
}
