//! The responses the handlers' `#[utoipa::path]` annotations share: one type per error status,
//! the bundles of them that routes of one kind answer (so each route names its errors once, by
//! what the route does), and the token-pair answer of the login routes.
//!
//! A description only: nothing here is built at run time. Uses `access` (the token pair's
//! schema) and `moor-protocol`; never a transport.

use std::collections::BTreeMap;

use moor_protocol::error::ErrorBody;
use utoipa::openapi::{RefOr, Response};
use utoipa::IntoResponses;

use crate::access::TokenPair;

/// The errors any route may answer.
#[derive(IntoResponses)]
#[allow(dead_code)] // a description only
pub(crate) enum Common {
    /// `rate_limited`: too many requests from this credential or address; `Retry-After` says
    /// when to try again.
    #[response(
        status = 429,
        example = json!({"code": "rate_limited", "message": "too many requests; retry in 3 s"}),
        headers(("Retry-After" = u64, description = "Seconds to wait"))
    )]
    RateLimited(ErrorBody),
    /// `unavailable`: the server cannot reach its database right now; retry after
    /// `Retry-After` seconds (another node may answer at once).
    #[response(
        status = 503,
        example = json!({"code": "unavailable", "message": "the server cannot reach its database right now; retry in a moment"}),
        headers(("Retry-After" = u64, description = "Seconds to wait"))
    )]
    Unavailable(ErrorBody),
    /// `storage_full`: the server's disk is full, so nothing was stored; reads still work.
    /// Retry after `Retry-After` seconds, once the operator has freed space.
    #[response(
        status = 507,
        example = json!({"code": "storage_full", "message": "the server's disk is full, so nothing was stored; retry later (the operator must free space in moord's data dir or database)"}),
        headers(("Retry-After" = u64, description = "Seconds to wait"))
    )]
    StorageFull(ErrorBody),
    /// `internal`: the server failed; details are in its log, never in the answer.
    #[response(
        status = 500,
        example = json!({"code": "internal", "message": "internal error"})
    )]
    Internal(ErrorBody),
}

/// 400 `bad_request`: a field, the body or a query parameter is invalid (the message names
/// it); `invalid_cursor`: a cursor (`after`, `before`, `Last-Event-ID`) is not a seq number.
#[derive(Debug, IntoResponses)]
#[response(
    status = 400,
    example = json!({"code": "bad_request", "message": "invalid limit: \"0\" is not a number from 1 to 1000"})
)]
pub struct BadRequest(pub ErrorBody);

/// 401 `unauthorized`: no credential, or a wrong, expired or revoked one.
#[derive(Debug, IntoResponses)]
#[response(
    status = 401,
    example = json!({"code": "unauthorized", "message": "missing or invalid token"}),
    headers(("WWW-Authenticate" = String, description = "`Bearer`"))
)]
pub struct Unauthorized(pub ErrorBody);

/// 403 `forbidden`: the caller may see the resource, but their role does not allow this.
#[derive(Debug, IntoResponses)]
#[response(
    status = 403,
    example = json!({"code": "forbidden", "message": "your role does not allow this"})
)]
pub struct Forbidden(pub ErrorBody);

/// 404 `not_found`: no such resource, or not one the caller may see.
#[derive(Debug, IntoResponses)]
#[response(
    status = 404,
    example = json!({"code": "not_found", "message": "session not found"})
)]
pub struct NotFound(pub ErrorBody);

/// 409 `conflict`: the request conflicts with what is stored (the message says how);
/// `session_ended`: the session has ended.
#[derive(Debug, IntoResponses)]
#[response(
    status = 409,
    example = json!({"code": "conflict", "message": "user \"ann\" already exists"})
)]
pub struct Conflict(pub ErrorBody);

/// 410 `gone`: over for good; the message says what to do instead.
#[derive(Debug, IntoResponses)]
#[response(
    status = 410,
    example = json!({"code": "gone", "message": "setup is done: an administrator exists; log in (POST /api/v1/auth/login)"})
)]
pub struct Gone(pub ErrorBody);

/// 413 `too_large`: the body is larger than the server accepts.
#[derive(Debug, IntoResponses)]
#[response(
    status = 413,
    example = json!({"code": "too_large", "message": "request body too large (limit 1048576 bytes)"})
)]
pub struct TooLarge(pub ErrorBody);

/// 200: a new token pair, also set as cookies (login, refresh, setup, a granted device).
#[derive(Debug, IntoResponses)]
#[response(
    status = 200,
    description = "A new token pair; also set as the `moor_access` and `moor_refresh` cookies",
    headers(("Set-Cookie" = String, description = "`moor_access` and `moor_refresh`"))
)]
pub struct TokensIssued(pub TokenPair);

/// Declares a bundle: a type whose responses are those of all its parts.
macro_rules! bundle {
    ($(#[$doc:meta])* $name:ident = $($part:ident),+) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name;

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                let mut all = BTreeMap::new();
                $(all.extend(<$part as IntoResponses>::responses());)+
                all
            }
        }
    };
}

bundle!(
    /// A resource the caller may see: 401, 404.
    LookupErrors = Unauthorized, NotFound
);
bundle!(
    /// A read whose path or query is parsed, of a resource the caller may see: 400, 401, 404.
    ReadErrors = BadRequest, Unauthorized, NotFound
);
bundle!(
    /// A request with a body: 400, 401, 413.
    BodyErrors = BadRequest, Unauthorized, TooLarge
);
bundle!(
    /// A request with a body that names a resource the caller may see: 400, 401, 404, 413.
    BodyLookupErrors = BadRequest, Unauthorized, NotFound, TooLarge
);
bundle!(
    /// An act on a resource that takes a role the caller may lack: 401, 403, 404.
    RoleErrors = Unauthorized, Forbidden, NotFound
);
bundle!(
    /// An act with a body on a resource that takes a role the caller may lack: 400, 401, 403,
    /// 404, 413.
    RoleBodyErrors = BadRequest, Unauthorized, Forbidden, NotFound, TooLarge
);
