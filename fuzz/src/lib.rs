//! Shared oracles for the fuzz targets in `fuzz_targets/`: JSON round trips, the typed decoding
//! of entry payloads, arbitrary JSON values of bounded depth, and an event-stream parser that
//! follows the WHATWG rules a browser's `EventSource` applies.
//!
//! Calls `moor-protocol` and `moord`'s error type; each target calls the decoder or encoder of
//! `moord` it fuzzes.

use arbitrary::{Arbitrary, Unstructured};
use axum::response::IntoResponse;
use moor_protocol::{BodyError, EntryBody};
use moor_server::error::ApiError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Number, Value};

/// Encodes `value`, decodes the text, and asserts the result equals `value` (as JSON, see
/// [`same_json`]): a frame the server decoded means the same thing when it (or a peer) encodes it
/// again, and what it stores reads back as what it accepted.
pub fn assert_round_trip<T>(value: &T)
where
    T: Serialize + DeserializeOwned + std::fmt::Debug,
{
    let text = serde_json::to_string(value).expect("a decoded value encodes");
    let again: T =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text} does not decode again: {e}"));
    let (a, b) = (json(value), json(&again));
    assert!(same_json(&a, &b), "round trip through {text}: {again:?}");
}

/// Within 16 ULPs of the larger, or both as close as subnormal numbers get.
fn close(x: f64, y: f64) -> bool {
    let diff = (x - y).abs();
    x == y || diff <= 16.0 * f64::EPSILON * x.abs().max(y.abs()) || diff < f64::MIN_POSITIVE
}

fn json<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("a decoded value encodes")
}

/// JSON equality, except that floats need only be close: `serde_json`'s default float parser
/// (moord does not enable its `float_roundtrip` feature) is best-effort and may read the shortest
/// decimal of an `f64` back a few ULPs off (seen: below 1e-300).
pub fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => close(x, y),
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// Asserts that `e` answers a 4xx: malformed input is the client's error, never the server's.
pub fn assert_client_error(e: ApiError) {
    let shown = e.to_string();
    let status = e.into_response().status();
    assert!(status.is_client_error(), "{status} for {shown}");
}

/// For a payload of a kind `moor-protocol` models: decoding it never panics, and a body that
/// decodes encodes to a payload that decodes to the same body.
pub fn assert_typed_payload(kind: &str, payload: &Value) {
    match EntryBody::decode(kind, payload) {
        Ok(body) => {
            let (kind_again, payload_again) = body.to_parts();
            assert_eq!(kind_again, kind);
            let again = EntryBody::decode(&kind_again, &payload_again)
                .unwrap_or_else(|e| panic!("{kind} payload {payload_again} re-encoded: {e}"));
            assert!(
                same_json(&json(&again), &json(&body)),
                "{kind} payload {payload_again}: {again:?} != {body:?}"
            );
        }
        Err(BodyError::UnknownKind | BodyError::Malformed(_)) => {}
    }
}

/// Deepest nesting of an [`arbitrary_json`] value. Payloads reach the server inside a frame
/// that `serde_json` parses with its recursion limit of 128, so deeper ones are never stored.
pub const MAX_DEPTH: usize = 24;

/// An arbitrary JSON value, at most [`MAX_DEPTH`] deep.
pub fn arbitrary_json(u: &mut Unstructured<'_>, depth: usize) -> arbitrary::Result<Value> {
    let leaf_only = depth >= MAX_DEPTH;
    let pick = if leaf_only {
        u.int_in_range(0..=5)?
    } else {
        u.int_in_range(0..=7)?
    };
    Ok(match pick {
        0 => Value::Null,
        1 => Value::Bool(bool::arbitrary(u)?),
        2 => Value::Number(i64::arbitrary(u)?.into()),
        3 => Value::Number(u64::arbitrary(u)?.into()),
        4 => Number::from_f64(f64::arbitrary(u)?).map_or(Value::Null, Value::Number),
        5 => Value::String(String::arbitrary(u)?),
        6 => {
            let mut items = Vec::new();
            while items.len() < 16 && bool::arbitrary(u)? {
                items.push(arbitrary_json(u, depth + 1)?);
            }
            Value::Array(items)
        }
        _ => {
            let mut map = Map::new();
            while map.len() < 16 && bool::arbitrary(u)? {
                let key = String::arbitrary(u)?;
                map.insert(key, arbitrary_json(u, depth + 1)?);
            }
            Value::Object(map)
        }
    })
}

/// One event an event-stream parser dispatched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The last event id buffer when the event was dispatched (`None` if never set).
    pub id: Option<String>,
    /// The event type (`message` when no `event:` field named one).
    pub event: String,
    /// The data lines joined with `\n`.
    pub data: String,
}

/// Parses a whole event stream by the WHATWG rules: lines end at CR LF, LF or a lone CR; a
/// leading BOM is dropped; one space after the colon is dropped; an id containing NUL is
/// ignored; a blank line dispatches an event if any data was given; an unterminated last event
/// is discarded.
pub fn parse_event_stream(stream: &str) -> Vec<SseEvent> {
    let stream = stream.strip_prefix('\u{feff}').unwrap_or(stream);
    let mut events = Vec::new();
    let mut id: Option<String> = None;
    let mut event = String::new();
    let mut data = String::new();
    let mut rest = stream;
    while let Some(end) = rest.find(['\r', '\n']) {
        let line = &rest[..end];
        let skip = if rest[end..].starts_with("\r\n") {
            2
        } else {
            1
        };
        rest = &rest[end + skip..];
        if line.is_empty() {
            if !data.is_empty() {
                data.pop();
                events.push(SseEvent {
                    id: id.clone(),
                    event: if event.is_empty() {
                        "message".into()
                    } else {
                        event.clone()
                    },
                    data: std::mem::take(&mut data),
                });
            }
            data.clear();
            event.clear();
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => event = value.to_owned(),
            "data" => {
                data.push_str(value);
                data.push('\n');
            }
            "id" if !value.contains('\0') => id = Some(value.to_owned()),
            _ => {}
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parser_follows_the_event_stream_rules() {
        let events = parse_event_stream(
            "\u{feff}: comment\r\nid: 1\revent: a\ndata:x\ndata: y\n\ndata: z\n\nid: 2\ndata: lost",
        );
        assert_eq!(
            events,
            [
                SseEvent {
                    id: Some("1".into()),
                    event: "a".into(),
                    data: "x\ny".into()
                },
                SseEvent {
                    id: Some("1".into()),
                    event: "message".into(),
                    data: "z".into()
                },
            ]
        );
    }
}
