//! Request hardening in front of every route (HTTP middleware; the limits themselves are
//! `access::limits`): security headers (HSTS when serving TLS), CORS for an allow-list of
//! origins, WebSocket `Origin` checks, cross-site refusal of unsafe browser requests (`csrf`),
//! and rate limits (per verified principal, else per client address) answered with `429` and
//! `Retry-After`. Client addresses come from the socket, or from `X-Forwarded-For` only when
//! the operator opted in (`trust_forwarded`).
//!
//! Part of the HTTP transport: calls `access` and `state`; never `sse` or `ws`.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::csrf::{self, origin_allowed};
use crate::access::presented_token;
use crate::error::ApiError;
use crate::state::AppState;
use crate::util::LogStr;

/// The web app's content security policy: only its own scripts, connections and workers,
/// never framed.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                   img-src 'self' data: blob:; connect-src 'self'; worker-src 'self'; \
                   frame-ancestors 'none'; base-uri 'none'; object-src 'none'; form-action 'self'";

/// The client's address: the socket peer, or with `trust_forwarded` the address the (one,
/// trusted) reverse proxy appended last to `X-Forwarded-For`.
pub fn client_ip(
    state: &AppState,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
) -> Option<IpAddr> {
    if state.config.trust_forwarded {
        let forwarded = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .last()
            .and_then(|ip| ip.trim().parse().ok());
        if forwarded.is_some() {
            return forwarded;
        }
    }
    peer.map(|p| p.ip())
}

/// The bucket a request is counted in: the name its credential was issued to when the
/// credential verifies (signature and claims; a revoked one still counts against its owner),
/// else its client address. A made-up bearer is therefore counted against its address like no
/// credential at all, and cannot buy a fresh bucket per request.
fn rate_key(state: &AppState, req: &Request, ip: Option<IpAddr>) -> Option<String> {
    presented_token(req.headers(), req.uri().query())
        .and_then(|(token, _)| state.auth.verified_name(&token))
        .map(|name| format!("user:{name}"))
        .or_else(|| ip.map(|ip| format!("ip:{ip}")))
}

/// The middleware: rate limit, WebSocket origin check, CORS, security headers.
pub async fn layer(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let api = path.starts_with("/api/");
    let tls = state.config.tls.is_some();
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let cors_ok = origin
        .as_deref()
        .is_some_and(|o| origin_allowed(&state, req.headers(), o));
    // A cross-origin page must not open a socket with the user's cookie.
    let upgrade = req
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
    if upgrade && origin.is_some() && !cors_ok {
        tracing::info!(path = %LogStr(&path), "cross-origin WebSocket refused");
        return with_headers(
            (StatusCode::FORBIDDEN, "cross-origin WebSocket refused").into_response(),
            None,
            api,
            tls,
        );
    }
    if api && req.method() == Method::OPTIONS && origin.is_some() {
        let mut resp = StatusCode::NO_CONTENT.into_response();
        if cors_ok {
            insert_static(
                resp.headers_mut(),
                &[
                    (
                        header::ACCESS_CONTROL_ALLOW_METHODS,
                        "GET, POST, PUT, DELETE",
                    ),
                    (
                        header::ACCESS_CONTROL_ALLOW_HEADERS,
                        "authorization, content-type, last-event-id",
                    ),
                    (header::ACCESS_CONTROL_MAX_AGE, "600"),
                ],
            );
        }
        return with_headers(resp, cors_ok.then_some(origin).flatten(), api, tls);
    }
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let ip = client_ip(&state, req.headers(), peer);
    if api {
        if let Some(key) = rate_key(&state, &req, ip) {
            if let Err(secs) = state.auth.limits.requests.check(&key) {
                return with_headers(ApiError::RateLimited(secs).into_response(), None, api, tls);
            }
        }
        // A decision link carries its own credential and is never served by a cookie: the
        // ntfy web app posts it cross-origin.
        let refusal = (path != super::notify::DECIDE_PATH)
            .then(|| csrf::refusal(&state, req.method(), req.headers(), req.uri().query()))
            .flatten();
        if let Some(refusal) = refusal {
            let from = LogStr(origin.as_deref().unwrap_or("-"));
            tracing::info!(path = %LogStr(&path), origin = %from, "cross-site request refused");
            return with_headers(refusal.into_response(), None, api, tls);
        }
    }
    let mut req = req;
    req.extensions_mut().insert(ClientIp(ip));
    let resp = next.run(req).await;
    with_headers(resp, cors_ok.then_some(origin).flatten(), api, tls)
}

fn with_headers(mut resp: Response, cors_origin: Option<String>, api: bool, tls: bool) -> Response {
    let h = resp.headers_mut();
    if tls {
        // Served over HTTPS by moord itself: browsers must not fall back to plain HTTP.
        insert_static(
            h,
            &[(header::STRICT_TRANSPORT_SECURITY, "max-age=31536000")],
        );
    }
    let csp = if api {
        "default-src 'none'; frame-ancestors 'none'"
    } else {
        CSP
    };
    insert_static(
        h,
        &[
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CONTENT_SECURITY_POLICY, csp),
        ],
    );
    if let Some(origin) = cors_origin.and_then(|o| HeaderValue::from_str(&o).ok()) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    resp
}

/// Sets each header to its fixed value.
fn insert_static(h: &mut HeaderMap, headers: &[(HeaderName, &'static str)]) {
    for (name, value) in headers {
        h.insert(name.clone(), HeaderValue::from_static(value));
    }
}

/// The client's address as [`client_ip`] sees it, for handlers.
#[derive(Debug, Clone, Copy)]
pub struct ClientIp(pub Option<IpAddr>);
