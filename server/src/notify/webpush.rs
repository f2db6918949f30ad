//! The Web Push sink: one encrypted (RFC 8291 `aes128gcm`), VAPID-signed (RFC 8292) request
//! per subscription to its push service (RFC 8030). Encryption and signing are the
//! `web-push-native` crate's; this module only builds, sends and classifies the answer.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use moor_protocol::notify::PushMessage;
use sha2::{Digest, Sha256};
use web_push_native::p256::PublicKey;
use web_push_native::{Auth, WebPushBuilder};

use super::vapid::Vapid;
use crate::store::notify::PushSubscriptionRow;

/// How a delivery went.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// The push service took it.
    Sent,
    /// The subscription no longer exists (404 or 410): remove it.
    Gone,
    /// It failed; worth retrying (network, 429, 5xx).
    Retry(String),
    /// It failed for good for this subscription (another 4xx, bad keys).
    Failed(String),
}

/// Sends push messages with the server's VAPID key.
#[derive(Debug, Clone)]
pub(crate) struct WebPush {
    vapid: Vapid,
    subject: String,
    http: reqwest::Client,
    /// How long a push service keeps an undelivered message (`TTL`).
    ttl: Duration,
}

impl WebPush {
    pub(crate) fn new(vapid: Vapid, subject: String, timeout: Duration) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            vapid,
            subject,
            http,
            ttl: Duration::from_secs(24 * 3600),
        })
    }

    /// Encrypts `message` for `sub` and posts it to the push service.
    pub(crate) async fn send(&self, sub: &PushSubscriptionRow, message: &PushMessage) -> Delivery {
        let request = match self.build(sub, message) {
            Ok(r) => r,
            Err(reason) => return Delivery::Failed(reason),
        };
        let request = match reqwest::Request::try_from(request) {
            Ok(r) => r,
            Err(e) => return Delivery::Failed(format!("build request: {e}")),
        };
        match self.http.execute(request).await {
            Ok(resp) => classify(resp.status().as_u16()),
            Err(e) => Delivery::Retry(format!("push service unreachable: {e}")),
        }
    }

    fn build(
        &self,
        sub: &PushSubscriptionRow,
        message: &PushMessage,
    ) -> Result<axum::http::Request<Vec<u8>>, String> {
        let endpoint: axum::http::Uri =
            sub.endpoint.parse().map_err(|e| format!("endpoint: {e}"))?;
        let (public, auth) = subscription_keys(&sub.p256dh, &sub.auth)?;
        let body = serde_json::to_vec(message).map_err(|e| format!("encode: {e}"))?;
        let mut request = WebPushBuilder::new(endpoint, public, auth)
            .with_valid_duration(self.ttl)
            .with_vapid(&self.vapid.key, &self.subject)
            .build(body)
            .map_err(|e| format!("encrypt: {e}"))?;
        let headers = request.headers_mut();
        let urgency = if message.class == moor_protocol::notify::NotifyClass::Permission {
            "high"
        } else {
            "normal"
        };
        headers.insert("urgency", axum::http::HeaderValue::from_static(urgency));
        // A push service replaces an undelivered message with a newer one of the same topic
        // (RFC 8030 §5.4): a phone offline for a while gets the latest of each tag only.
        if let Ok(topic) = axum::http::HeaderValue::from_str(&topic(&message.tag)) {
            headers.insert("topic", topic);
        }
        Ok(request)
    }
}

/// Decodes and checks a subscription's keys: a P-256 point and a 16-byte secret.
pub(crate) fn subscription_keys(p256dh: &str, auth: &str) -> Result<(PublicKey, Auth), String> {
    let point = URL_SAFE_NO_PAD
        .decode(p256dh.trim_end_matches('='))
        .map_err(|_| "p256dh is not base64url".to_owned())?;
    let public =
        PublicKey::from_sec1_bytes(&point).map_err(|_| "p256dh is not a P-256 point".to_owned())?;
    let secret = URL_SAFE_NO_PAD
        .decode(auth.trim_end_matches('='))
        .map_err(|_| "auth is not base64url".to_owned())?;
    if secret.len() != 16 {
        return Err("auth is not 16 bytes".to_owned());
    }
    Ok((public, Auth::clone_from_slice(&secret)))
}

/// A tag as an RFC 8030 topic: at most 32 base64url characters.
fn topic(tag: &str) -> String {
    let digest = Sha256::digest(tag.as_bytes());
    URL_SAFE_NO_PAD.encode(&digest[..24])
}

/// What a push service's (or sink's) answer means.
pub(crate) fn classify(status: u16) -> Delivery {
    match status {
        200..=299 => Delivery::Sent,
        404 | 410 => Delivery::Gone,
        429 | 500..=599 => Delivery::Retry(format!("push service answered {status}")),
        _ => Delivery::Failed(format!("push service answered {status}")),
    }
}
