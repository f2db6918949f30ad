//! Retention end to end, on a real `moord` with real bridges: the policy (`--retention-days`)
//! deletes an ended session on its timer while a live one is never touched and its viewers
//! replay it whole; an owner deletes an ended session; a deleted session answers 410 saying
//! when and why (404 by name, which is free again), and the deletion survives a restart.

use std::time::Duration;

use moor_e2e::http::RawResponse;
use moor_e2e::{eventually, ServerOpts, TestBridge, TestServer, WAIT};
use moor_protocol::SessionId;
use reqwest::{Method, StatusCode};

const FINISH: Duration = Duration::from_secs(60);

async fn get(server: &TestServer, path: &str) -> RawResponse {
    server.api().authed(Method::GET, path, None).await
}

/// Waits until `GET /sessions/{id}` answers 410; the answer.
async fn wait_gone(server: &TestServer, id: SessionId) -> RawResponse {
    let path = format!("/api/v1/sessions/{id}");
    eventually(FINISH, &format!("session {id} to be deleted"), || async {
        get(server, &path).await.status == StatusCode::GONE
    })
    .await;
    get(server, &path).await
}

fn assert_gone_message(r: &RawResponse, name: &str, why: &str) {
    assert_eq!(r.status, StatusCode::GONE, "{:?}", r.body);
    assert_eq!(r.error_code(), Some("gone"), "{:?}", r.body);
    let message = r.body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("session {name:?} was deleted on "))
            && message.contains(why)
            && message.contains("its history is no longer kept"),
        "{message}"
    );
}

#[tokio::test]
async fn the_policy_deletes_an_ended_session_and_never_a_live_one() {
    // arrange: ended sessions are kept 0.00002 days (1.7 s); batches every 100 ms, 50 entries
    let server = TestServer::start(
        ServerOpts::new()
            .flag("--retention-days", "0.00002")
            .flag("--retention-interval-ms", 100)
            .flag("--retention-batch-entries", 50),
    )
    .await;
    let mut done = TestBridge::start(&server.url(), server.token(), "done", &["count", "300"]);
    done.wait_success(FINISH).await;
    let ended = server.api().wait_ended("done", WAIT).await;
    let live = TestBridge::start(&server.url(), server.token(), "live", &["echo"]);
    let info = server.api().wait_session("live", WAIT).await;
    let input = server.api().post_input(info.id, "in-1", "hello").await;
    let mut tail = moor_e2e::LogTail::new(server.api(), info.id);
    tail.wait_agent_lines(1, WAIT).await;

    // act: the policy's timer deletes the ended session, batch by batch
    let gone = wait_gone(&server, ended.id).await;

    // assert: 410 with when and why, for every way of reading it; 404 by its (free) name
    assert_gone_message(&gone, "done", "the server keeps ended sessions for");
    for path in [
        format!("/api/v1/sessions/{}/entries", ended.id),
        format!("/api/v1/sessions/{}/export", ended.id),
        format!("/api/v1/sessions/{}/events", ended.id),
    ] {
        assert_eq!(get(&server, &path).await.status, StatusCode::GONE, "{path}");
    }
    assert_eq!(
        get(&server, "/api/v1/sessions/done").await.status,
        StatusCode::NOT_FOUND
    );
    assert!(!server
        .api()
        .sessions()
        .await
        .iter()
        .any(|s| s.id == ended.id));
    // ... the live session is whole, a viewer replays all of it, and it still runs
    let log = server.api().entries_all(info.id).await;
    assert!(log.iter().any(|e| e.seq == input.seq), "{log:?}");
    let head = log.last().map_or(0, |e| e.seq.0);
    assert_eq!(server.replayed(info.id, head).await, log);
    server.api().post_input(info.id, "in-2", "again").await;
    tail.wait_agent_lines(2, WAIT).await;
    // ... and its owner may not delete it while it runs
    let refused = server.api().delete_session(info.id).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{:?}", refused.body);
    assert!(
        refused.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("has not ended")),
        "{:?}",
        refused.body
    );
    live.terminate();
}

#[tokio::test]
async fn an_owner_deletes_an_ended_session_and_it_stays_deleted_across_a_restart() {
    // arrange: no age policy; two ended sessions
    let mut server =
        TestServer::start(ServerOpts::new().flag("--retention-interval-ms", 100)).await;
    for name in ["deleted", "kept"] {
        let mut bridge = TestBridge::start(&server.url(), server.token(), name, &["count", "120"]);
        bridge.wait_success(FINISH).await;
    }
    let deleted = server.api().wait_ended("deleted", WAIT).await;
    let kept = server.api().wait_ended("kept", WAIT).await;
    let kept_log = server.api().entries_all(kept.id).await;
    let path = format!("/api/v1/sessions/{}", deleted.id);

    // act
    let answer = server.api().delete_session(deleted.id).await;

    // assert: gone at once, with who deleted it
    assert_eq!(answer.status, StatusCode::NO_CONTENT, "{:?}", answer.body);
    assert_gone_message(&get(&server, &path).await, "deleted", "deleted by admin");
    let again = server.api().delete_session(deleted.id).await;
    assert_eq!(again.status, StatusCode::GONE, "{:?}", again.body);

    // act: restart
    server.restart().await;

    // assert: still deleted; the other session replays exactly as before
    assert_gone_message(&get(&server, &path).await, "deleted", "deleted by admin");
    let head = kept_log.last().map_or(0, |e| e.seq.0);
    assert_eq!(server.replayed(kept.id, head).await, kept_log);
    assert_eq!(server.api().entries_all(kept.id).await, kept_log);
}
