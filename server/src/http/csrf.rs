//! Cross-site request refusal. `SameSite=Strict` cookies still travel with requests from
//! *same-site* pages: another port of the same host (a dev server an agent started) or a
//! sibling subdomain. So an unsafe request (anything but `GET`, `HEAD`, `OPTIONS`) that a
//! browser could have sent on its own — one carrying our cookies, or any `Origin` or
//! `Sec-Fetch-Site` header, and no bearer credential — must come from one of our origins
//! (an allowed `Origin`, or `Sec-Fetch-Site: same-origin`) and, when it has a body, declare it
//! as JSON, which no form can. Programs (a bearer header or `access_token`, no cookies, no
//! `Origin`) are not affected.
//!
//! Also which browser origins are ours ([`origin_allowed`]), for CORS and WebSocket upgrades.
//!
//! Part of the HTTP transport: called by `guard`; calls `access` and `extract`.

use axum::http::{header, HeaderMap, Method};

use crate::access::{presented_token, TokenSource, REFRESH_COOKIE};
use crate::error::ApiError;
use crate::extract::declares_json;
use crate::state::AppState;
use crate::util::cookie;

/// Why this request must be refused as cross-site, if it must.
pub(crate) fn refusal(
    state: &AppState,
    method: &Method,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Option<ApiError> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return None;
    }
    let source = presented_token(headers, query).map(|(_, source)| source);
    if matches!(source, Some(TokenSource::Header | TokenSource::Query)) {
        return None;
    }
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    let fetch_site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    let by_cookie =
        source == Some(TokenSource::Cookie) || cookie(headers, REFRESH_COOKIE).is_some();
    if !by_cookie && origin.is_none() && fetch_site.is_none() {
        return None;
    }
    let ours = fetch_site == Some("same-origin")
        || origin.is_some_and(|o| origin_allowed(state, headers, o));
    if !ours {
        return Some(ApiError::CrossSite(
            "the request did not come from this server's pages (Origin)",
        ));
    }
    if has_body(headers) && !declares_json(headers) {
        return Some(ApiError::CrossSite(
            "a browser request body must be declared as application/json",
        ));
    }
    None
}

/// Whether a browser `Origin` may use the API: same origin as the request's `Host`, the
/// public URL's origin, or one of the configured origins.
pub(crate) fn origin_allowed(state: &AppState, headers: &HeaderMap, origin: &str) -> bool {
    let origin = origin.trim_end_matches('/');
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let same_host = host.is_some_and(|h| {
        origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            == Some(h)
    });
    same_host
        || origin == url_origin(&state.public_url)
        || state
            .config
            .allowed_origins
            .iter()
            .any(|o| o.trim_end_matches('/') == origin)
}

fn url_origin(url: &str) -> &str {
    let after_scheme = url.find("://").map(|i| i + 3).unwrap_or(0);
    match url[after_scheme..].find('/') {
        Some(i) => &url[..after_scheme + i],
        None => url,
    }
}

/// Whether the request has (or declares) a body.
fn has_body(headers: &HeaderMap) -> bool {
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    headers.contains_key(header::CONTENT_TYPE)
        || headers.contains_key(header::TRANSFER_ENCODING)
        || length.is_some_and(|n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_compare_by_scheme_host_and_port() {
        assert_eq!(
            url_origin("https://moor.example/x/y"),
            "https://moor.example"
        );
        assert_eq!(url_origin("http://127.0.0.1:7070"), "http://127.0.0.1:7070");
    }
}
