//! Cross-site request refusal. `SameSite=Strict` cookies still travel with requests from
//! *same-site* pages: another port of the same host (a dev server an agent started) or a
//! sibling subdomain. So an unsafe request (anything but `GET`, `HEAD`, `OPTIONS`) that a
//! browser could have sent on its own — one carrying our cookies, or any `Origin` or
//! `Sec-Fetch-Site` header, and no bearer credential — must come from one of our origins
//! (an allowed `Origin`, or `Sec-Fetch-Site: same-origin`) and, when it has a body, declare it
//! as JSON, which no form can. Programs (a bearer header or `access_token`, no cookies, no
//! `Origin`) are not affected.
//!
//! Part of the HTTP transport: called by `guard`; calls `access` and `extract`.

use axum::http::{header, HeaderMap, Method};

use super::guard::origin_allowed;
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
