//! `SinkReceiver`: a local HTTP receiver on 127.0.0.1 playing an ntfy server and a webhook
//! endpoint for moord's self-hosted notification sinks. Every request to `/{path}` is recorded
//! with its headers and body. A path given a webhook secret checks each request's
//! `X-Moor-Signature` (HMAC-SHA256 of `"<X-Moor-Timestamp>.<body>"`) and that the timestamp is
//! within five minutes of now; a request that fails is answered 401 and recorded as a
//! rejection, which tests assert never happens. A path can be told to answer with another
//! status for its next requests (500: failing).

use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::record::{Received, Record, StandIn};

/// One request a sink received.
#[derive(Debug, Clone)]
pub struct Hit {
    /// The path it was posted to, without the leading `/`.
    pub path: String,
    /// Its headers, names lower-case.
    pub headers: HashMap<String, String>,
    /// Its body.
    pub body: Vec<u8>,
    /// The status it was answered with.
    pub status: u16,
}

impl Hit {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// What the sink receiver keeps of its paths and the requests to them.
#[derive(Debug, Default)]
pub struct SinkState {
    secrets: HashMap<String, String>,
    answers: HashMap<String, VecDeque<u16>>,
    hits: Vec<Hit>,
}

impl Received for SinkState {
    fn arrived(&self) -> &dyn Debug {
        &self.hits
    }
}

/// The running receiver; stops when dropped.
pub type SinkReceiver = StandIn<SinkState>;

impl SinkReceiver {
    /// Binds 127.0.0.1:0 and serves.
    pub async fn start() -> Self {
        Self::serve(
            "sink receiver",
            Router::new().route("/{*path}", post(receive)),
        )
        .await
    }

    /// The URL of `path` on this receiver.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/{path}", self.addr)
    }

    /// Check the signatures of requests to `path` with `secret` (a webhook's).
    pub fn expect_signed(&self, path: &str, secret: &str) {
        self.record
            .lock()
            .secrets
            .insert(path.to_owned(), secret.to_owned());
    }

    /// Answer the next requests to `path` with `statuses`, in order (then 200 again).
    pub fn answer_next(&self, path: &str, statuses: &[u16]) {
        self.record
            .lock()
            .answers
            .entry(path.to_owned())
            .or_default()
            .extend(statuses);
    }

    /// The requests to `path` so far.
    pub fn hits(&self, path: &str) -> Vec<Hit> {
        self.record
            .lock()
            .hits
            .iter()
            .filter(|h| h.path == path)
            .cloned()
            .collect()
    }

    /// Waits until `done` holds for the requests so far (checked on every request), or panics
    /// after `timeout` (a failure guard) with what arrived.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut(&[Hit]) -> bool,
    ) {
        self.record
            .wait_until(timeout, what, |inner| done(&inner.hits))
            .await;
    }
}

async fn receive(
    State(record): State<Record<SinkState>>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let headers: HashMap<String, String> = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let status = record.update(|inner| {
        let verdict = match inner.secrets.get(&path) {
            Some(secret) => verify(secret, &headers, &body),
            None => Ok(()),
        };
        let status = match verdict {
            Err(reason) => {
                inner.rejections.push(format!("{path}: {reason}"));
                401
            }
            Ok(()) => inner
                .answers
                .get_mut(&path)
                .and_then(VecDeque::pop_front)
                .unwrap_or(200),
        };
        inner.hits.push(Hit {
            path,
            headers,
            body: body.to_vec(),
            status,
        });
        status
    });
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Checks a webhook request as a receiver should: a fresh timestamp and its signature.
fn verify(secret: &str, headers: &HashMap<String, String>, body: &[u8]) -> Result<(), String> {
    let ts = headers
        .get("x-moor-timestamp")
        .ok_or("no X-Moor-Timestamp")?;
    let ts_ms: i64 = ts.parse().map_err(|_| "X-Moor-Timestamp is not a number")?;
    if (moor_protocol::now_ms() - ts_ms).abs() > 5 * 60 * 1000 {
        return Err(format!("stale timestamp {ts_ms}"));
    }
    let given = headers
        .get("x-moor-signature")
        .and_then(|s| s.strip_prefix("sha256="))
        .ok_or("no X-Moor-Signature sha256=")?;
    let given: Vec<u8> = (0..given.len())
        .step_by(2)
        .map(|i| {
            given
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<_>>()
        .ok_or("the signature is not hex")?;
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(ts.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(&given)
        .map_err(|_| "bad signature".to_owned())
}
