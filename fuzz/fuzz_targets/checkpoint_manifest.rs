//! A checkpoint manifest as `PUT /api/v1/sessions/{id}/checkpoints/{checkpoint}` parses it: a
//! manifest that parses is stored as its encoding and must read back as itself (or every later
//! `GET` of it would fail); the blobs it names are sorted and unique and include the patch; its
//! summary round-trips, also as the payload of a `checkpoint.created` entry.
#![no_main]

use libfuzzer_sys::fuzz_target;
use moor_fuzz::{assert_round_trip, assert_typed_payload};
use moor_protocol::checkpoint::{CheckpointManifest, StoredCheckpoint, CHECKPOINT_CREATED};
use moor_protocol::SessionId;

fuzz_target!(|data: &[u8]| {
    let Ok(manifest) = serde_json::from_slice::<CheckpointManifest>(data) else {
        return;
    };
    assert_round_trip(&manifest);
    let blobs = manifest.blobs();
    assert!(
        blobs.windows(2).all(|w| w[0].sha256 < w[1].sha256),
        "blobs sorted and unique: {blobs:?}"
    );
    assert!(blobs.iter().any(|b| b.sha256 == manifest.patch.sha256));
    let summary = manifest.summary();
    assert_round_trip(&summary);
    let payload = serde_json::to_value(&summary).expect("a summary encodes");
    assert_typed_payload(CHECKPOINT_CREATED, &payload);
    assert_round_trip(&StoredCheckpoint {
        session: SessionId::default(),
        manifest,
    });
});
