//! An entry as the store holds it: its payload is the JSON text stored, not parsed. Replay sends
//! it as it is ([`RawEntry::write_json`]), so a viewer catching up costs no parse and no
//! re-encoding.
//!
//! The entries of a page read at once share one buffer (the text the database packed them
//! into, [`packed`](super::packed)): reading a page allocates once, not three times an entry.

use std::fmt;
use std::sync::Arc;

use bytes::BytesMut;
use moor_protocol::{Entry, Seq};
use serde_json::value::RawValue;
use serde_json::Value;

use super::StoreResult;

/// An entry as stored, its payload as JSON text.
#[derive(Clone)]
pub struct RawEntry {
    /// Its seq.
    pub seq: Seq,
    /// Its time (ms).
    pub ts: i64,
    /// Holds the kind, the author and the payload back to back, from `kind_at` to `end`; for
    /// an entry read with others, the whole page's text.
    text: Arc<str>,
    kind_at: usize,
    author_at: usize,
    payload_at: usize,
    end: usize,
}

impl RawEntry {
    /// An entry of its parts.
    pub fn new(seq: Seq, ts: i64, kind: &str, author: &str, payload: &str) -> Self {
        let text: Arc<str> = [kind, author, payload].concat().into();
        let author_at = kind.len();
        let payload_at = author_at + author.len();
        Self {
            seq,
            ts,
            kind_at: 0,
            author_at,
            payload_at,
            end: text.len(),
            text,
        }
    }

    /// The entry whose kind, author and payload stand in `text` from `at`, of the given byte
    /// lengths; `None` unless each is whole characters within `text`.
    pub(crate) fn within(
        seq: Seq,
        ts: i64,
        text: &Arc<str>,
        at: usize,
        [kind, author, payload]: [usize; 3],
    ) -> Option<Self> {
        let author_at = at.checked_add(kind)?;
        let payload_at = author_at.checked_add(author)?;
        let end = payload_at.checked_add(payload)?;
        for bound in [at, author_at, payload_at, end] {
            if !text.is_char_boundary(bound) {
                return None;
            }
        }
        (end <= text.len()).then(|| Self {
            seq,
            ts,
            text: Arc::clone(text),
            kind_at: at,
            author_at,
            payload_at,
            end,
        })
    }

    /// Where this entry's parts end in the text it was read from.
    pub(crate) fn end(&self) -> usize {
        self.end
    }

    /// Its kind.
    pub fn kind(&self) -> &str {
        &self.text[self.kind_at..self.author_at]
    }

    /// Who wrote it.
    pub fn author(&self) -> &str {
        &self.text[self.author_at..self.payload_at]
    }

    /// Its payload, JSON text as stored.
    pub fn payload(&self) -> &str {
        &self.text[self.payload_at..self.end]
    }

    /// The entry as JSON, the same text `serde_json::to_string(&Entry)` makes of it.
    pub fn json(&self) -> String {
        let mut out = String::with_capacity(self.payload().len() + 64);
        self.write_json(&mut out);
        out
    }

    /// Appends [`RawEntry::json`] to `out` (a `String` or a `BytesMut`), allocating nothing.
    pub fn write_json(&self, out: &mut impl fmt::Write) {
        let _ = out.write_char('{');
        self.write_fields(out);
    }

    /// [`RawEntry::write_json`] without the opening brace: the fields and the closing brace, for
    /// an object that holds the entry's fields among its own.
    pub fn write_fields(&self, out: &mut impl fmt::Write) {
        let mut number = itoa::Buffer::new();
        let _ = out.write_str("\"seq\":");
        let _ = out.write_str(number.format(self.seq.0));
        let _ = out.write_str(",\"ts\":");
        let _ = out.write_str(number.format(self.ts));
        let _ = out.write_str(",\"kind\":");
        write_json_str(out, self.kind());
        let _ = out.write_str(",\"author\":");
        write_json_str(out, self.author());
        let _ = out.write_str(",\"payload\":");
        let _ = out.write_str(self.payload());
        let _ = out.write_char('}');
    }

    /// Appends the entry's Server-Sent Event to `out`: `id:` the seq, `event:` the kind,
    /// `data:` [`RawEntry::json`], and the blank line that ends it.
    pub fn write_sse(&self, out: &mut BytesMut) {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(itoa::Buffer::new().format(self.seq.0).as_bytes());
        out.extend_from_slice(b"\nevent: ");
        out.extend_from_slice(self.kind().as_bytes());
        out.extend_from_slice(b"\ndata: ");
        self.write_json(out);
        out.extend_from_slice(b"\n\n");
    }

    /// The length of [`RawEntry::write_sse`]'s event, without writing it.
    pub fn sse_len(&self) -> usize {
        fn digits(n: u64) -> usize {
            n.checked_ilog10().map_or(1, |d| d as usize + 1)
        }
        let ts = digits(self.ts.unsigned_abs()) + usize::from(self.ts < 0);
        let seq = digits(self.seq.0);
        let json = r#"{"seq":,"ts":,"kind":,"author":,"payload":}"#.len()
            + seq
            + ts
            + json_str_len(self.kind())
            + json_str_len(self.author())
            + self.payload().len();
        "id: \nevent: \ndata: \n\n".len() + seq + self.kind().len() + json
    }

    /// The entry with its payload parsed.
    pub fn parse(&self) -> StoreResult<Entry> {
        Ok(Entry {
            seq: self.seq,
            ts: self.ts,
            kind: self.kind().to_owned(),
            author: self.author().to_owned(),
            payload: anyhow::Context::context(
                serde_json::from_str(self.payload()),
                "stored payload is not json",
            )?,
        })
    }
}

impl PartialEq for RawEntry {
    fn eq(&self, other: &Self) -> bool {
        (
            self.seq,
            self.ts,
            self.kind(),
            self.author(),
            self.payload(),
        ) == (
            other.seq,
            other.ts,
            other.kind(),
            other.author(),
            other.payload(),
        )
    }
}

impl fmt::Debug for RawEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawEntry")
            .field("seq", &self.seq)
            .field("ts", &self.ts)
            .field("kind", &self.kind())
            .field("author", &self.author())
            .field("payload", &self.payload())
            .finish()
    }
}

/// A payload as the JSON text to store: encoded once, where its entry is made, or kept as the
/// bridge sent it. It never holds a line break (which would end an SSE `data:` line): a sent text
/// with one between its tokens is stored compacted.
#[derive(Clone)]
pub struct Payload(Box<RawValue>);

impl Payload {
    /// The text a bridge sent, kept as it is unless it holds a line break.
    pub fn sent(raw: &RawValue) -> Self {
        match memchr::memchr2(b'\n', b'\r', raw.get().as_bytes()).is_some() {
            false => Self(raw.to_owned()),
            true => match serde_json::from_str::<Value>(raw.get()) {
                Ok(v) => Self::from(v),
                // A frame's payload that no longer parses on its own (a number out of range):
                // the text is valid JSON all the same, so keep it, on one line.
                Err(_) => Self(raw.to_owned()).one_line(),
            },
        }
    }

    /// Its JSON text.
    pub fn text(&self) -> &str {
        self.0.get()
    }

    /// Parsed.
    pub fn value(&self) -> serde_json::Result<Value> {
        serde_json::from_str(self.text())
    }

    fn one_line(self) -> Self {
        let text = self.text().replace(['\n', '\r'], " ");
        RawValue::from_string(text).map_or(self, Self)
    }
}

impl From<Value> for Payload {
    fn from(value: Value) -> Self {
        // Encoding a `Value` cannot fail: its map keys are strings.
        Self(serde_json::value::to_raw_value(&value).unwrap_or_else(|_| RawValue::NULL.to_owned()))
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.text() == other.text()
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

/// Whether `s` is written as a JSON string as it is, between quotes.
fn plain(s: &str) -> bool {
    !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20)
}

/// The length of `s` as [`write_json_str`] writes it.
fn json_str_len(s: &str) -> usize {
    match plain(s) {
        true => s.len() + 2,
        false => serde_json::to_string(s).map_or(0, |j| j.len()),
    }
}

/// Appends `s` as a JSON string, escaped as serde_json escapes it (`"`, `\\` and the control
/// characters; nothing else), without allocating when nothing needs escaping.
pub(crate) fn write_json_str(out: &mut impl fmt::Write, s: &str) {
    let _ = match plain(s) {
        true => out
            .write_char('"')
            .and_then(|()| out.write_str(s))
            .and_then(|()| out.write_char('"')),
        false => out.write_str(&serde_json::to_string(s).unwrap_or_default()),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(text: &str) -> Payload {
        Payload::sent(&serde_json::from_str::<Box<RawValue>>(text).unwrap())
    }

    #[test]
    fn a_sent_payload_is_kept_as_sent_and_never_holds_a_line_break() {
        // As sent: key order, spacing and escapes are the bridge's.
        let kept = r#"{"text": "a\nb", "stream":"stdout" , "n":1.50}"#;
        assert_eq!(sent(kept).text(), kept);
        // A line break between tokens would end an SSE `data:` line: compacted.
        let broken = sent("{\n  \"text\": \"x\",\r\n  \"n\": [1,\n2]\n}");
        let value = serde_json::json!({"text": "x", "n": [1, 2]});
        assert_eq!(broken.value().unwrap(), value);
        assert_eq!(broken.text(), serde_json::to_string(&value).unwrap());
        // Valid JSON that no longer parses alone (a number beyond f64) stays, on one line.
        let wide = sent("[1e999,\n2]");
        assert!(!wide.text().contains(['\n', '\r']), "{wide:?}");
        assert!(serde_json::from_str::<Box<RawValue>>(wide.text()).is_ok());
        // A made payload is its compact encoding.
        let value = serde_json::json!({"b": [true, null], "a": "é"});
        let made = Payload::from(value.clone());
        assert_eq!(made.text(), serde_json::to_string(&value).unwrap());
    }

    #[test]
    fn an_events_length_is_known_before_it_is_written() {
        let entries = [
            RawEntry::new(Seq(1), 0, "agent.output", "bridge", "{}"),
            RawEntry::new(Seq(u64::MAX), i64::MIN, "k\"ind\n", "a\\b", r#"{"t":"é"}"#),
            RawEntry::new(Seq(10), -1, "", "", "null"),
            RawEntry::new(
                Seq(99_999),
                1_733_000_000_000,
                "input.text",
                "user:x",
                "[1,2]",
            ),
        ];
        for e in entries {
            let mut out = BytesMut::new();
            e.write_sse(&mut out);
            assert_eq!(e.sse_len(), out.len(), "{e:?}");
        }
    }
}
