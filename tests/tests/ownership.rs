//! Ownership and quotas through the real binaries: `moor` run by one account cannot take a
//! session another account's `moor` made, and `moor` over its account's quota stops at once,
//! saying which quota, instead of retrying.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use moor_e2e::{BridgeOpts, ServerOpts, TestServer, FINISH, WAIT};

const PASSWORD: &str = "correct horse battery";

/// Adds `name` and logs them in: their access token.
async fn user_token(server: &TestServer, name: &str) -> String {
    let api = server.api();
    api.add_user(name, PASSWORD).await;
    let pair = api.login(name, PASSWORD).await;
    pair["access_token"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moor_cannot_take_a_session_another_account_made_and_stops_saying_so() {
    // arrange: ann's moor made "anns" and finished
    let server = TestServer::start(ServerOpts::new()).await;
    let ann = user_token(&server, "ann").await;
    let mal = user_token(&server, "mal").await;
    BridgeOpts::new(&server.url(), &ann, "anns", &["count", "3"])
        .spawn()
        .wait_success(FINISH)
        .await;

    // act: mal runs moor with the same session name
    let mut attack = BridgeOpts::new(&server.url(), &mal, "anns", &["count", "3"]).spawn();
    let status = attack.wait_exit(WAIT).await;

    // assert: moor stops (no retrying), says why, and nothing of mal's is in ann's log
    assert!(!status.success());
    let stderr = attack.stderr();
    assert!(stderr.contains("not yours"), "{stderr}");
    let session = server.session("anns").await.expect("ann's session");
    let log = server.entries_all(session.id).await;
    let connections = log
        .iter()
        .filter(|e| e.kind == moor_protocol::kinds::BRIDGE_CONNECTED)
        .count();
    assert_eq!(connections, 1, "only ann's bridge ever attached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moor_over_its_accounts_session_quota_stops_at_once_naming_the_quota() {
    // arrange: one session per account; ann's first one exists
    let server = TestServer::start(ServerOpts::new().flag("--max-sessions-per-account", 1)).await;
    let ann = user_token(&server, "ann").await;
    BridgeOpts::new(&server.url(), &ann, "first", &["count", "3"])
        .spawn()
        .wait_success(FINISH)
        .await;

    // act: ann's moor starts a second session
    let mut second = BridgeOpts::new(&server.url(), &ann, "second", &["count", "3"]).spawn();
    let status = second.wait_exit(WAIT).await;

    // assert: a permanent refusal, in plain words, and no session stored
    assert!(!status.success());
    let stderr = second.stderr();
    assert!(stderr.contains("close 4012"), "{stderr}");
    assert!(stderr.contains("--max-sessions-per-account"), "{stderr}");
    assert!(server.session("second").await.is_none());
}
