//! A viewer's frame on `GET /api/v1/sessions/{id}/ws`, decoded as `moord` decodes it: a frame
//! that decodes round-trips, and an input is validated (accepted or refused with a 400) without
//! a panic; an accepted `input.text` has a typed payload that round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use moor_fuzz::{assert_client_error, assert_round_trip, assert_typed_payload};
use moor_protocol::web::ViewerToServer;
use moor_server::session::input::validate;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(frame) = serde_json::from_str::<ViewerToServer>(text) else {
        return;
    };
    assert_round_trip(&frame);
    if let ViewerToServer::Input(req) = &frame {
        match validate(req) {
            Ok(()) => assert_typed_payload(&req.kind, &req.payload),
            Err(e) => assert_client_error(e),
        }
    }
});
