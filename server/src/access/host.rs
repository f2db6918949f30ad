//! Host credentials: the token `moor host` runs with, minted by `moord` for one machine. It
//! belongs to the same user and token family as the credential that asked for it (a login or
//! a device; the bootstrap admin's is bound to the admin token itself), so revoking the user or
//! the device ends it, and it is checked against the family at every use like any access token.
//!
//! What it may do is an allow-list, not a deny-list: the routes a machine and the `moor run`s
//! it starts need ([`HOST_ROUTES`]), and on those only the machine's own log session and the
//! sessions it was asked to start ([`in_scope`]). Every other route answers 403.
//!
//! Calls only `store`; no HTTP, no state.

use axum::http::Method;
use sha2::{Digest, Sha256};

use crate::store::{StoreResult, Stores};

/// The routes (method, path template as routed) a host credential may use: registering its
/// machine and renewing its credential, the bridge link, and what a `moor run` needs for its
/// session (resume, the first prompt, checkpoints and their blobs).
pub const HOST_ROUTES: [(Method, &str); 14] = [
    (Method::POST, "/api/v1/machines"),
    (Method::POST, "/api/v1/machines/{id}/credential"),
    (Method::GET, "/api/v1/bridge"),
    (Method::GET, "/api/v1/sessions/{id}"),
    (Method::GET, "/api/v1/sessions/{id}/entries"),
    (Method::GET, "/api/v1/sessions/{id}/recovery"),
    (Method::GET, "/api/v1/sessions/{id}/transcript"),
    (Method::POST, "/api/v1/sessions/{id}/inputs"),
    (Method::GET, "/api/v1/sessions/{id}/checkpoints"),
    (
        Method::PUT,
        "/api/v1/sessions/{id}/checkpoints/{checkpoint}",
    ),
    (Method::GET, "/api/v1/checkpoints/{checkpoint}"),
    (Method::POST, "/api/v1/blobs/missing"),
    (Method::GET, "/api/v1/blobs/{sha256}"),
    (Method::PUT, "/api/v1/blobs/{sha256}"),
];

/// Whether a host credential may call `method` on the route `matched` (None: no route
/// matched, refused too).
pub fn may_use_route(method: &Method, matched: Option<&str>) -> bool {
    matched.is_some_and(|path| HOST_ROUTES.iter().any(|(m, p)| m == method && *p == path))
}

/// Whether session `name` is one a host credential for `machine` may act on: the machine's
/// log session, or a session the machine was asked to start.
pub async fn in_scope(store: &Stores, machine: &str, name: &str) -> StoreResult<bool> {
    let Some(row) = store.machines.machine(machine).await? else {
        return Ok(false);
    };
    if row.log_session == name {
        return Ok(true);
    }
    Ok(store
        .machines
        .machine_session(machine, name)
        .await?
        .is_some())
}

/// The token family a host credential minted with the bootstrap admin token carries: bound to
/// that token, so replacing `admin.token` ends it, as it ends the admin token itself.
pub(crate) fn admin_family(admin_token: &str) -> String {
    let digest = Sha256::digest(format!("moor-host\0{admin_token}").as_bytes());
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("admin:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_listed_routes_are_open_to_a_host_credential() {
        assert!(may_use_route(&Method::GET, Some("/api/v1/bridge")));
        assert!(may_use_route(&Method::POST, Some("/api/v1/machines")));
        assert!(!may_use_route(&Method::GET, Some("/api/v1/machines")));
        assert!(!may_use_route(&Method::GET, Some("/api/v1/sessions")));
        assert!(!may_use_route(
            &Method::PUT,
            Some("/api/v1/sessions/{id}/members/{user}")
        ));
        assert!(!may_use_route(&Method::GET, None));
    }

    #[test]
    fn the_admin_family_is_bound_to_the_admin_token() {
        assert_eq!(admin_family("a"), admin_family("a"));
        assert_ne!(admin_family("a"), admin_family("b"));
    }
}
