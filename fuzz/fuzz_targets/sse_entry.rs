//! The SSE encoding of a log entry (`GET /api/v1/sessions/{id}/events`): for any entry the log
//! can hold (a well-formed kind, any author, any JSON payload), a browser's event-stream parser
//! reads back exactly one event whose id is the seq, whose type is the kind and whose data is
//! the entry; so does a stream of several entries written in one chunk.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use moor_fuzz::{arbitrary_json, parse_event_stream, same_json};
use moor_protocol::{kinds, Entry, Seq};
use moor_server::hub::Frame;
use std::sync::Arc;

/// Characters a kind may hold (`kinds::is_valid`), which every writer of the log checks.
const KIND_CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789._-";

fn arbitrary_kind(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    let len = u.int_in_range(0..=63)?;
    let mut kind = String::from(char::from(b'a' + u.int_in_range(0..=25)?));
    for _ in 0..len {
        kind.push(char::from(*u.choose(KIND_CHARS)?));
    }
    assert!(kinds::is_valid(&kind), "{kind:?}");
    Ok(kind)
}

fn arbitrary_entry(u: &mut Unstructured<'_>) -> arbitrary::Result<Entry> {
    Ok(Entry {
        seq: Seq(u64::arbitrary(u)?),
        ts: i64::arbitrary(u)?,
        kind: arbitrary_kind(u)?,
        author: String::arbitrary(u)?,
        payload: arbitrary_json(u, 0)?,
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let mut entries = Vec::new();
    while entries.len() < 4 {
        match arbitrary_entry(&mut u) {
            Ok(e) => entries.push(e),
            Err(_) => break,
        }
    }
    let mut chunk = Vec::new();
    for entry in &entries {
        let frame = Frame::new(Arc::new(entry.clone()));
        let sse = frame.sse();
        chunk.extend_from_slice(sse);
        let text = std::str::from_utf8(sse).expect("an SSE event is UTF-8");
        let events = parse_event_stream(text);
        assert_eq!(events.len(), 1, "one event from {text:?}");
        check(&events[0], entry);
    }
    let text = std::str::from_utf8(&chunk).expect("a chunk of events is UTF-8");
    let events = parse_event_stream(text);
    assert_eq!(events.len(), entries.len());
    for (event, entry) in events.iter().zip(&entries) {
        check(event, entry);
    }
});

fn check(event: &moor_fuzz::SseEvent, entry: &Entry) {
    assert_eq!(event.id.as_deref(), Some(entry.seq.to_string().as_str()));
    assert_eq!(event.event, entry.kind);
    // The data is the entry's JSON, byte for byte, and reads back as the entry (floats as close
    // as serde_json's parser reads them).
    let json = serde_json::to_string(entry).expect("an entry encodes");
    assert_eq!(event.data, json);
    let back: Entry = serde_json::from_str(&event.data)
        .unwrap_or_else(|e| panic!("data {:?} is not an entry: {e}", event.data));
    assert_eq!(
        (back.seq, back.ts, &back.kind, &back.author),
        (entry.seq, entry.ts, &entry.kind, &entry.author)
    );
    assert!(same_json(&back.payload, &entry.payload), "{back:?}");
}
