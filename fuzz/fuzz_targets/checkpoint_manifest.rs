//! A checkpoint manifest as `PUT /api/v1/sessions/{id}/checkpoints/{checkpoint}` parses and
//! checks it (`moor_protocol::manifest::parse_manifest`): a manifest it accepts names no path
//! twice, none absolute or with a `..` component; it is stored as its encoding and must read back
//! as itself (or every later `GET` of it would fail); the blobs it names are sorted and unique
//! and include the patch; its summary round-trips, also as the payload of a `checkpoint.created`
//! entry.
#![no_main]

use libfuzzer_sys::fuzz_target;
use moor_fuzz::{assert_round_trip, assert_typed_payload};
use moor_protocol::checkpoint::{StoredCheckpoint, CHECKPOINT_CREATED};
use moor_protocol::manifest::parse_manifest;
use moor_protocol::SessionId;

fuzz_target!(|data: &[u8]| {
    let Ok(manifest) = parse_manifest(data) else {
        return;
    };
    let mut paths = std::collections::BTreeSet::new();
    for f in &manifest.files {
        assert!(paths.insert(f.path.as_str()), "path listed twice: {}", f.path);
        assert!(!f.path.starts_with('/'), "absolute path: {}", f.path);
        assert!(f.path.split('/').all(|c| c != ".."), "path through ..: {}", f.path);
    }
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
