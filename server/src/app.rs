//! The application router: puts the transports side by side (the JSON API, SSE, viewer and
//! bridge WebSockets, the web client) under the request guard and one trace layer. The only
//! module that names every transport; none of them calls another.

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::{Extension, Router};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::access::ACCESS_COOKIE;
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
            crate::http::guard::layer,
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

/// What `--metrics-listen` serves: `GET /metrics` without a token, and nothing else.
pub(crate) fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route(
            "/metrics",
            axum::routing::get(
                |axum::extract::State(state): axum::extract::State<AppState>| async move {
                    crate::http::metrics::exposition(&state)
                },
            ),
        )
        .fallback(|| async { ApiError::NotFound("route") })
        .with_state(state)
}

/// Every route, each registered together with its description by `routes!` (which reads the
/// method and the path from the handler's `#[utoipa::path]`). Add routes only this way:
/// `every_route_is_described` fails on a route the description lacks.
fn routes() -> OpenApiRouter<AppState> {
    let api = crate::http::api()
        .routes(routes!(crate::openapi::document))
        .routes(routes!(crate::sse::events))
        .routes(routes!(crate::ws::viewer::upgrade))
        .routes(routes!(crate::ws::bridge::upgrade))
        .fallback(crate::http::not_found);
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(crate::http::health())
        .nest("/api/v1", api)
        .merge(crate::web::routes())
        .fallback(|| async { ApiError::NotFound("route") })
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
        let described: BTreeSet<String> = routes()
            .into_openapi()
            .paths
            .paths
            .keys()
            .cloned()
            .collect();
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
