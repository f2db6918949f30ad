//! Fitting one entry to a size. `moor` spools no entry over [`kinds::ENTRY_MAX_BYTES`], and
//! sends none over the server's frame limit: an agent's output has no size of its own (Claude
//! Code's Write tool call carries the whole file), and an entry the server refuses would be
//! sent again and again, holding back everything after it.
//!
//! An entry over the size keeps its kind and shape: its longest strings are cut short, each
//! ending with a note of how many bytes were cut, so what arrives says it is not whole. Terminal
//! output is cut as bytes, the note a line of output. An entry that cutting strings cannot bring
//! under the size (a payload of a million tiny values) becomes an `agent.error` that says so.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use moor_protocol::payload::{AgentError, AgentPtyOutput};
use moor_protocol::{kinds, EntryBody, NewEntry};
use serde_json::Value;

use super::SpoolError;

/// `body`, an entry's `NewEntry` JSON, cut to at most `max` bytes; `None` when it fits already.
pub(crate) fn fit_body(body: &[u8], max: usize) -> Result<Option<Vec<u8>>, SpoolError> {
    if body.len() <= max {
        return Ok(None);
    }
    let entry: NewEntry = serde_json::from_slice(body).map_err(encode_error)?;
    let payload_len = json_len(&entry.payload);
    // What the entry holds besides its payload, with room for a kind that becomes `agent.error`.
    let room = max.saturating_sub(body.len() - payload_len + kinds::AGENT_ERROR.len());
    let fitted = match entry.kind.as_str() {
        kinds::AGENT_PTY_OUTPUT => fit_output(&entry.payload, room, max),
        _ => fit_payload(&entry.payload, room, max),
    };
    let (kind, payload) = match fitted {
        Some(payload) => (entry.kind.clone(), payload),
        None => {
            let error = AgentError {
                message: format!(
                    "an {} entry of {} bytes was over the {max} byte limit and is left out",
                    entry.kind,
                    body.len()
                ),
                ..AgentError::default()
            };
            EntryBody::from(error).to_parts()
        }
    };
    tracing::warn!(
        kind = %entry.kind,
        bytes = body.len(),
        max,
        "an entry over the size limit is cut to fit"
    );
    let fitted = NewEntry {
        producer_seq: entry.producer_seq,
        ts: entry.ts,
        kind,
        payload,
    };
    serde_json::to_vec(&fitted).map(Some).map_err(encode_error)
}

/// `payload` with its strings cut to the longest length that makes it at most `room` bytes,
/// or `None` if cutting every string to nothing would not.
fn fit_payload(payload: &Value, room: usize, max: usize) -> Option<Value> {
    // The largest cap that fits, by bisection: a smaller cap never makes the payload larger.
    let (mut lo, mut hi) = (0, longest_string(payload));
    let mut best = None;
    while lo <= hi {
        let cap = lo + (hi - lo) / 2;
        let cut = cut_strings(payload, cap, max);
        if json_len(&cut) <= room {
            best = Some(cut);
            lo = cap + 1;
        } else if cap == 0 {
            break;
        } else {
            hi = cap - 1;
        }
    }
    best
}

/// Terminal output (`data`, base64) cut to what fits `room` bytes, the note its last line.
fn fit_output(payload: &Value, room: usize, max: usize) -> Option<Value> {
    let data = payload.get("data").and_then(Value::as_str)?;
    let mut bytes = STANDARD.decode(data).ok()?;
    let note =
        |cut: usize| format!("\r\n[{cut} bytes of output cut: over the {max} byte limit]\r\n");
    // `{"data":"…"}`: 11 bytes around the base64, which is 4 bytes for every 3 (the note with
    // the whole length as its count is at least as long as the one written).
    let keep = ((room.checked_sub(11)?) / 4 * 3).checked_sub(note(bytes.len()).len())?;
    let cut = bytes.len().saturating_sub(keep);
    bytes.truncate(keep);
    bytes.extend_from_slice(note(cut).as_bytes());
    let (_, payload) = EntryBody::from(AgentPtyOutput {
        data: STANDARD.encode(&bytes),
    })
    .to_parts();
    Some(payload)
}

/// `value` with every string longer than `cap` bytes cut to `cap` (at a character boundary),
/// followed by the note.
fn cut_strings(value: &Value, cap: usize, max: usize) -> Value {
    match value {
        Value::String(s) if s.len() > cap => {
            let mut end = cap;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            let cut = s.len() - end;
            Value::String(format!(
                "{} … [{cut} bytes cut: the entry was over {max} bytes]",
                &s[..end]
            ))
        }
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| cut_strings(v, cap, max)).collect())
        }
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), cut_strings(v, cap, max)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn longest_string(value: &Value) -> usize {
    match value {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(longest_string).max().unwrap_or(0),
        Value::Object(fields) => fields.values().map(longest_string).max().unwrap_or(0),
        _ => 0,
    }
}

fn json_len(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |v| v.len())
}

fn encode_error(e: serde_json::Error) -> SpoolError {
    SpoolError::Encode(format!("fitting an entry to the size limit: {e}"))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// Any JSON an agent might print: strings with quotes, escapes and non-ASCII text, numbers,
    /// nested arrays and objects.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            ".{0,40}".prop_map(Value::String),
            ("[a\"\\\n\u{1}é😀]", 0..20_000usize).prop_map(|(c, n)| Value::String(c.repeat(n))),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(".{0,8}", inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn whatever_an_agent_prints_is_sent_within_the_limit_as_the_same_entry_or_an_error(
            payload in any_json(),
            max in 1_024usize..64 * 1024,
        ) {
            let whole = body(kinds::AGENT_EVENT, payload);
            match fit_body(&whole, max).unwrap() {
                None => prop_assert!(whole.len() <= max),
                Some(fitted) => {
                    prop_assert!(whole.len() > max);
                    prop_assert!(fitted.len() <= max, "{} bytes over {max}", fitted.len());
                    let e = entry(&fitted);
                    prop_assert_eq!((e.producer_seq, e.ts), (7, 1));
                    prop_assert!(e.kind == kinds::AGENT_EVENT || e.kind == kinds::AGENT_ERROR);
                }
            }
        }
    }

    fn body(kind: &str, payload: Value) -> Vec<u8> {
        serde_json::to_vec(&NewEntry {
            producer_seq: 7,
            ts: 1,
            kind: kind.into(),
            payload,
        })
        .unwrap()
    }

    fn entry(body: &[u8]) -> NewEntry {
        serde_json::from_slice(body).unwrap()
    }

    #[test]
    fn an_entry_within_the_limit_is_left_alone() {
        let small = body(kinds::AGENT_TEXT, json!({"text": "hi"}));
        assert_eq!(fit_body(&small, small.len()).unwrap(), None);
    }

    #[test]
    fn a_tool_call_over_the_limit_keeps_its_shape_and_short_fields_and_says_what_was_cut() {
        // arrange: a Write call of 300 kB, with a non-ASCII character at the cut
        let content = "é".repeat(150_000);
        let big = body(
            kinds::AGENT_TOOL_USE,
            json!({"id": "t1", "name": "Write", "input": {"file_path": "/w/f", "content": content}}),
        );

        // act
        let fitted = fit_body(&big, 64 * 1024).unwrap().expect("cut");

        // assert
        assert!(fitted.len() <= 64 * 1024, "{}", fitted.len());
        assert!(
            fitted.len() > 60 * 1024,
            "cut no more than it must: {}",
            fitted.len()
        );
        let e = entry(&fitted);
        assert_eq!(
            (e.producer_seq, e.ts, e.kind.as_str()),
            (7, 1, kinds::AGENT_TOOL_USE)
        );
        assert_eq!(e.payload["id"], "t1");
        assert_eq!(e.payload["input"]["file_path"], "/w/f");
        let sent = e.payload["input"]["content"].as_str().unwrap();
        let (kept, note) = sent.split_once(" … [").unwrap();
        assert!(content.starts_with(kept));
        let cut = content.len() - kept.len();
        assert_eq!(
            note,
            format!("{cut} bytes cut: the entry was over 65536 bytes]")
        );
        assert_eq!(
            fit_body(&fitted, 64 * 1024).unwrap(),
            None,
            "cutting again changes nothing"
        );
    }

    #[test]
    fn terminal_output_over_the_limit_is_cut_as_bytes_with_a_line_saying_so() {
        let raw: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
        let big = body(
            kinds::AGENT_PTY_OUTPUT,
            json!({"data": STANDARD.encode(&raw)}),
        );

        let fitted = fit_body(&big, 8 * 1024).unwrap().expect("cut");

        assert!(fitted.len() <= 8 * 1024);
        let e = entry(&fitted);
        let out = STANDARD
            .decode(e.payload["data"].as_str().unwrap())
            .unwrap();
        let at = out
            .windows(3)
            .rposition(|w| w == b"\r\n[")
            .expect("the note");
        assert!(raw.starts_with(&out[..at]));
        let cut = raw.len() - at;
        assert_eq!(
            String::from_utf8_lossy(&out[at..]),
            format!("\r\n[{cut} bytes of output cut: over the 8192 byte limit]\r\n")
        );
    }

    #[test]
    fn an_entry_no_cut_can_fit_becomes_an_error_that_says_so() {
        let many = body(kinds::AGENT_EVENT, json!({"items": vec![1; 50_000]}));

        let fitted = fit_body(&many, 4096).unwrap().expect("replaced");

        let e = entry(&fitted);
        assert_eq!(e.kind, kinds::AGENT_ERROR);
        assert_eq!(e.producer_seq, 7);
        let message = e.payload["message"].as_str().unwrap();
        assert!(message.contains("agent.event entry of"), "{message}");
        assert!(message.contains("over the 4096 byte limit"), "{message}");
    }
}
