//! The self-hosted sinks: an ntfy topic (the notification as text, with ntfy's `Title`,
//! `Priority`, `Tags` and `Click` headers) and a generic webhook (the notification as JSON,
//! signed with HMAC-SHA256 over `"<timestamp>.<body>"` with the sink's secret).

use std::time::Duration;

use hmac::{Hmac, Mac};
use moor_protocol::notify::{DecisionLinks, NotifyClass, PushMessage, WebhookBody};
use moor_protocol::now_ms;
use sha2::Sha256;

use super::compose::private_text;
use super::webpush::{classify, Delivery};
use crate::store::notify::SinkRow;

/// Header carrying the webhook's timestamp (ms since the epoch).
pub(crate) const TIMESTAMP_HEADER: &str = "x-moor-timestamp";
/// Header carrying the webhook's signature, `sha256=<hex>`.
pub(crate) const SIGNATURE_HEADER: &str = "x-moor-signature";

/// Posts notifications to ntfy topics and webhooks.
#[derive(Debug, Clone)]
pub(crate) struct Sinks {
    http: reqwest::Client,
}

impl Sinks {
    pub(crate) fn new(timeout: Duration) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self { http })
    }

    /// Sends `message` to `sink`, with `decide`'s one-use links as buttons (ntfy) or fields
    /// (webhook). A sink answering 404 or 410 is not removed (its owner configured it): that
    /// is a failure for this notification.
    pub(crate) async fn send(
        &self,
        sink: &SinkRow,
        message: &PushMessage,
        decide: Option<&DecisionLinks>,
    ) -> Delivery {
        let request = match sink.kind.as_str() {
            "ntfy" => self.ntfy(sink, message, decide),
            "webhook" => match self.webhook(sink, message, decide) {
                Ok(r) => r,
                Err(reason) => return Delivery::Failed(reason),
            },
            other => return Delivery::Failed(format!("unknown sink kind {other}")),
        };
        match request.send().await {
            Ok(resp) => match classify(resp.status().as_u16()) {
                Delivery::Gone => Delivery::Failed(format!("sink answered {}", resp.status())),
                other => other,
            },
            Err(e) => Delivery::Retry(format!("sink unreachable: {e}")),
        }
    }

    fn ntfy(
        &self,
        sink: &SinkRow,
        m: &PushMessage,
        decide: Option<&DecisionLinks>,
    ) -> reqwest::RequestBuilder {
        let (priority, tags) = match m.class {
            NotifyClass::Permission => ("5", "warning"),
            NotifyClass::Crashed | NotifyClass::Stalled | NotifyClass::InputFailed => {
                ("4", "rotating_light")
            }
            _ => ("3", "robot"),
        };
        // ntfy's lowest priority shows the message without sound or vibration.
        let priority = if m.quiet { "1" } else { priority };
        let body = if m.close {
            "answered".to_owned()
        } else if m.private {
            private_text(m.class).to_owned()
        } else {
            m.body.clone()
        };
        let title = if m.private { "Mooring" } else { &m.title };
        let mut req = self
            .http
            .post(&sink.url)
            .header("Title", ascii_header(title))
            .header("Priority", priority)
            .header("Tags", tags)
            .header("Click", ascii_header(&m.url))
            .body(body);
        if let Some(links) = decide {
            // ntfy's `http` actions: the phone posts the link itself; `clear` dismisses the
            // notification once it has.
            req = req.header(
                "Actions",
                format!(
                    "http, Approve, {}, method=POST, clear=true; http, Deny, {}, method=POST, clear=true",
                    ascii_header(&links.approve),
                    ascii_header(&links.deny)
                ),
            );
        }
        if !sink.secret.is_empty() {
            req = req.bearer_auth(&sink.secret);
        }
        req
    }

    fn webhook(
        &self,
        sink: &SinkRow,
        m: &PushMessage,
        decide: Option<&DecisionLinks>,
    ) -> Result<reqwest::RequestBuilder, String> {
        let timestamp = now_ms();
        let body = serde_json::to_vec(&WebhookBody {
            kind: "moor.notification".to_owned(),
            timestamp,
            message: m.clone(),
            decide: decide.cloned(),
        })
        .map_err(|e| format!("encode: {e}"))?;
        let signature = sign(&sink.secret, timestamp, &body);
        Ok(self
            .http
            .post(&sink.url)
            .header("content-type", "application/json")
            .header(TIMESTAMP_HEADER, timestamp.to_string())
            .header(SIGNATURE_HEADER, signature)
            .body(body))
    }
}

/// `sha256=` and the hex HMAC-SHA256 of `"<timestamp>.<body>"` keyed with `secret`.
pub(crate) fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// ntfy reads header values as ASCII text: anything else is replaced.
fn ascii_header(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii() && !c.is_ascii_control() {
                c
            } else {
                '?'
            }
        })
        .collect()
}
