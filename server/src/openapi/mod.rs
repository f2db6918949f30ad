//! The OpenAPI description of the HTTP API, served at `GET /api/v1/openapi.json`.
//!
//! It is generated, not written: every route is registered through `utoipa_axum`'s
//! `routes!(handler)`, which takes the method and the path from the handler's
//! `#[utoipa::path]` annotation and adds the same operation to the document, so a route cannot
//! exist without its description (`app::routes` adds routes no other way). The payload schemas
//! are the `moor-protocol` types (its `openapi` feature). This module holds what the handlers'
//! annotations share: the document's frame (security schemes, tags), the error responses, and
//! the schemas of the few bodies that have no type of their own in `moor-protocol`. The shared
//! responses (errors and their bundles) are in `errors`.

mod errors;

pub use errors::*;

use std::sync::Arc;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use moor_protocol::api::Role;
use moor_protocol::error::ErrorBody;
use moor_protocol::transcript::Message;
use moor_protocol::SessionId;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, SecurityRequirement};
use utoipa::{IntoResponses, OpenApi, ToSchema};

use errors::Common;

/// Tag of the session routes.
pub const SESSIONS: &str = "sessions";
/// Tag of the live streams (SSE and WebSockets).
pub const STREAMS: &str = "streams";
/// Tag of the checkpoint and blob routes.
pub const CHECKPOINTS: &str = "checkpoints";
/// Tag of login, tokens, users and sharing.
pub const ACCESS: &str = "access";
/// Tag of the web client's files and the server's own description.
pub const SERVER: &str = "server";
/// Tag of the machine routes (`moor host`).
pub const MACHINES: &str = "machines";

/// The document's frame; `app::routes` adds every operation to it.
#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "Mooring",
        description = "The HTTP API of `moord`, the Mooring relay server. Errors are JSON \
                       `ErrorBody` objects whose `code` says what went wrong.",
        license(name = "MIT OR Apache-2.0", identifier = "MIT OR Apache-2.0"),
    ),
    components(schemas(
        ErrorBody,
        // The body of `TokensIssued` (a shared response names its body only by reference).
        crate::access::TokenPair,
        // What the streams carry (their operations can only name them in prose).
        moor_protocol::Entry,
        moor_protocol::web::Reset,
        moor_protocol::state::SessionState,
        moor_protocol::web::ViewerToServer,
        moor_protocol::web::ServerToViewer,
        moor_protocol::bridge::BridgeToServer,
        moor_protocol::bridge::ServerToBridge,
    )),
    tags(
        (name = SESSIONS, description = "Sessions, their logs, inputs and recovery"),
        (name = STREAMS, description = "Live streams: Server-Sent Events and WebSockets"),
        (name = CHECKPOINTS, description = "Work-tree checkpoints and their content-addressed blobs"),
        (name = ACCESS, description = "Login, tokens, device grants, users and sharing"),
        (name = SERVER, description = "Health, the web client, and this description"),
        (name = MACHINES, description = "Machines running `moor host`: what they offer, and the sessions they start, stop and resume on request"),
    )
)]
pub struct ApiDoc;

/// Name of the `Authorization: Bearer` security scheme.
pub const BEARER: &str = "bearer";
/// Name of the `?access_token=` security scheme (for `EventSource` and browser WebSockets).
pub const QUERY_TOKEN: &str = "access_token";
/// Name of the access-token cookie security scheme (the web client).
pub const COOKIE: &str = "cookie";

/// Completes the document `routes!` assembled: adds the security schemes and makes any one of
/// them the default requirement (the public routes say `security(())` in their annotation), and
/// gives every operation the errors any route may answer: 429 from the rate limit in front of
/// every route, 503 when the database cannot be reached, and 500; and every unsafe operation
/// the 403 of the cross-site check. `access_cookie` names the
/// access-token cookie.
pub(crate) fn finish(doc: &mut Document, access_cookie: &str) {
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        BEARER,
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "An access token (JWT) from login, refresh or a device grant, or the \
                     bootstrap admin token",
                ))
                .build(),
        ),
    );
    components.add_security_scheme(
        QUERY_TOKEN,
        SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
            QUERY_TOKEN,
            "The same token as a query parameter, for clients that cannot set headers \
             (EventSource, browser WebSockets)",
        ))),
    );
    components.add_security_scheme(
        COOKIE,
        SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
            access_cookie,
            "The access-token cookie login sets for the web client",
        ))),
    );
    doc.security = Some(vec![
        SecurityRequirement::new(BEARER, Vec::<String>::new()),
        SecurityRequirement::new(QUERY_TOKEN, Vec::<String>::new()),
        SecurityRequirement::new(COOKIE, Vec::<String>::new()),
    ]);
    let common = <Common as IntoResponses>::responses();
    let cross_site = <CrossSite as IntoResponses>::responses();
    for item in doc.paths.paths.values_mut() {
        let unsafe_ops = [
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .filter_map(Option::as_mut);
        for op in unsafe_ops {
            for (status, response) in &cross_site {
                op.responses
                    .responses
                    .entry(status.clone())
                    .or_insert_with(|| response.clone());
            }
        }
        for op in operations(item) {
            for (status, response) in &common {
                op.responses
                    .responses
                    .entry(status.clone())
                    .or_insert_with(|| response.clone());
            }
        }
    }
}

/// 403 `forbidden` on any unsafe method: a browser request (our cookies, or an `Origin`) from
/// a page that is not this server's, or whose body is not declared as JSON (see
/// `http::csrf`). Programs presenting a bearer token never get it.
#[derive(IntoResponses)]
#[allow(dead_code)] // a description only
#[response(
    status = 403,
    example = json!({"code": "forbidden", "message": "cross-site request refused: the request did not come from this server's pages (Origin)"})
)]
struct CrossSite(ErrorBody);

/// The operations of one path item, whatever their methods.
fn operations(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

/// `GET /api/v1/auth/setup`.
#[derive(Debug, ToSchema)]
pub struct SetupStatus {
    /// Whether the setup page can create the first administrator here: none exists and this
    /// server holds a live setup code.
    pub open: bool,
}

/// `POST /api/v1/auth/device`: a new device grant.
#[derive(Debug, ToSchema)]
pub struct DeviceGrant {
    /// The device's secret; it polls `POST /api/v1/auth/device/token` with it.
    pub device_code: String,
    /// The short code the user confirms on the approval page.
    pub user_code: String,
    /// The approval page.
    pub verification_uri: String,
    /// The approval page with the code filled in.
    pub verification_uri_complete: String,
    /// Seconds the grant lives.
    pub expires_in: u64,
    /// Seconds between polls.
    pub interval: u64,
}

/// `POST /api/v1/auth/device/token` before the user decided.
#[derive(Debug, ToSchema)]
pub struct DevicePending {
    /// Always `pending`.
    #[schema(example = "pending")]
    pub status: String,
}

/// `POST /api/v1/sessions/{id}/share-links`: the new link. Its secret is in this answer only.
#[derive(Debug, ToSchema)]
pub struct ShareLinkCreated {
    /// Its id (`DELETE /api/v1/share-links/{id}` revokes it).
    pub id: String,
    /// The secret a user redeems.
    pub token: String,
    /// The web client's join page for it.
    pub url: String,
    /// The role it grants.
    pub role: Role,
    /// Expiry, ms since the epoch.
    pub expires_at: i64,
    /// How many people may redeem it.
    pub uses: i64,
}

/// `PUT /api/v1/sessions/{id}/members/{user}` for someone who is not a member: the role is
/// offered. Said the same whether an account has the name or not.
#[derive(Debug, ToSchema)]
pub struct OfferMade {
    /// Always `offered`.
    #[schema(example = "offered")]
    pub status: String,
}

/// `POST /api/v1/share-links/redeem`: the session joined, and the caller's role on it now.
#[derive(Debug, ToSchema)]
pub struct Redeemed {
    /// The session.
    pub session: SessionId,
    /// The caller's role on it (an existing role is kept).
    pub role: Role,
}

/// `POST /api/v1/share-links/preview`: what a live share link grants.
#[derive(Debug, ToSchema)]
pub struct LinkPreview {
    /// The session.
    pub session: SessionId,
    /// Its name.
    pub name: String,
    /// The role redeeming the link gives (a role the user already has is kept).
    pub role: Role,
    /// Who made the link.
    pub created_by: String,
}

/// `GET /api/v1/sessions/{id}/transcript`: the repaired conversation, in the Anthropic
/// Messages API shape.
#[derive(Debug, ToSchema)]
pub struct Transcript {
    /// The messages, alternating roles, starting with the user.
    pub messages: Vec<Message>,
}

/// `GET /app-config.json`: hints for the web client.
#[derive(Debug, ToSchema)]
pub struct AppConfig {
    /// The keep-alive interval the client's watchdog uses, ms.
    pub keepalive_ms: u64,
    /// Server version.
    pub version: String,
}

/// The document, serialised once, as the router serves it.
#[derive(Debug, Clone)]
pub(crate) struct Served(pub(crate) Arc<str>);

/// `GET /api/v1/openapi.json`: this description.
#[utoipa::path(
    get,
    path = "/openapi.json", operation_id = "getOpenApi",
    tag = SERVER,
    security(()),
    responses(
        (status = 200, description = "The OpenAPI 3.1 document of this API", content_type = "application/json"),
    )
)]
pub(crate) async fn document(Extension(doc): Extension<Served>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        doc.0.to_string(),
    )
        .into_response()
}
