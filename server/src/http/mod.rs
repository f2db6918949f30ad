//! The HTTP surface: routes, and request/response mapping. No SQL here, no hub locks held.

mod checkpoints;
mod health;
pub(crate) mod inputs;
mod recovery;
mod sessions;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::{Extension, Router};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::access::http as access;
use crate::access::{device, setup, sharing};
use crate::auth::ACCESS_COOKIE;
use crate::error::ApiError;
use crate::openapi::{ApiDoc, Served};
use crate::state::AppState;

/// The whole application.
pub fn router(state: AppState) -> Router {
    let max_body = state.config.max_body_bytes;
    let (router, mut doc) = routes().split_for_parts();
    crate::openapi::finish(&mut doc, ACCESS_COOKIE);
    #[allow(clippy::expect_used)] // plain data with string keys always serialises
    let served = Served(Arc::from(doc.to_json().expect("serialise the description")));
    router
        .layer(Extension(served))
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::access::guard::layer,
        ))
        .layer(
            tower_http::trace::TraceLayer::new_for_http().make_span_with(
                // The path only: query strings may carry access tokens.
                |req: &axum::http::Request<_>| {
                    tracing::info_span!("http", method = %req.method(), path = %req.uri().path())
                },
            ),
        )
        .with_state(state)
}

/// The OpenAPI description of every route, as `GET /api/v1/openapi.json` serves it.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = routes().into_openapi();
    crate::openapi::finish(&mut doc, ACCESS_COOKIE);
    doc
}

/// Every route, each registered together with its description by `routes!` (which reads the
/// method and the path from the handler's `#[utoipa::path]`). Add routes here and only this
/// way: `every_route_is_described` fails on a route the description lacks.
fn routes() -> OpenApiRouter<AppState> {
    let api = OpenApiRouter::new()
        .routes(routes!(crate::openapi::document))
        .routes(routes!(sessions::me))
        .routes(routes!(sessions::list))
        .routes(routes!(sessions::get))
        .routes(routes!(sessions::entries))
        .routes(routes!(crate::sse::events))
        .routes(routes!(crate::ws::viewer::upgrade))
        .routes(routes!(inputs::create))
        .routes(routes!(recovery::brief))
        .routes(routes!(recovery::transcript))
        .routes(routes!(sessions::close_bridge))
        .routes(routes!(checkpoints::list))
        .routes(routes!(checkpoints::put))
        .routes(routes!(checkpoints::get))
        .routes(routes!(checkpoints::diff))
        .routes(routes!(checkpoints::archive))
        .routes(routes!(checkpoints::missing))
        .routes(routes!(checkpoints::get_blob, checkpoints::put_blob))
        .routes(routes!(crate::ws::bridge::upgrade))
        .routes(routes!(access::login))
        .routes(routes!(setup::status, setup::setup))
        .routes(routes!(access::refresh))
        .routes(routes!(access::logout))
        .routes(routes!(device::start))
        .routes(routes!(device::approve))
        .routes(routes!(device::deny))
        .routes(routes!(device::token))
        .routes(routes!(access::create_user))
        .routes(routes!(access::revoke_user))
        .routes(routes!(
            access::create_share_link,
            sharing::list_share_links
        ))
        .routes(routes!(sharing::list_members))
        .routes(routes!(access::redeem_share_link))
        .routes(routes!(access::revoke_share_link))
        .routes(routes!(access::put_member, access::delete_member))
        .fallback(|_: crate::auth::AuthUser| async { ApiError::NotFound("route") });
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health::get))
        .nest("/api/v1", api)
        .merge(crate::web::routes())
        .fallback(|| async { ApiError::NotFound("route") })
}

/// Parses a JSON body into `T`, answering with our error format for anything wrong with it.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    body: Result<bytes::Bytes, axum::extract::rejection::BytesRejection>,
    limit: usize,
) -> Result<T, ApiError> {
    let body = body.map_err(|e| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge(limit)
        } else {
            ApiError::Invalid {
                field: "body",
                reason: e.body_text(),
            }
        }
    })?;
    serde_json::from_slice(&body).map_err(|e| ApiError::Invalid {
        field: "body",
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The paths `router` routes, read from its `Debug` output (axum offers no other way to
    /// list them): the `RouteId(n): "/path"` pairs of its path router, before its fallbacks.
    fn routed_paths(router: &Router<AppState>) -> BTreeSet<String> {
        let debug = format!("{router:?}");
        let start = debug.find("path_router:").expect("a path router");
        let end = debug.find("fallback_router:").expect("a fallback router");
        debug[start..end]
            .split("RouteId(")
            .filter_map(|s| s.split_once("): \"")?.1.split_once('"'))
            .map(|(path, _)| path.to_owned())
            .collect()
    }

    #[test]
    fn every_route_is_described() {
        let (router, _) = routes().split_for_parts();
        let routed = routed_paths(&router);
        let described: BTreeSet<String> = openapi().paths.paths.keys().cloned().collect();
        assert!(
            routed.contains("/api/v1/sessions/{id}/events"),
            "{routed:?}"
        );
        assert_eq!(routed, described);
    }

    #[test]
    fn a_route_added_around_the_description_is_noticed() {
        let (router, _) = routes().split_for_parts();
        let sneaked = router.route("/api/v1/undescribed", axum::routing::get(|| async {}));
        assert!(routed_paths(&sneaked).contains("/api/v1/undescribed"));
    }
}
