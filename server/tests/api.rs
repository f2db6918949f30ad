//! The server over real sockets on 127.0.0.1: a hand-driven bridge WebSocket and the HTTP API.
//! The real `moor` against the real `moord` is covered in `moor-e2e`; these tests pin down the
//! server's side of the protocol frame by frame.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use moor_protocol::api::{EntriesPage, InputAccepted, SessionInfo};
use moor_protocol::bridge::{
    AgentInfo, BridgeToServer, Hello, ReceiptStatus, ServerToBridge, Welcome,
};
use moor_protocol::{close, error::ErrorBody, kinds, Entry, ErrorCode, NewEntry, ProducerId, Seq};
use moor_server::ServerConfig;
use serde_json::json;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::sync::DropGuard;

mod support;

use support::{client, serve_on_loopback, DataDir, Serving};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;
const WAIT: Duration = Duration::from_secs(10);

struct TestServer {
    store: moor_server::store::Stores,
    addr: std::net::SocketAddr,
    token: String,
    http: reqwest::Client,
    _stop: DropGuard,
    _dir: DataDir,
}

impl TestServer {
    async fn spawn(tweak: impl FnOnce(&mut ServerConfig)) -> Self {
        let dir = DataDir::new("moor-api");
        let server = support::build(&dir, "test-token", |c| {
            c.heartbeat_interval = Duration::from_millis(100);
            c.idle_timeout = Duration::from_secs(5);
            tweak(c);
        })
        .await;
        let store = server.store();
        let Serving { addr, shutdown, .. } = serve_on_loopback(server).await;
        Self {
            store,
            addr,
            token: "test-token".into(),
            http: reqwest::Client::new(),
            _stop: shutdown.drop_guard(),
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `GET path` with the admin token, whatever the answer.
    async fn get_response(&self, path: &str) -> reqwest::Response {
        self.http
            .get(self.url(path))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        let resp = self.get_response(path).await;
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        resp.json().await.unwrap()
    }

    async fn entries(&self, session: &str) -> Vec<Entry> {
        let page: EntriesPage = self
            .get(&format!("/api/v1/sessions/{session}/entries?limit=1000"))
            .await;
        page.entries
    }

    /// `POST …/inputs` with the admin token, whatever the answer.
    async fn post_input(&self, session: &str, body: serde_json::Value) -> reqwest::Response {
        self.http
            .post(self.url(&format!("/api/v1/sessions/{session}/inputs")))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn input(&self, session: &str, id: &str, text: &str) -> InputAccepted {
        let body = json!({"client_msg_id": id, "kind": "input.text", "payload": {"text": text}});
        let resp = self.post_input(session, body).await;
        assert!(resp.status().is_success(), "{}", resp.status());
        resp.json().await.unwrap()
    }

    /// A bridge WebSocket with the admin token, before its hello.
    async fn bridge_socket(&self) -> Ws {
        client::bridge_socket(self.addr, &self.token).await
    }

    async fn bridge(
        &self,
        session: &str,
        producer: ProducerId,
        last_applied: u64,
    ) -> (Ws, Welcome) {
        let mut ws = self.bridge_socket().await;
        let hello = Hello {
            producer,
            last_applied_input: Seq(last_applied),
            ..client::hello(session)
        };
        send(&mut ws, &BridgeToServer::Hello(hello)).await;
        match recv(&mut ws).await {
            ServerToBridge::Welcome(w) => (ws, w),
            other => panic!("expected welcome, got {other:?}"),
        }
    }
}

async fn send(ws: &mut Ws, frame: &BridgeToServer) {
    ws.send(Message::Text(serde_json::to_string(frame).unwrap().into()))
        .await
        .unwrap();
}

/// The next protocol frame, skipping heartbeats.
async fn recv(ws: &mut Ws) -> ServerToBridge {
    loop {
        let msg = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("frame in time")
            .expect("open")
            .unwrap();
        if let Message::Text(t) = msg {
            let frame: ServerToBridge = serde_json::from_str(&t).unwrap();
            if frame != ServerToBridge::Heartbeat {
                return frame;
            }
        }
    }
}

/// Reads until the server closes, returning the close code.
async fn close_code(ws: &mut Ws) -> u16 {
    loop {
        match tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("close in time")
        {
            Some(Ok(Message::Close(Some(f)))) => return u16::from(f.code),
            Some(Ok(Message::Close(None))) | None => return 1005,
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("socket error instead of close: {e}"),
        }
    }
}

/// Sends lines `from..=to` as one batch.
async fn send_lines(ws: &mut Ws, from: u64, to: u64) {
    send(
        ws,
        &BridgeToServer::Entries {
            entries: lines(from, to),
        },
    )
    .await;
}

/// Sends lines `from..=to` as one batch and checks that the server acks them all.
async fn send_acked(ws: &mut Ws, from: u64, to: u64) {
    send_lines(ws, from, to).await;
    assert_eq!(recv(ws).await, ServerToBridge::Ack { producer_seq: to });
}

fn lines(from: u64, to: u64) -> Vec<NewEntry> {
    (from..=to)
        .map(|i| NewEntry {
            producer_seq: i,
            ts: 1,
            kind: kinds::AGENT_OUTPUT.into(),
            payload: json!({"text": format!("line-{i}")}),
        })
        .collect()
}

fn texts(entries: &[Entry]) -> Vec<String> {
    entries
        .iter()
        .filter(|e| e.kind == kinds::AGENT_OUTPUT)
        .map(|e| e.payload["text"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn batches_are_acked_after_commit_and_replays_are_dropped() {
    // arrange
    let server = TestServer::spawn(|_| {}).await;
    let producer = ProducerId::new();
    let (mut ws, welcome) = server.bridge("s1", producer, 0).await;
    assert_eq!(welcome.producer_mark, 0);
    // act
    send_acked(&mut ws, 1, 5).await;
    drop(ws);
    let (mut ws, welcome) = server.bridge("s1", producer, 0).await;
    assert_eq!(welcome.producer_mark, 5);
    send_acked(&mut ws, 3, 8).await;
    // assert
    let entries = server.entries("s1").await;
    assert_eq!(
        texts(&entries),
        (1..=8).map(|i| format!("line-{i}")).collect::<Vec<_>>()
    );
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_gap_in_producer_seqs_is_refused_and_nothing_of_it_is_stored() {
    let server = TestServer::spawn(|_| {}).await;
    let (mut ws, _) = server.bridge("gap", ProducerId::new(), 0).await;
    send_acked(&mut ws, 1, 2).await;
    let before = server.entries("gap").await;
    send_lines(&mut ws, 4, 6).await;
    assert!(matches!(
        recv(&mut ws).await,
        ServerToBridge::Error {
            code: moor_protocol::ErrorCode::ProducerGap,
            ..
        }
    ));
    assert_eq!(close_code(&mut ws).await, close::PRODUCER_GAP);
    let after = server.entries("gap").await;
    assert_eq!(texts(&after), texts(&before));
}

#[tokio::test]
async fn a_replay_with_different_content_is_refused_loudly() {
    let server = TestServer::spawn(|_| {}).await;
    let (mut ws, _) = server.bridge("mismatch", ProducerId::new(), 0).await;
    send_acked(&mut ws, 1, 3).await;
    let mut forged = lines(2, 2);
    forged[0].payload = json!({"text": "something else"});
    send(&mut ws, &BridgeToServer::Entries { entries: forged }).await;
    assert!(matches!(
        recv(&mut ws).await,
        ServerToBridge::Error {
            code: moor_protocol::ErrorCode::ContentMismatch,
            ..
        }
    ));
    assert_eq!(close_code(&mut ws).await, close::CONTENT_MISMATCH);
    assert_eq!(
        texts(&server.entries("mismatch").await),
        vec!["line-1", "line-2", "line-3"]
    );
}

#[tokio::test]
async fn a_different_input_under_a_stored_client_msg_id_is_a_conflict_that_shows_the_stored_one() {
    // arrange
    let server = TestServer::spawn(|_| {}).await;
    let (_ws, _) = server.bridge("conflict", ProducerId::new(), 0).await;
    let first = server.input("conflict", "m1", "rm -rf build").await;
    // act
    let resp = server
        .post_input(
            "conflict",
            json!({"client_msg_id": "m1", "kind": "input.text", "payload": {"text": "ls"}}),
        )
        .await;
    // assert
    assert_eq!(resp.status(), reqwest::StatusCode::CONFLICT);
    let body: ErrorBody = resp.json().await.unwrap();
    assert_eq!(body.code, ErrorCode::Conflict);
    let stored = body
        .stored
        .expect("the stored input comes with the conflict");
    assert_eq!(stored.seq, first.seq);
    assert_eq!(stored.payload, json!({"text": "rm -rf build"}));
    let same = server.input("conflict", "m1", "rm -rf build").await;
    assert_eq!((same.seq, same.duplicate), (first.seq, true));
    let texts: Vec<_> = server
        .entries("conflict")
        .await
        .into_iter()
        .filter(|e| e.kind == kinds::INPUT_TEXT)
        .collect();
    assert_eq!(texts.len(), 1, "the conflicting input was not stored");
}

#[tokio::test]
async fn a_malformed_payload_of_any_known_input_kind_is_refused_at_the_post() {
    // arrange
    let server = TestServer::spawn(|_| {}).await;
    let (_ws, _) = server.bridge("malformed", ProducerId::new(), 0).await;
    let malformed = [
        (kinds::INPUT_TEXT, json!({"txt": "hi"})),
        (kinds::INPUT_KEYS, json!({"text": 42})),
        (kinds::INPUT_RESIZE, json!({"cols": "wide", "rows": 24})),
        (kinds::INPUT_PERMISSION, json!({"request_id": "r1"})),
        (kinds::INPUT_INTERRUPT, json!("now")),
    ];
    for (i, (kind, payload)) in malformed.into_iter().enumerate() {
        // act
        let resp = server
            .post_input(
                "malformed",
                json!({"client_msg_id": format!("bad-{i}"), "kind": kind, "payload": payload}),
            )
            .await;
        // assert
        assert_eq!(resp.status(), reqwest::StatusCode::BAD_REQUEST, "{kind}");
        let body: ErrorBody = resp.json().await.unwrap();
        assert!(body.message.contains(kind), "{kind}: {}", body.message);
    }
    let resp = server
        .post_input(
            "malformed",
            json!({"client_msg_id": "new-kind", "kind": "input.gesture", "payload": {"any": 1}}),
        )
        .await;
    assert!(
        resp.status().is_success(),
        "an input kind this server does not know is kept for a newer bridge: {}",
        resp.status()
    );
    let kinds: Vec<_> = server
        .entries("malformed")
        .await
        .into_iter()
        .filter(|e| e.kind.starts_with("input."))
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, vec!["input.gesture"]);
}

#[tokio::test]
async fn inputs_queued_while_offline_arrive_in_the_welcome_and_receipts_are_logged() {
    let server = TestServer::spawn(|_| {}).await;
    let producer = ProducerId::new();
    let (ws, _) = server.bridge("inputs", producer, 0).await;
    drop(ws);
    let first = server.input("inputs", "m1", "hello").await;
    let again = server.input("inputs", "m1", "hello").await;
    assert_eq!(first.seq, again.seq);
    assert!(again.duplicate && !first.duplicate);

    let (mut ws, welcome) = server.bridge("inputs", producer, 0).await;
    assert_eq!(
        welcome
            .pending_inputs
            .iter()
            .map(|e| e.seq)
            .collect::<Vec<_>>(),
        vec![first.seq]
    );
    // Delivered, applied, and the applied receipt again (a retry).
    for status in [
        ReceiptStatus::Delivered,
        ReceiptStatus::Applied,
        ReceiptStatus::Applied,
    ] {
        let input_seq = first.seq;
        send(&mut ws, &BridgeToServer::Receipt { input_seq, status }).await;
    }
    // A live input reaches the connected bridge.
    let second = server.input("inputs", "m2", "again").await;
    match recv(&mut ws).await {
        ServerToBridge::Input { entry } => assert_eq!(entry.seq, second.seq),
        other => panic!("expected input, got {other:?}"),
    }
    drop(ws);
    // Reconnecting having applied `second` settles it without a live receipt.
    let (_ws, welcome) = server.bridge("inputs", producer, second.seq.0).await;
    assert!(welcome.pending_inputs.is_empty());

    let entries = server.entries("inputs").await;
    let receipts = |kind: &str| {
        entries
            .iter()
            .filter(|e| e.kind == kind)
            .map(|e| e.payload["input_seq"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(receipts(kinds::INPUT_DELIVERED), vec![first.seq.0]);
    assert_eq!(
        receipts(kinds::INPUT_APPLIED),
        vec![first.seq.0, second.seq.0]
    );
    assert_eq!(
        entries
            .iter()
            .filter(|e| e.kind == kinds::INPUT_TEXT)
            .count(),
        2
    );
}

#[tokio::test]
async fn a_newer_bridge_supersedes_the_older_one() {
    let server = TestServer::spawn(|_| {}).await;
    let (mut old, _) = server.bridge("twice", ProducerId::new(), 0).await;
    let (_new, _) = server.bridge("twice", ProducerId::new(), 0).await;
    assert_eq!(close_code(&mut old).await, close::SUPERSEDED);
    let info: SessionInfo = server.get("/api/v1/sessions/twice").await;
    assert!(info.bridge.online);
}

#[tokio::test]
async fn a_later_connection_of_the_same_bridge_supersedes_the_older_one_and_the_log_says_which() {
    // arrange: a bridge's connection, still live
    let server = TestServer::spawn(|_| {}).await;
    let producer = ProducerId::new();
    let (mut old, _) = server.bridge("again", producer, 0).await;

    // act: the same bridge (producer) connects again, as after a link it gave up on
    let (_new, _) = server.bridge("again", producer, 0).await;

    // assert: the older one is told, and the log records, that this bridge took over (4013,
    // on which it reconnects if it still uses that one), not another bridge (4003)
    assert_eq!(close_code(&mut old).await, close::SUPERSEDED_BY_SAME_BRIDGE);
    let codes: Vec<_> = server
        .entries("again")
        .await
        .iter()
        .filter(|e| e.kind == kinds::BRIDGE_DISCONNECTED)
        .map(|e| e.payload["close_code"].as_u64())
        .collect();
    assert_eq!(
        codes,
        [Some(u64::from(close::SUPERSEDED_BY_SAME_BRIDGE))],
        "the log's close code for the superseded connection"
    );
}

#[tokio::test]
async fn the_bridge_is_told_to_move_before_the_lifetime_cap() {
    let server = TestServer::spawn(|c| {
        c.bridge_max_lifetime = Duration::from_millis(600);
        c.move_notice = Duration::from_millis(300);
    })
    .await;
    let (mut ws, welcome) = server.bridge("cap", ProducerId::new(), 0).await;
    assert_eq!(welcome.max_lifetime_ms, 600);
    assert!(matches!(
        recv(&mut ws).await,
        ServerToBridge::Move {
            close_in_ms: 300,
            ..
        }
    ));
    assert_eq!(close_code(&mut ws).await, close::LIFETIME);
}

#[tokio::test]
async fn a_silent_bridge_is_dropped_by_the_watchdog() {
    let server = TestServer::spawn(|c| c.idle_timeout = Duration::from_millis(300)).await;
    let (mut ws, _) = server.bridge("quiet", ProducerId::new(), 0).await;
    // Reading only (never sending) keeps this side silent.
    assert_eq!(close_code(&mut ws).await, close::HEARTBEAT_TIMEOUT);
    let entries = server.entries("quiet").await;
    let last = entries
        .iter()
        .rev()
        .find(|e| e.kind == kinds::BRIDGE_DISCONNECTED)
        .expect("disconnect recorded");
    assert_eq!(last.payload["close_code"], json!(close::HEARTBEAT_TIMEOUT));
}

#[tokio::test]
async fn ending_the_session_closes_the_link_and_refuses_later_bridges() {
    let server = TestServer::spawn(|_| {}).await;
    let producer = ProducerId::new();
    let (mut ws, _) = server.bridge("end", producer, 0).await;
    send(&mut ws, &BridgeToServer::End).await;
    assert_eq!(close_code(&mut ws).await, close::SESSION_ENDED);
    let mut ws = server.bridge_socket().await;
    let hello = Hello {
        producer,
        ..client::hello("end")
    };
    send(&mut ws, &BridgeToServer::Hello(hello)).await;
    assert_eq!(close_code(&mut ws).await, close::SESSION_ENDED);
    let info: SessionInfo = server.get("/api/v1/sessions/end").await;
    assert_eq!(info.status, moor_protocol::api::SessionStatus::Ended);
}

#[tokio::test]
async fn protocol_version_mismatch_is_refused() {
    let server = TestServer::spawn(|_| {}).await;
    let mut ws = server.bridge_socket().await;
    ws.send(Message::Text(
        json!({"type": "hello", "version": 999, "session": "v", "producer": ProducerId::new(), "last_applied_input": 0, "agent": AgentInfo::default()})
            .to_string()
            .into(),
    ))
    .await
    .unwrap();
    assert_eq!(close_code(&mut ws).await, close::VERSION_MISMATCH);
    let _ = CloseCode::Normal;
}

#[tokio::test]
async fn paging_walks_the_log_both_ways() {
    let server = TestServer::spawn(|_| {}).await;
    let (mut ws, _) = server.bridge("paging", ProducerId::new(), 0).await;
    send_acked(&mut ws, 1, 25).await;
    let head: SessionInfo = server.get("/api/v1/sessions/paging").await;
    let mut after = 0;
    let mut seen = Vec::new();
    loop {
        let page: EntriesPage = server
            .get(&format!(
                "/api/v1/sessions/paging/entries?after={after}&limit=7"
            ))
            .await;
        seen.extend(page.entries.iter().map(|e| e.seq.0));
        after = page.entries.last().map(|e| e.seq.0).unwrap_or(after);
        if !page.has_more {
            break;
        }
    }
    assert_eq!(seen, (1..=head.head_seq.0).collect::<Vec<_>>());
    let page: EntriesPage = server
        .get(&format!(
            "/api/v1/sessions/paging/entries?before={}&limit=5",
            head.head_seq.0
        ))
        .await;
    assert_eq!(
        page.entries.iter().map(|e| e.seq.0).collect::<Vec<_>>(),
        (head.head_seq.0 - 5..head.head_seq.0).collect::<Vec<_>>()
    );
    assert!(page.has_more);
}

fn agent_entries(from: u64, items: Vec<(&str, serde_json::Value)>) -> Vec<NewEntry> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, (kind, payload))| NewEntry {
            producer_seq: from + i as u64,
            ts: 1,
            kind: kind.into(),
            payload,
        })
        .collect()
}

#[tokio::test]
async fn a_link_lost_mid_write_is_recorded_and_the_brief_and_transcript_say_what_was_in_flight() {
    // arrange: a prompt, some streamed text, a Write that never returns
    let server = TestServer::spawn(|_| {}).await;
    let (mut ws, _) = server.bridge("claude", ProducerId::new(), 0).await;
    server.input("claude", "p1", "add a README").await;
    let entries = agent_entries(
        1,
        vec![
            (
                kinds::AGENT_SESSION,
                json!({"agent_session_id": "abc", "model": "m", "cwd": "/w"}),
            ),
            (
                kinds::AGENT_TEXT_DELTA,
                json!({"message_id": "m1", "index": 0, "text": "I will write "}),
            ),
            (
                kinds::AGENT_TOOL_USE,
                json!({"id": "t1", "name": "Write", "input": {"file_path": "/w/README.md", "content": "x"}, "path": "/w/README.md"}),
            ),
        ],
    );
    send(&mut ws, &BridgeToServer::Entries { entries }).await;
    loop {
        match recv(&mut ws).await {
            ServerToBridge::Ack { producer_seq: 3 } => break,
            ServerToBridge::Input { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let mut events = server
        .get_response("/api/v1/sessions/claude/events?after=0")
        .await;
    // act: the link dies without a close frame
    drop(ws);
    // assert: the interruption is in the log, for everyone (the viewer's stream shows it)
    wait_on_stream(&mut events, "session.interrupted", 1).await;
    let interrupted = server
        .entries("claude")
        .await
        .into_iter()
        .find(|e| e.kind == "session.interrupted");
    let interrupted = interrupted.expect("session.interrupted recorded");
    assert_eq!(interrupted.payload["cause"], "link");
    assert_eq!(
        interrupted.payload["open_tools"][0]["target"],
        "/w/README.md"
    );

    let info: SessionInfo = server.get("/api/v1/sessions/claude").await;
    let state = info.state.expect("state in the session");
    assert_eq!(state.phase, moor_protocol::state::Phase::Interrupted);
    assert_eq!(state.head, info.head_seq);

    let brief: moor_protocol::recovery::RecoveryBrief =
        server.get("/api/v1/sessions/claude/recovery").await;
    assert_eq!(brief.goal, vec!["add a README"]);
    assert_eq!(brief.uncertain[0].target.as_deref(), Some("/w/README.md"));
    assert_eq!(brief.partial_answer.as_deref(), Some("I will write "));
    assert_eq!(brief.agent_session_id.as_deref(), Some("abc"));
    let md = server
        .get_response("/api/v1/sessions/claude/recovery?format=markdown")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        md.contains("README.md") && md.contains("Resume prompt"),
        "{md}"
    );

    let t: serde_json::Value = server
        .get("/api/v1/sessions/claude/transcript?format=messages")
        .await;
    let messages: Vec<moor_protocol::transcript::Message> =
        serde_json::from_value(t["messages"].clone()).unwrap();
    moor_protocol::transcript::validate(&messages).unwrap();
    assert!(serde_json::to_string(&messages)
        .unwrap()
        .contains("interrupted:"));
}

#[tokio::test]
async fn long_sessions_are_snapshotted_and_state_matches_a_fold_of_the_whole_log() {
    let server = TestServer::spawn(|_| {}).await;
    let (mut ws, _) = server.bridge("long", ProducerId::new(), 0).await;
    let _ = server.get::<SessionInfo>("/api/v1/sessions/long").await; // start the follower
    for chunk in 0..5u64 {
        send_acked(&mut ws, chunk * 500 + 1, chunk * 500 + 500).await;
    }
    let info: SessionInfo = server.get("/api/v1/sessions/long").await;
    let state = info.state.unwrap();
    let mut all = Vec::new();
    let mut after = 0;
    loop {
        let page: EntriesPage = server
            .get(&format!(
                "/api/v1/sessions/long/entries?after={after}&limit=1000"
            ))
            .await;
        after = page.entries.last().map(|e| e.seq.0).unwrap_or(after);
        all.extend(page.entries);
        if !page.has_more {
            break;
        }
    }
    assert_eq!(
        state,
        moor_protocol::state::SessionState::from_entries(&all)
    );
    assert_eq!(state.counts.entries, all.len() as u64);
    // A snapshot exists, so a new follower starts from it instead of entry 1.
    let (at, json) = server
        .store
        .log
        .latest_snapshot(info.id)
        .await
        .unwrap()
        .expect("a snapshot");
    assert!(
        at.0 >= moor_server::session::states::SNAPSHOT_EVERY,
        "snapshot at {at}"
    );
    let snapshot: moor_protocol::state::SessionState = serde_json::from_str(&json).unwrap();
    assert_eq!(
        snapshot,
        moor_protocol::state::SessionState::from_entries(&all[..at.0 as usize])
    );
}

#[tokio::test]
async fn the_session_says_how_many_viewers_are_watching() {
    let server = TestServer::spawn(|_| {}).await;
    let (_ws, _) = server.bridge("watched", ProducerId::new(), 0).await;
    let info: SessionInfo = server.get("/api/v1/sessions/watched").await;
    assert_eq!(info.watchers, 0);
    let mut stream = server.get_response("/api/v1/sessions/watched/events").await;
    // The first chunk means the stream (and its viewer count) exists.
    stream.chunk().await.unwrap();
    let info: SessionInfo = server.get("/api/v1/sessions/watched").await;
    assert_eq!(info.watchers, 1);
    drop(stream);
    // The server notices the closed stream on its next write: keep-alives come every 15 s by
    // default, so wait on the count itself, bounded.
    let mut left = None;
    for _ in 0..100 {
        let info: SessionInfo = server.get("/api/v1/sessions/watched").await;
        if info.watchers == 0 {
            left = Some(());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(left.is_some(), "the closed stream is still counted");
}

/// Reads `stream` (an SSE response) until `needle` has appeared `times` times.
async fn wait_on_stream(stream: &mut reqwest::Response, needle: &str, times: usize) {
    let mut seen = String::new();
    tokio::time::timeout(WAIT, async {
        while seen.matches(needle).count() < times {
            let chunk = stream
                .chunk()
                .await
                .unwrap()
                .expect("the stream stays open");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{needle} ×{times} on the stream; saw {seen}"));
}

/// The seq of every entry of `kind` in `entries`.
fn seqs_of(entries: &[Entry], kind: &str) -> Vec<u64> {
    entries
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.seq.0)
        .collect()
}

/// Asserts that `log` records one interruption and that the entries `order` names come in
/// that order; each is `(kind, n)`, the `n`th entry of `kind` (from 0).
fn assert_one_interruption_in_order(log: &[Entry], order: &[(&str, usize)]) {
    assert_eq!(seqs_of(log, "session.interrupted").len(), 1, "{log:#?}");
    let seqs: Vec<u64> = order
        .iter()
        .map(|(kind, n)| seqs_of(log, kind)[*n])
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "{order:?} are at {seqs:?}"
    );
}

/// A Bash tool call still running, as the agent's first entries.
fn a_running_tool(from: u64) -> Vec<NewEntry> {
    agent_entries(
        from,
        vec![
            (
                kinds::AGENT_SESSION,
                json!({"agent_session_id": "abc", "model": "m", "cwd": "/w"}),
            ),
            (
                kinds::AGENT_TOOL_USE,
                json!({"id": "t1", "name": "Bash", "input": {"command": "make"}, "command": "make"}),
            ),
        ],
    )
}

/// A bridge on session `name` with a Bash call in flight (acked), and the session's event stream.
async fn busy_session(server: &TestServer, name: &str) -> (Ws, reqwest::Response) {
    let (mut ws, _) = server.bridge(name, ProducerId::new(), 0).await;
    let events = server
        .get_response(&format!("/api/v1/sessions/{name}/events?after=0"))
        .await;
    send(
        &mut ws,
        &BridgeToServer::Entries {
            entries: a_running_tool(1),
        },
    )
    .await;
    until_acked(&mut ws, 2).await;
    (ws, events)
}

/// A new bridge on session `name` whose agent starts at once (a restarted `moor`).
async fn restarted_bridge(server: &TestServer, name: &str) -> Ws {
    let (mut ws, _) = server.bridge(name, ProducerId::new(), 0).await;
    let start = agent_entries(
        1,
        vec![(
            kinds::AGENT_START,
            json!({"command": ["claude"], "adapter": "claude"}),
        )],
    );
    send(&mut ws, &BridgeToServer::Entries { entries: start }).await;
    until_acked(&mut ws, 1).await;
    ws
}

async fn until_acked(ws: &mut Ws, producer_seq: u64) {
    loop {
        match recv(ws).await {
            ServerToBridge::Ack { producer_seq: p } if p >= producer_seq => return,
            ServerToBridge::Ack { .. } | ServerToBridge::Input { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_agent_that_dies_mid_tool_has_its_interruption_logged_before_the_next_agent_start() {
    // arrange: a tool call in flight
    let server = TestServer::spawn(|_| {}).await;
    let (mut ws, _) = server.bridge("order", ProducerId::new(), 0).await;
    let mut events = server
        .get_response("/api/v1/sessions/order/events?after=0")
        .await;
    let mut entries = a_running_tool(1);
    // act: the agent dies and the bridge starts it again, all in one frame
    entries.extend(agent_entries(
        3,
        vec![
            (kinds::AGENT_EXIT, json!({"signal": 9})),
            (
                kinds::AGENT_START,
                json!({"command": ["claude"], "adapter": "claude"}),
            ),
        ],
    ));
    send(&mut ws, &BridgeToServer::Entries { entries }).await;
    until_acked(&mut ws, 4).await;
    wait_on_stream(&mut events, "session.interrupted", 1).await;

    // assert: exit, then the interruption it caused, then the new start, every time
    let log = server.entries("order").await;
    assert_one_interruption_in_order(
        &log,
        &[
            (kinds::AGENT_EXIT, 0),
            ("session.interrupted", 0),
            (kinds::AGENT_START, 0),
        ],
    );
}

#[tokio::test]
async fn a_bridge_back_at_once_after_a_lost_link_finds_the_interruption_before_its_agent_start() {
    // arrange: a tool call in flight when the link dies
    let server = TestServer::spawn(|_| {}).await;
    let (ws, mut events) = busy_session(&server, "again").await;
    drop(ws);
    wait_on_stream(&mut events, "bridge.disconnected", 1).await;

    // act: a new bridge (a restarted `moor`) starts its agent at once
    let _ws = restarted_bridge(&server, "again").await;

    // assert: the interruption, once, before the new connection and its agent
    let log = server.entries("again").await;
    assert_one_interruption_in_order(
        &log,
        &[
            ("session.interrupted", 0),
            ("bridge.connected", 1),
            (kinds::AGENT_START, 0),
        ],
    );
}

#[tokio::test]
async fn an_agent_started_over_a_dead_ones_work_records_the_interruption() {
    // arrange: a tool call in flight, and a link the server has not yet seen die
    let server = TestServer::spawn(|_| {}).await;
    let (ws, mut events) = busy_session(&server, "over").await;

    // act: a new bridge takes the session over (a planned move, not a loss) and its agent starts
    let _next = restarted_bridge(&server, "over").await;
    drop(ws);

    // assert: the old agent's work was cut off by the new one, and the log says so once
    wait_on_stream(&mut events, "session.interrupted", 1).await;
    let log = server.entries("over").await;
    let interrupted: Vec<&Entry> = log
        .iter()
        .filter(|e| e.kind == "session.interrupted")
        .collect();
    assert_eq!(interrupted.len(), 1, "{log:#?}");
    assert_eq!(interrupted[0].payload["cause"], "agent");
    assert_eq!(interrupted[0].payload["open_tools"][0]["id"], "t1");
}
