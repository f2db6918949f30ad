//! Notifications: what a Web Push message carries (encrypted for one device) and the bodies of
//! the subscription endpoints under `/api/v1/notify`.

use serde::{Deserialize, Serialize};

use crate::ids::{Seq, SessionId};

/// What a notification is about; notifications of one class in one session coalesce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum NotifyClass {
    /// A permission request waits for a decision.
    Permission,
    /// A turn finished.
    Turn,
    /// The agent went silent past its stall timeout.
    Stalled,
    /// The agent exited abnormally, or was restarted after a crash or stall.
    Crashed,
    /// The bridge has been gone for longer than the configured time.
    BridgeLost,
    /// A remote input could not be applied.
    InputFailed,
    /// The session ended.
    Ended,
    /// Several notifications from an outage, folded into one.
    Summary,
}

/// An action button a notification offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum NotifyAction {
    /// Allow the pending permission request (`input.permission` allow).
    Approve,
    /// Deny the pending permission request.
    Deny,
}

/// The JSON a push message carries, sent by `moord` to one device through its push service.
/// The service worker shows it, or, when `close` is set, closes the notification with the
/// same `tag` on that device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PushMessage {
    /// Replaces (or, with `close`, closes) the notification shown with the same tag.
    pub tag: String,
    /// The session.
    pub session: SessionId,
    /// What it is about.
    pub class: NotifyClass,
    /// The newest entry it covers.
    pub seq: Seq,
    /// How many entries it covers (coalesced).
    pub count: u32,
    /// Title line (empty in privacy mode).
    pub title: String,
    /// Body text (empty in privacy mode).
    pub body: String,
    /// The permission request it asks about, for `Permission` (and its retraction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub request_id: Option<String>,
    /// Buttons to offer: only to people who may decide (never to viewers).
    #[serde(default)]
    pub actions: Vec<NotifyAction>,
    /// Close the notification with this tag instead of showing one (the request was answered).
    #[serde(default)]
    pub close: bool,
    /// The page to open on a tap.
    pub url: String,
}

/// `POST /api/v1/notify/subscriptions`: a browser's `PushSubscription` and a device label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewPushSubscription {
    /// A label for the device ("phone"), shown in the list.
    pub device: String,
    /// The push service URL from `PushSubscription.endpoint`.
    pub endpoint: String,
    /// The keys from `PushSubscription.toJSON().keys`.
    pub keys: PushKeys,
}

/// A subscription's keys (base64url).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PushKeys {
    /// The browser's P-256 public key (uncompressed point).
    pub p256dh: String,
    /// The browser's 16-byte authentication secret.
    pub auth: String,
}

/// A subscription as listed (its keys are not shown again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PushSubscriptionInfo {
    /// Its id, for removal.
    pub id: String,
    /// The device label.
    pub device: String,
    /// The push service URL.
    pub endpoint: String,
    /// When it was added, ms since the epoch.
    pub created_at: i64,
}

/// `GET /api/v1/notify/vapid`: the server's VAPID public key, for
/// `pushManager.subscribe({applicationServerKey})`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VapidKey {
    /// Uncompressed P-256 point, base64url without padding.
    pub public_key: String,
}
