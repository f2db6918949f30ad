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

impl NotifyClass {
    /// Every class, in declared order.
    pub const ALL: [NotifyClass; 8] = [
        Self::Permission,
        Self::Turn,
        Self::Stalled,
        Self::Crashed,
        Self::BridgeLost,
        Self::InputFailed,
        Self::Ended,
        Self::Summary,
    ];

    /// Its wire name (`permission`, `turn`, `bridge_lost`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Permission => "permission",
            Self::Turn => "turn",
            Self::Stalled => "stalled",
            Self::Crashed => "crashed",
            Self::BridgeLost => "bridge_lost",
            Self::InputFailed => "input_failed",
            Self::Ended => "ended",
            Self::Summary => "summary",
        }
    }

    /// The class named `name` (a wire name).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

#[cfg(test)]
mod class_tests {
    use super::NotifyClass;

    #[test]
    fn class_names_are_their_wire_names() {
        for class in NotifyClass::ALL {
            let wire = serde_json::to_value(class).unwrap();
            assert_eq!(wire.as_str(), Some(class.as_str()));
            assert_eq!(NotifyClass::from_name(class.as_str()), Some(class));
        }
    }
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
    /// Sent during the recipient's quiet hours: show it without sound or vibration.
    #[serde(default)]
    pub quiet: bool,
    /// Privacy mode: `title` and `body` are empty; the service worker asks this server for them
    /// (`GET /api/v1/sessions/{session}/notification?seq=&count=`) when it shows the notification.
    #[serde(default)]
    pub private: bool,
}

/// `GET /api/v1/sessions/{id}/notification`: the words of a notification sent in privacy mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NotificationText {
    /// Title line, with the session's name.
    pub title: String,
    /// Body text.
    pub body: String,
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

/// The kind of a self-hosted notification sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SinkKind {
    /// An ntfy topic URL: the notification is POSTed as text with ntfy's headers.
    Ntfy,
    /// A generic webhook: the notification is POSTed as JSON, HMAC-SHA256 signed.
    Webhook,
}

/// `POST /api/v1/notify/sinks`: a sink to add for the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewNotifySink {
    /// ntfy or webhook.
    pub kind: SinkKind,
    /// A label of 1 to 64 characters.
    pub label: String,
    /// Where to POST: an `https://` URL (for ntfy, the topic's URL).
    pub url: String,
    /// ntfy only: an access token sent as `Authorization: Bearer` (a protected topic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub token: Option<String>,
}

/// What a user has muted (`GET /api/v1/notify/mutes`): classes that notify them nowhere, and
/// sessions that notify them of nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NotifyMutes {
    /// Muted classes, in their declared order.
    pub classes: Vec<NotifyClass>,
    /// Muted sessions, oldest mute first.
    pub sessions: Vec<SessionId>,
}

/// A user's quiet hours: every day from `start` to `end` (local times in `time_zone`; an `end`
/// before `start` runs past midnight), notifications still arrive, and are shown without sound
/// or vibration. Nothing is held back or dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QuietHours {
    /// When they begin, `HH:MM` (24-hour).
    pub start: String,
    /// When they end, `HH:MM` (24-hour); not equal to `start`.
    pub end: String,
    /// The IANA time zone the times are in (`Europe/Paris`), as the browser reports it.
    pub time_zone: String,
}

/// A sink as listed; a webhook's signing secret only in the answer that created it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NotifySinkInfo {
    /// Its id, for removal.
    pub id: String,
    /// ntfy or webhook.
    pub kind: SinkKind,
    /// Its label.
    pub label: String,
    /// Where it is POSTed to.
    pub url: String,
    /// When it was added, ms since the epoch.
    pub created_at: i64,
    /// Webhook only, and only when it is created: the HMAC-SHA256 key (base64url) that signs
    /// each request's `X-Moor-Signature`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub secret: Option<String>,
}

/// The JSON body a webhook sink receives. `X-Moor-Timestamp` carries `timestamp`;
/// `X-Moor-Signature` is `sha256=` and the hex HMAC-SHA256, keyed with the sink's secret, of
/// `"<timestamp>.<body>"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WebhookBody {
    /// Always `moor.notification`.
    #[serde(rename = "type")]
    pub kind: String,
    /// When it was sent, ms since the epoch (reject old ones: replay).
    pub timestamp: i64,
    /// The notification, as a Web Push device would get it.
    pub message: PushMessage,
    /// For a permission request to someone who may decide: one-use links that decide it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub decide: Option<DecisionLinks>,
}

/// The two one-use links of a permission notification (`POST` either, no credentials: the link
/// is one). Valid for `--notify-action-ttl-secs`; once one of them is used, neither decides
/// again, and neither decides a request that is no longer pending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DecisionLinks {
    /// Allows the request.
    pub approve: String,
    /// Denies it.
    pub deny: String,
}
