//! Golden encodings in `tests/fixtures/`, captured from a real `moord`: each decodes into its
//! type and encodes back to the same JSON. The web client's generated types are checked against
//! the same files (`scripts/gen-ts` writes them into `web/tests/fixtures.gen.ts`, which `tsc`
//! checks against the generated types).

use moor_protocol::api::{EntriesPage, InputAccepted, SessionInfo};
use moor_protocol::error::ErrorBody;
use moor_protocol::recovery::RecoveryBrief;
use moor_protocol::web::Reset;
use moor_protocol::EntryBody;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

fn round_trips<T: DeserializeOwned + Serialize>(name: &str) {
    let path = format!("{}/tests/fixtures/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let json: Value = serde_json::from_str(&text).expect("fixture is JSON");
    let typed: T = serde_json::from_value(json.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        serde_json::to_value(&typed).expect("encodes"),
        json,
        "{name}"
    );
}

#[test]
fn golden_encodings_round_trip() {
    round_trips::<SessionInfo>("session_info");
    round_trips::<EntriesPage>("entries_page");
    round_trips::<InputAccepted>("input_accepted");
    round_trips::<RecoveryBrief>("recovery_brief");
    round_trips::<ErrorBody>("error_body");
    round_trips::<Reset>("reset");
}

/// Entries as moor's Claude Code adapter maps two recorded captures (written by
/// `moor-bridge`'s `mapped_captures_are_the_golden_typed_entries_both_sides_check`): each
/// decodes as its kind's payload type and encodes back unchanged, and each typed decode agrees
/// with decoding the same kind and payload as a stored entry would.
#[test]
fn golden_typed_entries_round_trip_and_decode_as_stored_entries() {
    round_trips::<Vec<EntryBody>>("entry_body_list");
    let path = format!(
        "{}/tests/fixtures/entry_body_list.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let list: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for item in list {
        let kind = item["kind"].as_str().unwrap();
        let body =
            EntryBody::decode(kind, &item["payload"]).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(body.kind(), kind);
        assert_eq!(body.payload(), item["payload"], "{kind}");
    }
}
