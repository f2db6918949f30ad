//! Notification endpoints: the VAPID public key, and the caller's Web Push subscriptions
//! (add, list, remove), each labelled by device.
//!
//! Part of the HTTP transport: calls `store` and `notify`; never `sse` or `ws`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use moor_protocol::notify::{NewPushSubscription, PushSubscriptionInfo, VapidKey};
use moor_protocol::now_ms;

use crate::access::{random_secret, AuthUser};
use crate::error::ApiError;
use crate::extract::Json;
use crate::notify::webpush::subscription_keys;
use crate::state::AppState;
use crate::store::notify::PushSubscriptionRow;

/// Longest push endpoint URL accepted.
const MAX_ENDPOINT_BYTES: usize = 2048;
/// Longest device label accepted.
const MAX_DEVICE_CHARS: usize = 64;

/// `GET /api/v1/notify/vapid`.
#[utoipa::path(
    get, path = "/notify/vapid", operation_id = "vapidKey", tag = "access",
    responses(
        (status = 200, description = "The key browsers pass as applicationServerKey", body = VapidKey),
        crate::openapi::LookupErrors,
    )
)]
pub(crate) async fn vapid(
    State(state): State<AppState>,
    AuthUser(_who): AuthUser,
) -> Result<Json<VapidKey>, ApiError> {
    Ok(Json(VapidKey {
        public_key: state.vapid_public_key.to_string(),
    }))
}

/// `GET /api/v1/notify/subscriptions`.
#[utoipa::path(
    get, path = "/notify/subscriptions", operation_id = "listPushSubscriptions", tag = "access",
    responses(
        (status = 200, description = "The caller's devices, oldest first", body = Vec<PushSubscriptionInfo>),
        crate::openapi::LookupErrors,
    )
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
) -> Result<Json<Vec<PushSubscriptionInfo>>, ApiError> {
    let subs = state.store.notify.subscriptions(&who.name).await?;
    Ok(Json(subs.into_iter().map(info).collect()))
}

/// `POST /api/v1/notify/subscriptions`: adds (or, for a known endpoint, replaces) a device.
#[utoipa::path(
    post, path = "/notify/subscriptions", operation_id = "addPushSubscription", tag = "access",
    request_body = NewPushSubscription,
    responses(
        (status = 201, description = "The device will be notified", body = PushSubscriptionInfo),
        crate::openapi::BodyErrors,
    )
)]
pub(crate) async fn add(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Json(req): Json<NewPushSubscription>,
) -> Result<(StatusCode, Json<PushSubscriptionInfo>), ApiError> {
    let device = req.device.trim();
    if device.is_empty() || device.chars().count() > MAX_DEVICE_CHARS {
        return Err(ApiError::Invalid {
            field: "device",
            reason: format!("give a label of 1 to {MAX_DEVICE_CHARS} characters"),
        });
    }
    check_endpoint(&req.endpoint, state.config.notify.allow_loopback_http)?;
    subscription_keys(&req.keys.p256dh, &req.keys.auth).map_err(|reason| ApiError::Invalid {
        field: "keys",
        reason,
    })?;
    let row = PushSubscriptionRow {
        id: random_secret()[..16].to_owned(),
        principal: who.name.clone(),
        device: device.to_owned(),
        endpoint: req.endpoint,
        p256dh: req.keys.p256dh,
        auth: req.keys.auth,
        created_at: now_ms(),
    };
    state.store.notify.put_subscription(&row).await?;
    Ok((StatusCode::CREATED, Json(info(row))))
}

/// `DELETE /api/v1/notify/subscriptions/{id}`.
#[utoipa::path(
    delete, path = "/notify/subscriptions/{id}", operation_id = "deletePushSubscription", tag = "access",
    params(("id" = String, Path, description = "The subscription id")),
    responses(
        (status = 204, description = "The device is no longer notified"),
        crate::openapi::LookupErrors,
    )
)]
pub(crate) async fn remove(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if state
        .store
        .notify
        .remove_subscription(&who.name, &id)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("subscription"))
    }
}

fn info(row: PushSubscriptionRow) -> PushSubscriptionInfo {
    PushSubscriptionInfo {
        id: row.id,
        device: row.device,
        endpoint: row.endpoint,
        created_at: row.created_at,
    }
}

/// A push endpoint must be `https://`, or `http://` on a loopback address when allowed (a
/// local push service): the server posts to it, so anything else could reach internal hosts
/// in the clear.
fn check_endpoint(endpoint: &str, allow_loopback_http: bool) -> Result<(), ApiError> {
    let invalid = |reason: &str| ApiError::Invalid {
        field: "endpoint",
        reason: reason.to_owned(),
    };
    if endpoint.len() > MAX_ENDPOINT_BYTES {
        return Err(invalid("the endpoint URL is too long"));
    }
    let uri: axum::http::Uri = endpoint.parse().map_err(|_| invalid("not a URL"))?;
    let host = uri.host().unwrap_or("");
    match uri.scheme_str() {
        Some("https") if !host.is_empty() => Ok(()),
        Some("http")
            if allow_loopback_http
                && (host == "localhost"
                    || host
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())) =>
        {
            Ok(())
        }
        _ => Err(invalid("a push endpoint must be an https:// URL")),
    }
}
