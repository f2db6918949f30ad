//! Bad input against `moord` directly: each is answered with a clear 4xx JSON error or a close
//! code, the stored log is unchanged, and a bystander session streaming meanwhile ends exact.

use std::time::Duration;

use moor_e2e::http::{RawBody, RawResponse};
use moor_e2e::ws::{Closed, RawBridge};
use moor_e2e::{
    assert_complete_session, lines, Api, ServerOpts, SseClient, SseOpts, TestBridge, TestServer,
    FINISH, WAIT,
};
use moor_protocol::{close, Entry, ProducerId, SessionId};
use reqwest::{Method, StatusCode};

const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// A server with a bystander bridge streaming, and a victim session holding three lines written
/// by a hand-driven bridge whose socket is returned still open.
struct Arena {
    server: TestServer,
    api: Api,
    bystander: TestBridge,
    victim: SessionId,
    producer: ProducerId,
    conn: Option<RawBridge>,
    before: Vec<Entry>,
}

impl Arena {
    async fn start(opts: ServerOpts) -> Self {
        let server = TestServer::start(opts).await;
        let api = server.api();
        let bystander = TestBridge::start(
            &server.url(),
            server.token(),
            "bystander",
            &["count", "300", "--interval-ms", "10"],
        );
        let producer = ProducerId::new();
        let mut conn = RawBridge::connect(server.addr(), Some(server.token()))
            .await
            .expect("bridge socket");
        let welcome = conn.hello("victim", producer).await;
        assert_eq!(welcome.producer_mark, 0, "a new producer starts at mark 0");
        conn.send_lines(1, &["v-1", "v-2", "v-3"]).await;
        conn.wait_ack(3, WAIT).await;
        let victim = welcome.session_id;
        let before = api.entries_all(victim).await;
        Self {
            server,
            api,
            bystander,
            victim,
            producer,
            conn: Some(conn),
            before,
        }
    }

    fn conn(&mut self) -> &mut RawBridge {
        self.conn.as_mut().expect("victim connection")
    }

    async fn expect_close(&mut self) -> Closed {
        self.conn
            .take()
            .expect("victim connection")
            .expect_close(CLOSE_WAIT)
            .await
    }

    /// The victim's log: what was there is untouched, and nothing but `bridge.*` bookkeeping
    /// was added.
    async fn assert_victim_unchanged(&self) {
        let now = self.api.entries_all(self.victim).await;
        assert!(now.len() >= self.before.len(), "victim entries vanished");
        assert_eq!(
            &now[..self.before.len()],
            &self.before[..],
            "victim entries changed"
        );
        let added: Vec<_> = now[self.before.len()..]
            .iter()
            .filter(|e| !e.kind.starts_with("bridge."))
            .map(|e| (e.seq.0, &e.kind))
            .collect();
        assert!(
            added.is_empty(),
            "bad input added entries to the victim: {added:?}"
        );
        let texts = moor_e2e::assert::agent_texts(&now, "stdout");
        assert_eq!(texts, ["v-1", "v-2", "v-3"]);
    }

    /// The server kept serving: the bystander's stream completes exactly.
    async fn assert_bystander_exact(&mut self) {
        self.api.healthz().await;
        self.bystander.wait_success(FINISH).await;
        let id = self.api.wait_ended("bystander", WAIT).await.id;
        assert_complete_session(&self.api.entries_all(id).await, &lines(300));
    }

    async fn finish(mut self) {
        self.assert_victim_unchanged().await;
        self.assert_bystander_exact().await;
        drop(self.server);
    }
}

#[track_caller]
fn assert_json_error(what: &str, r: &RawResponse, status: StatusCode, code: &str) {
    assert_eq!(r.status, status, "{what}: status (body {:?})", r.body);
    assert_eq!(
        r.error_code(),
        Some(code),
        "{what}: error code in {:?}",
        r.body
    );
    let message = r
        .body
        .get("message")
        .and_then(|m| m.as_str())
        .unwrap_or_default();
    assert!(
        !message.is_empty(),
        "{what}: a human message in {:?}",
        r.body
    );
    assert!(
        r.content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("application/json")),
        "{what}: JSON content type, got {:?}",
        r.content_type
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_frame_on_the_bridge_socket_is_closed_with_4000() {
    let closed = bad_frame_closes_with_4000("{\"type\": \"entries\", \"entries\": [").await;
    assert!(!closed.reason.is_empty(), "the close carries a reason");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_frame_type_on_the_bridge_socket_is_closed_with_4000() {
    bad_frame_closes_with_4000("{\"type\": \"launch_missiles\", \"count\": 3}").await;
}

/// Sends `frame` as the victim bridge's next text frame: the server closes that socket with
/// 4000 and the bystander is untouched (`Arena::finish`). Returns the close.
async fn bad_frame_closes_with_4000(frame: &str) -> Closed {
    // arrange
    let mut arena = Arena::start(ServerOpts::new()).await;

    // act
    arena.conn().send_text(frame.into()).await;

    // assert
    let closed = arena.expect_close().await;
    assert_eq!(closed.code, close::BAD_FRAME, "close code ({closed:?})");
    arena.finish().await;
    closed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_frame_other_than_hello_is_closed_with_4000() {
    // arrange
    let arena = Arena::start(ServerOpts::new()).await;
    let mut raw = RawBridge::connect(arena.server.addr(), Some(arena.server.token()))
        .await
        .expect("bridge socket");

    // act
    raw.send_lines(1, &["no hello first"]).await;

    // assert
    let closed = raw.expect_close(CLOSE_WAIT).await;
    assert_eq!(closed.code, close::BAD_FRAME, "close code ({closed:?})");
    arena.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frame_is_closed_with_1009_and_nothing_is_stored() {
    // arrange
    let mut arena = Arena::start(ServerOpts::new().flag("--max-frame-bytes", 4096)).await;

    // act
    let big = "x".repeat(16 * 1024);
    arena.conn().send_lines(4, &[big.as_str()]).await;

    // assert
    let closed = arena.expect_close().await;
    assert_eq!(
        closed.code,
        close::MESSAGE_TOO_BIG,
        "close code ({closed:?})"
    );
    arena.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_or_malformed_http_bodies_get_json_errors_and_store_nothing() {
    // arrange
    let arena = Arena::start(ServerOpts::new().flag("--max-body-bytes", 4096)).await;
    let inputs = format!("/api/v1/sessions/{}/inputs", arena.victim);

    // act
    let too_big = arena
        .api
        .post_input_raw(arena.victim, "big-1", &"x".repeat(16 * 1024))
        .await;
    let malformed = arena
        .api
        .authed(
            Method::POST,
            &inputs,
            Some(RawBody::Text("{\"client_msg_id\": ".into())),
        )
        .await;
    let missing_fields = arena
        .api
        .authed(
            Method::POST,
            &inputs,
            Some(RawBody::Json(serde_json::json!({"text": "hi"}))),
        )
        .await;
    let no_session = arena
        .api
        .post_input_raw(SessionId::new(), "m-1", "hi")
        .await;

    // assert
    assert_json_error(
        "oversized body",
        &too_big,
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
    );
    assert_json_error(
        "malformed body",
        &malformed,
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
    assert!(
        missing_fields.status == StatusCode::BAD_REQUEST
            || missing_fields.status == StatusCode::UNPROCESSABLE_ENTITY,
        "body without the required fields: {} {:?}",
        missing_fields.status,
        missing_fields.body
    );
    assert_eq!(
        missing_fields.error_code(),
        Some("bad_request"),
        "{:?}",
        missing_fields.body
    );
    assert_json_error(
        "unknown session",
        &no_session,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    arena.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_contiguous_producer_seq_is_closed_with_4005_and_nothing_is_stored() {
    // arrange: the server holds producer seqs 1..=3.
    let mut arena = Arena::start(ServerOpts::new()).await;

    // act: skip 4.
    arena.conn().send_lines(5, &["v-5"]).await;

    // assert
    let closed = arena.expect_close().await;
    assert_eq!(closed.code, close::PRODUCER_GAP, "close code ({closed:?})");
    arena.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_producer_seq_with_other_content_is_closed_with_4006_and_the_stored_entry_is_kept()
{
    // arrange: the server holds producer seqs 1..=3; reconnect as the same producer.
    let mut arena = Arena::start(ServerOpts::new()).await;
    drop(arena.conn.take());
    let mut raw = RawBridge::connect(arena.server.addr(), Some(arena.server.token()))
        .await
        .expect("bridge socket");
    let welcome = raw.hello("victim", arena.producer).await;
    assert_eq!(
        welcome.producer_mark, 3,
        "the server remembers the producer's mark"
    );

    // act: replay seq 2 with different text.
    raw.send_lines(2, &["tampered"]).await;

    // assert
    let closed = raw.expect_close(CLOSE_WAIT).await;
    assert_eq!(
        closed.code,
        close::CONTENT_MISMATCH,
        "close code ({closed:?})"
    );
    arena.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_wrong_token_gets_401_json() {
    // arrange
    let arena = Arena::start(ServerOpts::new()).await;
    let id = arena.victim;
    let paths = [
        (Method::GET, "/api/v1/sessions".to_owned()),
        (Method::GET, format!("/api/v1/sessions/{id}")),
        (
            Method::GET,
            format!("/api/v1/sessions/{id}/entries?after=0"),
        ),
        (Method::GET, format!("/api/v1/sessions/{id}/events")),
        (
            Method::GET,
            format!("/api/v1/sessions/{id}/events?access_token=wrong"),
        ),
        (Method::POST, format!("/api/v1/sessions/{id}/inputs")),
        (Method::POST, format!("/api/v1/sessions/{id}/bridge/close")),
    ];

    for token in [None, Some("wrong-token")] {
        for (method, path) in &paths {
            // act
            let body = (*method == Method::POST).then(|| {
                RawBody::Json(serde_json::json!({"client_msg_id": "x", "kind": "input.text", "payload": {"text": "x"}}))
            });
            let r = arena.api.raw(method.clone(), path, token, body).await;

            // assert
            assert_json_error(
                &format!("{method} {path} with token {token:?}"),
                &r,
                StatusCode::UNAUTHORIZED,
                "unauthorized",
            );
        }
        for ws_path in [
            "/api/v1/bridge".to_owned(),
            format!("/api/v1/sessions/{id}/ws"),
        ] {
            let url = format!("ws://{}{ws_path}", arena.server.addr());
            match moor_e2e::ws::connect(&url, token).await {
                Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                    assert_eq!(
                        resp.status().as_u16(),
                        401,
                        "{ws_path} with token {token:?}"
                    )
                }
                Err(e) => panic!("{ws_path} with token {token:?}: expected a 401, got {e}"),
                Ok(_) => panic!("{ws_path} with token {token:?}: the upgrade was accepted"),
            }
        }
    }
    let health = arena.api.raw(Method::GET, "/healthz", None, None).await;
    assert_eq!(health.status, StatusCode::OK, "/healthz needs no token");
    arena.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_numeric_cursor_gets_400_invalid_cursor() {
    // arrange
    let arena = Arena::start(ServerOpts::new()).await;
    let id = arena.victim;

    for path in [
        format!("/api/v1/sessions/{id}/entries?after=abc"),
        format!("/api/v1/sessions/{id}/entries?before=-1"),
        format!("/api/v1/sessions/{id}/events?after=abc"),
    ] {
        // act
        let r = arena.api.authed(Method::GET, &path, None).await;

        // assert
        assert_json_error(&path, &r, StatusCode::BAD_REQUEST, "invalid_cursor");
    }

    // act: a bad Last-Event-ID header.
    let viewer = SseClient::connect(
        &arena.server.url(),
        arena.server.token(),
        id,
        SseOpts {
            last_event_id: Some("abc".into()),
            ..SseOpts::default()
        },
    );

    // assert
    viewer
        .wait_for(WAIT, "the client to give up on a 400", |s| s.finished)
        .await;
    let state = viewer.snapshot();
    assert!(
        state
            .errors
            .iter()
            .any(|e| e.contains("400") && e.contains("invalid_cursor")),
        "Last-Event-ID: abc should get 400 invalid_cursor, got {:?}",
        state.errors
    );
    arena.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_ahead_of_head_gets_an_sse_reset_and_changes_nothing() {
    // arrange
    let arena = Arena::start(ServerOpts::new()).await;
    let head = arena.before.last().expect("victim log").seq.0;

    // act
    let viewer = SseClient::connect(
        &arena.server.url(),
        arena.server.token(),
        arena.victim,
        SseOpts {
            last_event_id: Some((head + 1000).to_string()),
            ..SseOpts::default()
        },
    );

    // assert
    viewer
        .wait_for(WAIT, "a reset event", |s| !s.resets.is_empty())
        .await;
    let state = viewer.snapshot();
    assert!(
        state.entries.is_empty(),
        "no entries for a cursor ahead of head"
    );
    assert!(
        state.resets[0].head_seq.0 >= head,
        "the reset names the head: {:?}",
        state.resets[0]
    );
    arena.finish().await;
}
