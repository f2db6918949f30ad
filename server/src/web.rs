//! The web client, embedded in the binary: the files of `web/dist` as `build.rs` found them,
//! served with their content types, long-lived caching for hashed assets and a strict CSP. The
//! client holds no data and needs no token to load; everything it shows comes from the
//! authenticated API. `/app-config.json` tells it the keep-alive interval its watchdog uses.
//!
//! A transport: calls only `state`; never `http`, `sse` or `ws`.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use utoipa::openapi::{self, Content, RefOr, ResponseBuilder};
use utoipa::{IntoResponses, PartialSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

include!(concat!(env!("OUT_DIR"), "/web_assets.rs"));

/// Shown when `moord` was built before the web client.
const NOT_BUILT: &str = "<!doctype html><meta charset=utf-8><meta name=viewport content=\"width=device-width\">\
<title>Mooring</title><body style=\"font:16px system-ui;margin:2em\"><h1>Web client not built</h1>\
<p>This <code>moord</code> was compiled without <code>web/dist</code>. Run <code>scripts/build-web</code>, \
then build <code>moord</code> again. The API under <code>/api/v1</code> works regardless.</p>";

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
img-src 'self' data:; connect-src 'self'; worker-src 'self'; manifest-src 'self'; \
frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Routes of the web client: the page, its files (at most two levels deep, see
/// `every_file_has_a_route`) and `/app-config.json`.
pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(app_config))
        .routes(routes!(index))
        .routes(routes!(file))
        .routes(routes!(nested_file))
}

/// Client hints: nothing secret, nothing about sessions.
#[utoipa::path(
    get, path = "/app-config.json", operation_id = "getAppConfig", tag = "server", security(()),
    responses(
        (status = 200, description = "Hints for the web client", body = crate::openapi::AppConfig),
    )
)]
async fn app_config(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        Json(json!({
            "keepalive_ms": state.config.keepalive.as_millis() as u64,
            "version": env!("CARGO_PKG_VERSION"),
        })),
    )
}

/// The web client's page.
#[utoipa::path(
    get, path = "/", operation_id = "getWebClient", tag = "server", security(()),
    responses(
        (status = 200, description = "The web client", content((String = "text/html"))),
        (status = 503, description = "This `moord` was built without the web client: a page saying how to build it", content((String = "text/html"))),
    )
)]
async fn index(uri: Uri) -> Response {
    asset(uri.path())
}

/// A file of the web client at the top level (`/sw.js`, `/manifest.webmanifest`, …).
#[utoipa::path(
    get, path = "/{file}", operation_id = "getWebFile", tag = "server", security(()),
    params(("file" = String, Path, description = "File name")),
    responses(
        WebFile,
        (status = 503, description = "`/index.html` of a `moord` built without the web client", content((String = "text/html"))),
    )
)]
async fn file(uri: Uri) -> Response {
    asset(uri.path())
}

/// A file of the web client in a directory (`/assets/…`, hashed and cached for good, `/icons/…`).
#[utoipa::path(
    get, path = "/{dir}/{file}", operation_id = "getWebAsset", tag = "server", security(()),
    params(
        ("dir" = String, Path, description = "Directory"),
        ("file" = String, Path, description = "File name"),
    ),
    responses(
        WebFile,
    )
)]
async fn nested_file(uri: Uri) -> Response {
    asset(uri.path())
}

/// The media types `server/build.rs` gives the client's files, and whether a file of the type
/// is binary.
const MEDIA_TYPES: [(&str, bool); 11] = [
    ("text/html", false),
    ("text/javascript", false),
    ("text/css", false),
    ("application/json", false),
    ("application/manifest+json", false),
    ("image/svg+xml", false),
    ("image/png", true),
    ("image/x-icon", true),
    ("font/woff2", true),
    ("text/plain", false),
    ("application/octet-stream", true),
];

/// How the file routes answer (in their `#[utoipa::path]`): a file in one of [`MEDIA_TYPES`],
/// or 404.
struct WebFile;

impl IntoResponses for WebFile {
    fn responses() -> BTreeMap<String, RefOr<openapi::Response>> {
        let body = |binary: bool| {
            Content::new(Some(if binary {
                <Vec<u8> as PartialSchema>::schema()
            } else {
                <String as PartialSchema>::schema()
            }))
        };
        let file = MEDIA_TYPES.iter().fold(
            ResponseBuilder::new().description("The file, with its content type"),
            |file, &(media, binary)| file.content(media, body(binary)),
        );
        let missing = ResponseBuilder::new()
            .description("No such file")
            .content("text/plain", body(false));
        BTreeMap::from([
            ("200".to_owned(), file.build().into()),
            ("404".to_owned(), missing.build().into()),
        ])
    }
}

fn find(path: &str) -> Option<(&'static str, &'static [u8])> {
    ASSETS
        .iter()
        .find(|(p, _, _)| *p == path)
        .map(|(_, ct, body)| (*ct, *body))
}

fn asset(path: &str) -> Response {
    let path = match path {
        "/" => "/index.html",
        p => p,
    };
    let Some((content_type, body)) = find(path) else {
        if path == "/index.html" {
            return page(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/html; charset=utf-8",
                "no-store",
                NOT_BUILT.as_bytes(),
            );
        }
        return (StatusCode::NOT_FOUND, "not found").into_response();
    };
    // Vite names assets by content hash: they never change. Everything else may.
    let cache = if path.starts_with("/assets/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    page(StatusCode::OK, content_type, cache, body)
}

fn page(
    status: StatusCode,
    content_type: &'static str,
    cache: &'static str,
    body: &'static [u8],
) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CACHE_CONTROL, HeaderValue::from_static(cache)),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CSP),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_is_embedded_when_the_client_was_built() {
        // With web/dist built, the page and its assets are in the table; without, the table is
        // empty and `/` explains how to build it. Either way no path appears twice.
        let mut paths: Vec<_> = ASSETS.iter().map(|(p, _, _)| *p).collect();
        let n = paths.len();
        paths.dedup();
        assert_eq!(paths.len(), n);
        if n > 0 {
            assert!(find("/index.html").is_some_and(|(ct, _)| ct.starts_with("text/html")));
        }
    }

    #[test]
    fn every_file_has_a_route() {
        // Files are served by `/{file}` and `/{dir}/{file}` only: a deeper file would be
        // unreachable.
        for (path, _, _) in ASSETS {
            let depth = path.matches('/').count();
            assert!((1..=2).contains(&depth), "{path} has no route");
        }
    }
}
