//! Viewer cursors as SSE streams and viewer sockets read them (`Last-Event-ID`, else `?after=`):
//! any header and query give a cursor or a 400, never a panic; `Last-Event-ID` wins; a seq
//! written by the server (an SSE `id:`) reads back as itself, with or without blanks around it.
#![no_main]

use arbitrary::Arbitrary;
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use moor_fuzz::assert_client_error;
use moor_protocol::Seq;
use moor_server::session::cursor::{check_cursor, cursor};

#[derive(Debug, Arbitrary)]
struct Input {
    last_event_id: Option<Vec<u8>>,
    query: Option<String>,
    seq: u64,
    head: u64,
    blanks: (u8, u8),
}

fn headers(last_event_id: Option<&[u8]>) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Some(v) = last_event_id.and_then(|v| HeaderValue::from_bytes(v).ok()) {
        h.insert("last-event-id", v);
    }
    h
}

fuzz_target!(|input: Input| {
    let given = headers(input.last_event_id.as_deref());
    let parsed = cursor(&given, input.query.as_deref());
    match &parsed {
        Ok(at) => {
            // A cursor the log cannot honour is reset to the head, never replayed partly.
            let head = Seq(input.head);
            let reset = check_cursor(*at, head);
            assert_eq!(reset.is_some(), *at > head);
            if let Some(r) = reset {
                assert_eq!(r.head_seq, head);
            }
        }
        Err(_) => {}
    }
    if !given.is_empty() {
        // The header decides alone.
        let alone = cursor(&given, None);
        assert_eq!(format!("{parsed:?}"), format!("{alone:?}"));
    }
    if let Err(e) = parsed {
        assert_client_error(e);
    }

    let (before, after) = (
        " ".repeat(usize::from(input.blanks.0 % 4)),
        " ".repeat(usize::from(input.blanks.1 % 4)),
    );
    let id = format!("{before}{}{after}", input.seq);
    let from_header = HeaderValue::from_str(&id).expect("digits and blanks are a header value");
    let mut h = HeaderMap::new();
    h.insert("last-event-id", from_header);
    assert_eq!(
        cursor(&h, input.query.as_deref()).ok(),
        Some(Seq(input.seq))
    );
    let query = format!("after={}", input.seq);
    assert_eq!(
        cursor(&HeaderMap::new(), Some(&query)).ok(),
        Some(Seq(input.seq))
    );
});
