//! A bridge's frame on `GET /api/v1/bridge`, decoded as `moord` decodes it (`Incoming::read`,
//! payloads kept as text): it reads every frame the frame type reads, with the same entries; a
//! frame that decodes round-trips, typed payloads round-trip, and the entries a bridge may write
//! fold into a session state (as the state follower does) without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use moor_fuzz::{assert_round_trip, assert_typed_payload};
use moor_protocol::bridge::{BridgeToServer, Incoming};
use moor_protocol::kinds::AUTHOR_BRIDGE;
use moor_protocol::state::SessionState;
use moor_protocol::{Entry, Seq};
use moor_server::ws::bridge::bridge_may_write;

fuzz_target!(|data: &[u8]| {
    // A WebSocket text message is UTF-8; the server decodes each one as a frame.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let incoming = Incoming::read(text);
    let Ok(frame) = serde_json::from_str::<BridgeToServer>(text) else {
        return;
    };
    match (&frame, incoming) {
        (BridgeToServer::Entries { entries }, Ok(Incoming::Entries(raw))) => {
            assert_eq!(entries.len(), raw.len());
            for (e, r) in entries.iter().zip(&raw) {
                assert_eq!((e.producer_seq, e.ts, &e.kind), (r.producer_seq, r.ts, &r.kind));
                let parsed: serde_json::Value = serde_json::from_str(r.payload.get()).unwrap();
                assert_eq!(parsed, e.payload);
            }
        }
        (_, Ok(Incoming::Other(other))) => assert_eq!(&other, &frame),
        (_, other) => panic!("the frame type read {frame:?}, moord {other:?}"),
    }
    assert_round_trip(&frame);
    if let BridgeToServer::Entries { entries } = &frame {
        let mut state = SessionState::default();
        let mut seq = Seq::ZERO;
        for e in entries {
            assert_typed_payload(&e.kind, &e.payload);
            if !bridge_may_write(&e.kind) {
                continue;
            }
            seq = seq.next();
            state.apply(&Entry {
                seq,
                ts: e.ts,
                kind: e.kind.clone(),
                author: AUTHOR_BRIDGE.into(),
                payload: e.payload.clone(),
            });
        }
        assert_round_trip(&state);
    }
});
