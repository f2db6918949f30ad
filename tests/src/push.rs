//! `PushService`: a local Web Push service (RFC 8030) on 127.0.0.1 that plays the browser's
//! push service and the browser at once. Each [`Device`] is a real subscription: a P-256 key
//! pair and an auth secret made here. A push request is accepted only if its VAPID JWT
//! (RFC 8292) verifies with the key in its `Authorization` header, that key is the server's,
//! and its `aes128gcm` body (RFC 8291) decrypts with the device's private key; anything else
//! is answered 400 and recorded as a rejection, which tests assert never happens.
//! A device can be told to answer with another status (410 gone, 500) to test those paths.

use std::collections::HashMap;
use std::fmt::Debug;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use moor_protocol::notify::PushMessage;
use web_push_native::jwt_simple::algorithms::{ECDSAP256PublicKeyLike, ES256PublicKey};
use web_push_native::jwt_simple::claims::NoCustomClaims;
use web_push_native::jwt_simple::common::VerificationOptions;
use web_push_native::p256::elliptic_curve::rand_core::{OsRng, RngCore};
use web_push_native::p256::elliptic_curve::sec1::ToEncodedPoint;
use web_push_native::p256::SecretKey;
use web_push_native::Auth;

use crate::record::{Received as Recorded, Record, StandIn};

/// A subscribed browser: what `PushSubscription.toJSON()` gives, and the keys to read it.
#[derive(Debug, Clone)]
pub struct Device {
    /// Its id in the push service.
    pub id: String,
    /// The push endpoint URL.
    pub endpoint: String,
    /// Its public key (base64url uncompressed point).
    pub p256dh: String,
    /// Its auth secret (base64url).
    pub auth: String,
}

#[derive(Debug)]
struct DeviceKeys {
    secret: SecretKey,
    auth: [u8; 16],
    status: u16,
}

/// One accepted push request, decrypted.
#[derive(Debug, Clone)]
pub struct Received {
    /// The device it was for.
    pub device: String,
    /// The decrypted message.
    pub message: PushMessage,
    /// Its `Urgency` header.
    pub urgency: Option<String>,
    /// Its `Topic` header.
    pub topic: Option<String>,
    /// When it arrived (ms since the epoch).
    pub at: i64,
}

/// What the push service keeps of its devices and the requests to them.
#[derive(Debug, Default)]
pub struct PushState {
    devices: HashMap<String, DeviceKeys>,
    received: Vec<Received>,
    /// Requests answered with a device's chosen failure status: `(device, status)`.
    refused: Vec<(String, u16)>,
    /// When each refused request arrived (ms since the epoch), in the order of `refused`.
    refused_at: Vec<i64>,
    vapid_key: Option<String>,
}

impl Recorded for PushState {
    fn arrived(&self) -> &dyn Debug {
        &self.received
    }
}

/// The running push service; stops when dropped.
pub type PushService = StandIn<PushState>;

impl PushService {
    /// Binds 127.0.0.1:0 and serves.
    pub async fn start() -> Self {
        Self::serve(
            "push service",
            Router::new().route("/push/{id}", post(push)),
        )
        .await
    }

    /// Accept only tokens signed by this VAPID public key (base64url), the server's.
    pub fn expect_vapid_key(&self, key: &str) {
        self.record.lock().vapid_key = Some(key.to_owned());
    }

    /// A new subscription.
    pub fn subscribe(&self) -> Device {
        let secret = SecretKey::random(&mut OsRng);
        let mut auth = [0u8; 16];
        OsRng.fill_bytes(&mut auth);
        let id = uuid::Uuid::new_v4().simple().to_string();
        let p256dh = URL_SAFE_NO_PAD.encode(secret.public_key().to_encoded_point(false).as_bytes());
        self.record.lock().devices.insert(
            id.clone(),
            DeviceKeys {
                secret,
                auth,
                status: 201,
            },
        );
        Device {
            endpoint: format!("http://{}/push/{id}", self.addr),
            id,
            p256dh,
            auth: URL_SAFE_NO_PAD.encode(auth),
        }
    }

    /// Makes `device` answer every later request with `status` (410: gone, 500: failing).
    pub fn answer_with(&self, device: &Device, status: u16) {
        if let Some(d) = self.record.lock().devices.get_mut(&device.id) {
            d.status = status;
        }
    }

    /// Everything accepted so far.
    pub fn received(&self) -> Vec<Received> {
        self.record.lock().received.clone()
    }

    /// What `device` accepted so far.
    pub fn received_by(&self, device: &Device) -> Vec<Received> {
        let inner = self.record.lock();
        inner
            .received
            .iter()
            .filter(|r| r.device == device.id)
            .cloned()
            .collect()
    }

    /// Requests answered with a device's chosen failure status.
    pub fn refused(&self) -> Vec<(String, u16)> {
        self.record.lock().refused.clone()
    }

    /// When the requests to `device` that it refused arrived (ms since the epoch), in order.
    pub fn refused_at(&self, device: &Device) -> Vec<i64> {
        let inner = self.record.lock();
        inner
            .refused
            .iter()
            .zip(&inner.refused_at)
            .filter(|((d, _), _)| *d == device.id)
            .map(|(_, at)| *at)
            .collect()
    }

    /// Waits until `done` holds for the state (checked on every request), or panics after
    /// `timeout` (a failure guard) with what arrived.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut(&[Received], &[(String, u16)]) -> bool,
    ) {
        self.record
            .wait_until(timeout, what, |inner| done(&inner.received, &inner.refused))
            .await;
    }
}

async fn push(
    State(record): State<Record<PushState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let outcome = accept(&record, &id, &headers, &body);
    record.update(|inner| match outcome {
        Ok(Some(received)) => {
            inner.received.push(received);
            StatusCode::CREATED
        }
        Ok(None) => {
            let status = inner.devices.get(&id).map(|d| d.status).unwrap_or(404);
            inner.refused.push((id, status));
            inner.refused_at.push(moor_protocol::now_ms());
            StatusCode::from_u16(status).unwrap_or(StatusCode::GONE)
        }
        Err(reason) => {
            inner.rejections.push(reason);
            StatusCode::BAD_REQUEST
        }
    })
}

/// Verifies and decrypts one request: `Ok(None)` when the device is set to refuse (or is
/// unknown), an error when the request is not a valid Web Push request.
fn accept(
    record: &Record<PushState>,
    id: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Option<Received>, String> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (secret, auth, status, expected_key) = {
        let inner = record.lock();
        let Some(d) = inner.devices.get(id) else {
            return Ok(None);
        };
        (d.secret.clone(), d.auth, d.status, inner.vapid_key.clone())
    };
    // RFC 8292 §3: `Authorization: vapid t=<JWT>, k=<key>`.
    let authorization = header("authorization").ok_or("no Authorization header")?;
    let params = authorization
        .strip_prefix("vapid ")
        .ok_or_else(|| format!("not a vapid Authorization: {authorization}"))?;
    let mut token = None;
    let mut key = None;
    for part in params.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => token = Some(v.to_owned()),
            Some(("k", v)) => key = Some(v.to_owned()),
            _ => {}
        }
    }
    let (token, key) = token.zip(key).ok_or("vapid header without t= and k=")?;
    if let Some(expected) = expected_key {
        if key != expected {
            return Err(format!("VAPID key {key} is not the server's {expected}"));
        }
    }
    let key_bytes = URL_SAFE_NO_PAD
        .decode(&key)
        .map_err(|e| format!("k=: {e}"))?;
    let public = ES256PublicKey::from_bytes(&key_bytes).map_err(|e| format!("k=: {e}"))?;
    let options = VerificationOptions {
        max_validity: Some(Duration::from_secs(24 * 3600).into()),
        ..VerificationOptions::default()
    };
    let claims = public
        .verify_token::<NoCustomClaims>(&token, Some(options))
        .map_err(|e| format!("VAPID JWT does not verify: {e}"))?;
    let origin = format!("http://{}", shared_host());
    let audiences = claims.audiences.ok_or("VAPID JWT without aud")?.into_set();
    if !audiences
        .iter()
        .any(|a| a == &origin || a.starts_with(&format!("{origin}:")))
    {
        return Err(format!(
            "VAPID aud {audiences:?} is not this push service's origin"
        ));
    }
    let subject = claims.subject.ok_or("VAPID JWT without sub")?;
    if !(subject.starts_with("mailto:") || subject.starts_with("https:")) {
        return Err(format!(
            "VAPID sub {subject:?} is not a mailto: or https: URL"
        ));
    }
    // RFC 8291 / RFC 8188.
    if header("content-encoding").as_deref() != Some("aes128gcm") {
        return Err("Content-Encoding is not aes128gcm".into());
    }
    if header("ttl").is_none() {
        return Err("no TTL header".into());
    }
    let plain = web_push_native::decrypt(body.to_vec(), &secret, &Auth::clone_from_slice(&auth))
        .map_err(|e| format!("payload does not decrypt: {e}"))?;
    let message: PushMessage =
        serde_json::from_slice(&plain).map_err(|e| format!("payload is not a PushMessage: {e}"))?;
    if !(200..300).contains(&status) {
        return Ok(None);
    }
    Ok(Some(Received {
        device: id.to_owned(),
        message,
        urgency: header("urgency"),
        topic: header("topic"),
        at: moor_protocol::now_ms(),
    }))
}

/// The push service's host as the endpoints name it (RFC 8292 `aud` is its origin).
fn shared_host() -> &'static str {
    "127.0.0.1"
}
