//! Notification endpoints: the VAPID public key, the caller's Web Push subscriptions (add,
//! list, remove), each labelled by device, their sinks, mutes and quiet hours.
//!
//! Part of the HTTP transport: calls `store` and `notify`; never `sse` or `ws`.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use moor_protocol::api::{InputAccepted, InputRequest};
use moor_protocol::notify::{
    NewNotifySink, NewPushSubscription, NotificationText, NotifyClass, NotifyMutes, NotifySinkInfo,
    PushSubscriptionInfo, QuietHours, SinkKind, VapidKey,
};
use moor_protocol::payload::InputPermission;
use moor_protocol::{now_ms, Seq};

use crate::access::{random_secret, session_for, AuthUser, Principal, Role};
use crate::error::ApiError;
use crate::extract::Json;
use crate::http::inputs::submit_input;
use crate::notify::compose::text_of;
use crate::notify::quiet::QuietWindow;
use crate::notify::webpush::subscription_keys;
use crate::state::AppState;
use crate::store::notify::{
    PushSubscriptionRow, SinkRow, MAX_MUTED_SESSIONS_PER_PRINCIPAL, MAX_SINKS_PER_PRINCIPAL,
};
use crate::store::Range;
use crate::util::query_param;

/// Longest push endpoint URL accepted.
const MAX_ENDPOINT_BYTES: usize = 2048;
/// Longest device label accepted.
const MAX_DEVICE_CHARS: usize = 64;
/// Longest ntfy access token accepted.
const MAX_TOKEN_BYTES: usize = 256;

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

/// `GET /api/v1/notify/sinks`.
#[utoipa::path(
    get, path = "/notify/sinks", operation_id = "listNotifySinks", tag = "access",
    responses(
        (status = 200, description = "The caller's ntfy topics and webhooks, oldest first (no secrets)", body = Vec<NotifySinkInfo>),
        crate::openapi::LookupErrors,
    )
)]
pub(crate) async fn list_sinks(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
) -> Result<Json<Vec<NotifySinkInfo>>, ApiError> {
    let sinks = state.store.notify.sinks(&who.name).await?;
    Ok(Json(
        sinks.into_iter().map(|s| sink_info(s, false)).collect(),
    ))
}

/// `POST /api/v1/notify/sinks`: adds an ntfy topic or a webhook for the caller.
#[utoipa::path(
    post, path = "/notify/sinks", operation_id = "addNotifySink", tag = "access",
    request_body = NewNotifySink,
    responses(
        (status = 201, description = "The sink will be notified; a webhook's signing secret is shown only here", body = NotifySinkInfo),
        crate::openapi::BodyErrors,
    )
)]
pub(crate) async fn add_sink(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Json(req): Json<NewNotifySink>,
) -> Result<(StatusCode, Json<NotifySinkInfo>), ApiError> {
    let label = req.label.trim();
    if label.is_empty() || label.chars().count() > MAX_DEVICE_CHARS {
        return Err(ApiError::Invalid {
            field: "label",
            reason: format!("give a label of 1 to {MAX_DEVICE_CHARS} characters"),
        });
    }
    check_url(&req.url, "url", state.config.notify.allow_loopback_http)?;
    let (kind, secret) = match req.kind {
        SinkKind::Ntfy => {
            let token = req.token.unwrap_or_default();
            if token.len() > MAX_TOKEN_BYTES || token.chars().any(|c| !c.is_ascii_graphic()) {
                return Err(ApiError::Invalid {
                    field: "token",
                    reason: format!(
                        "an access token is up to {MAX_TOKEN_BYTES} printable ASCII characters"
                    ),
                });
            }
            ("ntfy", token)
        }
        SinkKind::Webhook => ("webhook", random_secret()),
    };
    let row = SinkRow {
        id: random_secret()[..16].to_owned(),
        principal: who.name.clone(),
        kind: kind.to_owned(),
        label: label.to_owned(),
        url: req.url,
        secret,
        created_at: now_ms(),
    };
    if !state.store.notify.add_sink(&row).await? {
        return Err(ApiError::Invalid {
            field: "kind",
            reason: format!("at most {MAX_SINKS_PER_PRINCIPAL} sinks per user; remove one first"),
        });
    }
    Ok((StatusCode::CREATED, Json(sink_info(row, true))))
}

/// `DELETE /api/v1/notify/sinks/{id}`.
#[utoipa::path(
    delete, path = "/notify/sinks/{id}", operation_id = "deleteNotifySink", tag = "access",
    params(("id" = String, Path, description = "The sink id")),
    responses(
        (status = 204, description = "The sink is no longer notified"),
        crate::openapi::LookupErrors,
    )
)]
pub(crate) async fn remove_sink(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if state.store.notify.remove_sink(&who.name, &id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("sink"))
    }
}

fn sink_info(row: SinkRow, with_secret: bool) -> NotifySinkInfo {
    let kind = if row.kind == "ntfy" {
        SinkKind::Ntfy
    } else {
        SinkKind::Webhook
    };
    NotifySinkInfo {
        id: row.id,
        kind,
        label: row.label,
        url: row.url,
        created_at: row.created_at,
        secret: (with_secret && kind == SinkKind::Webhook).then_some(row.secret),
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

/// A URL the server posts to (push endpoint, ntfy topic, webhook) must be `https://`, or
/// `http://` on a loopback address when allowed (local services): anything else could reach
/// internal hosts in the clear.
fn check_endpoint(endpoint: &str, allow_loopback_http: bool) -> Result<(), ApiError> {
    check_url(endpoint, "endpoint", allow_loopback_http)
}

fn check_url(url: &str, field: &'static str, allow_loopback_http: bool) -> Result<(), ApiError> {
    let invalid = |reason: &str| ApiError::Invalid {
        field,
        reason: reason.to_owned(),
    };
    if url.len() > MAX_ENDPOINT_BYTES {
        return Err(invalid("the URL is too long"));
    }
    let uri: axum::http::Uri = url.parse().map_err(|_| invalid("not a URL"))?;
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
        _ => Err(invalid("the URL must be https://")),
    }
}

/// `GET /api/v1/notify/mutes`.
#[utoipa::path(
    get, path = "/notify/mutes", operation_id = "listNotifyMutes", tag = "access",
    responses(
        (status = 200, description = "The classes and sessions the caller muted", body = NotifyMutes),
        crate::openapi::LookupErrors,
    )
)]
pub(crate) async fn mutes(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
) -> Result<Json<NotifyMutes>, ApiError> {
    let row = state.store.notify.mutes(&who.name).await?;
    Ok(Json(NotifyMutes {
        classes: NotifyClass::ALL
            .into_iter()
            .filter(|c| row.classes.iter().any(|m| m == c.as_str()))
            .collect(),
        sessions: row.sessions,
    }))
}

/// Mutes or unmutes the class `name` (a path's; 404 for another) for `principal`.
async fn set_class_muted(
    state: &AppState,
    principal: &str,
    name: &str,
    muted: bool,
) -> Result<StatusCode, ApiError> {
    let class = NotifyClass::from_name(name).ok_or(ApiError::NotFound("notification class"))?;
    state
        .store
        .notify
        .mute_class(principal, class.as_str(), muted)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `PUT /api/v1/notify/mutes/classes/{class}`: the class notifies the caller nowhere.
#[utoipa::path(
    put, path = "/notify/mutes/classes/{class}", operation_id = "muteNotifyClass", tag = "access",
    params(("class" = NotifyClass, Path, description = "The class to mute")),
    responses(
        (status = 204, description = "Muted"),
        crate::openapi::LookupErrors,
    )
)]
pub(crate) async fn mute_class(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(class): Path<String>,
) -> Result<StatusCode, ApiError> {
    set_class_muted(&state, &who.name, &class, true).await
}

/// `DELETE /api/v1/notify/mutes/classes/{class}`: the class notifies the caller again.
#[utoipa::path(
    delete, path = "/notify/mutes/classes/{class}", operation_id = "unmuteNotifyClass", tag = "access",
    params(("class" = NotifyClass, Path, description = "The class to unmute")),
    responses(
        (status = 204, description = "Not muted"),
        crate::openapi::LookupErrors,
    )
)]
pub(crate) async fn unmute_class(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(class): Path<String>,
) -> Result<StatusCode, ApiError> {
    set_class_muted(&state, &who.name, &class, false).await
}

/// `PUT /api/v1/notify/mutes/sessions/{id}`: the session notifies the caller of nothing.
#[utoipa::path(
    put, path = "/notify/mutes/sessions/{id}", operation_id = "muteNotifySession", tag = "access",
    params(("id" = String, Path, description = "A session the caller has a role on (id or name)")),
    responses(
        (status = 204, description = "Muted"),
        crate::openapi::ReadErrors,
    )
)]
pub(crate) async fn mute_session(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let session = session_for(&state.store, &who, &id, Role::Viewer).await?;
    if !state
        .store
        .notify
        .mute_session(&who.name, session.id, true, now_ms())
        .await?
    {
        return Err(ApiError::Invalid {
            field: "id",
            reason: format!(
                "at most {MAX_MUTED_SESSIONS_PER_PRINCIPAL} muted sessions: unmute one first"
            ),
        });
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/v1/notify/mutes/sessions/{id}`: the session notifies the caller again.
#[utoipa::path(
    delete, path = "/notify/mutes/sessions/{id}", operation_id = "unmuteNotifySession", tag = "access",
    params(("id" = String, Path, description = "A session the caller has a role on (id or name)")),
    responses(
        (status = 204, description = "Not muted"),
        crate::openapi::LookupErrors,
    )
)]
pub(crate) async fn unmute_session(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let session = session_for(&state.store, &who, &id, Role::Viewer).await?;
    state
        .store
        .notify
        .mute_session(&who.name, session.id, false, now_ms())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/v1/notify/quiet-hours`: the caller's quiet hours (404 when none are set).
#[utoipa::path(
    get, path = "/notify/quiet-hours", operation_id = "getQuietHours", tag = "access",
    responses(
        (status = 200, description = "The caller's quiet hours", body = QuietHours),
        crate::openapi::LookupErrors,
    )
)]
pub(crate) async fn quiet_hours(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
) -> Result<Json<QuietHours>, ApiError> {
    let quiet = state.store.notify.quiet_hours(&who.name).await?;
    quiet.map(Json).ok_or(ApiError::NotFound("quiet hours"))
}

/// `PUT /api/v1/notify/quiet-hours`: sets the caller's quiet hours (every day from `start` to
/// `end` in `time_zone`, notifications arrive without sound or vibration).
#[utoipa::path(
    put, path = "/notify/quiet-hours", operation_id = "putQuietHours", tag = "access",
    request_body = QuietHours,
    responses(
        (status = 200, description = "Set", body = QuietHours),
        crate::openapi::BodyErrors,
    )
)]
pub(crate) async fn put_quiet_hours(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Json(req): Json<QuietHours>,
) -> Result<Json<QuietHours>, ApiError> {
    QuietWindow::parse(&req).map_err(|reason| ApiError::Invalid {
        field: "quiet_hours",
        reason,
    })?;
    state
        .store
        .notify
        .set_quiet_hours(&who.name, Some(&req))
        .await?;
    Ok(Json(req))
}

/// `DELETE /api/v1/notify/quiet-hours`: no quiet hours any more.
#[utoipa::path(
    delete, path = "/notify/quiet-hours", operation_id = "deleteQuietHours", tag = "access",
    responses(
        (status = 204, description = "No quiet hours"),
        crate::openapi::LookupErrors,
    )
)]
pub(crate) async fn delete_quiet_hours(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
) -> Result<StatusCode, ApiError> {
    state.store.notify.set_quiet_hours(&who.name, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Path of the one-use decision links (`access::action_link`): the link's token is its
/// `link` query parameter, so request logs (which hold the path only) never show it.
pub(crate) const DECIDE_PATH: &str = "/api/v1/notify/decide";

/// `POST /api/v1/notify/decide?link=…`: an Approve or Deny button of an ntfy notification
/// (or a webhook's link). The link is the credential; its user must still exist and still
/// control the session, and the request must still be pending.
#[utoipa::path(
    post, path = "/notify/decide", operation_id = "decideByLink", tag = "access", security(()),
    params(("link" = String, Query, description = "The one-use token of the link")),
    responses(
        (status = 200, description = "The decision is stored for the agent", body = InputAccepted),
        crate::openapi::LookupErrors,
        crate::openapi::Forbidden,
        crate::openapi::Conflict,
        crate::openapi::Gone,
    )
)]
pub(crate) async fn decide(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Json<InputAccepted>, ApiError> {
    let token = query_param(query.as_deref().unwrap_or(""), "link").unwrap_or_default();
    let link = state.auth.verify_action(&token).map_err(|e| {
        tracing::debug!(reason = %e, "decision link refused");
        ApiError::Unauthorized
    })?;
    let user = match state.store.access.user(&link.sub).await {
        Ok(u) if u.revoked_at.is_none() => u,
        _ => return Err(ApiError::Unauthorized),
    };
    let who = Principal::for_user(user.name, None).as_admin(user.admin);
    let session = session_for(&state.store, &who, &link.sid, Role::Controller).await?;
    let decision = InputPermission {
        request_id: Some(link.rid.clone()),
        decision: link.dec,
        message: None,
    };
    let req = InputRequest::typed(link.client_msg_id(), decision);
    let accepted = submit_input(&state, session.id, &who, req)
        .await
        .map_err(|e| match e {
            ApiError::InputConflict(_) => {
                ApiError::Conflict("the other button of this notification was used".to_owned())
            }
            other => other,
        })?;
    if accepted.duplicate {
        return Err(ApiError::Gone("this link was used already".to_owned()));
    }
    Ok(Json(accepted))
}

/// `GET /api/v1/sessions/{id}/notification?seq=N&count=K`: the words of a notification sent
/// in privacy mode, for the service worker showing it.
#[utoipa::path(
    get, path = "/sessions/{id}/notification", operation_id = "notificationText", tag = "sessions",
    params(
        ("id" = String, Path, description = "Session id or name"),
        ("seq" = u64, Query, description = "The newest entry the notification covers"),
        ("count" = Option<u32>, Query, description = "How many entries it covers (default 1)"),
    ),
    responses(
        (status = 200, description = "Title and body", body = NotificationText),
        crate::openapi::ReadErrors,
    )
)]
pub(crate) async fn notification_text(
    State(state): State<AppState>,
    AuthUser(who): AuthUser,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<NotificationText>, ApiError> {
    let query = query.unwrap_or_default();
    let number = |name: &str| query_param(&query, name).map(|v| v.parse::<u64>());
    let seq = match number("seq") {
        Some(Ok(seq)) if seq > 0 => Seq(seq),
        _ => {
            return Err(ApiError::Invalid {
                field: "seq",
                reason: "a positive entry seq is required".to_owned(),
            })
        }
    };
    let count = match number("count") {
        None => 1,
        Some(Ok(n)) => n.clamp(1, u32::MAX as u64) as u32,
        Some(Err(_)) => {
            return Err(ApiError::Invalid {
                field: "count",
                reason: "expected a number".to_owned(),
            })
        }
    };
    let session = session_for(&state.store, &who, &key, Role::Viewer).await?;
    let entry = state
        .store
        .log
        .read(session.id, Range::After(Seq(seq.0 - 1)), 1)
        .await?
        .into_iter()
        .find(|e| e.seq == seq)
        .ok_or(ApiError::NotFound("entry"))?;
    let (title, body) =
        text_of(session.id, &entry, count).ok_or(ApiError::NotFound("notification"))?;
    Ok(Json(NotificationText {
        title: format!("{}: {title}", session.name),
        body,
    }))
}
