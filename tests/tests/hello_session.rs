//! A bridge whose session id can never be valid stops for good: `moor` run with a UUID spelled
//! otherwise than the canonical lower-case hyphenated form (of a session that exists) is closed
//! with `4011 INVALID_SESSION` and exits saying so, instead of retrying "store unavailable"
//! forever.

use moor_e2e::ws::RawBridge;
use moor_e2e::{ServerOpts, TestBridge, TestServer, WAIT};
use moor_protocol::ProducerId;

#[tokio::test]
async fn moor_stops_for_good_on_a_session_id_that_is_not_canonical() {
    // arrange: a session known by its canonical id
    let server = TestServer::start(ServerOpts::default()).await;
    let id = uuid::Uuid::new_v4();
    let mut first = RawBridge::connect(server.addr(), Some(server.token()))
        .await
        .expect("bridge socket");
    first.hello(&id.to_string(), ProducerId::new()).await;
    // act: moor names it in capitals
    let upper = id.to_string().to_uppercase();
    let mut bridge = TestBridge::start(&server.url(), server.token(), &upper, &["count", "3"]);
    // assert: it exits non-zero within the wait, naming the close code
    let status = bridge.wait_exit(WAIT).await;
    assert!(!status.success(), "moor must fail, got {status}");
    let err = bridge.stderr();
    assert!(err.contains("4011"), "stderr: {err}");
}
