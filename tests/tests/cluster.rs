//! Several `moord` nodes on one Postgres database: any viewer on any node, inputs from any node,
//! the bridge failing over when its node dies, seqs contiguous with writers on every node, and
//! a node that lost its `LISTEN` connection catching up from the store.
//!
//! Each test gets a fresh database (dropped afterwards); without a Postgres server the tests
//! skip loudly (see `moor_e2e::pg`).

use std::collections::HashMap;
use std::time::Duration;

use moor_e2e::assert::{agent_texts, assert_counted_prefix, input_seq, of_kind, summary};
use moor_e2e::http::RawBody;
use moor_e2e::pg::TestDb;
use moor_e2e::{
    assert_contiguous, eventually, BridgeOpts, FaultProxy, RawBridge, SseClient, SseOpts,
    TestBridge, TestServer, FINISH, WAIT,
};
use moor_protocol::{close, kinds, Entry, ProducerId, SessionId};
use reqwest::Method;
use serde_json::json;

fn token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

fn session_name() -> String {
    format!("s-{}", uuid::Uuid::new_v4().simple())
}

/// Nodes A and B on `db`, both accepting the returned admin token.
async fn two_nodes(db: &TestDb) -> (String, TestServer, TestServer) {
    let token = token();
    let a = TestServer::start(db.node_opts("a", &token)).await;
    let b = TestServer::start(db.node_opts("b", &token)).await;
    (token, a, b)
}

/// `moor` on `servers` running a test agent that prints `line-1..=lines`, one every
/// `interval_ms`, and echoes its first `inputs` inputs.
fn echoing_counter(
    servers: &str,
    token: &str,
    name: &str,
    lines: u64,
    interval_ms: u64,
    inputs: usize,
) -> TestBridge {
    let (lines, interval_ms, inputs) = (
        lines.to_string(),
        interval_ms.to_string(),
        inputs.to_string(),
    );
    let agent = [
        "count",
        &lines,
        "--interval-ms",
        &interval_ms,
        "--echo-inputs",
        &inputs,
    ];
    BridgeOpts::new(servers, token, name, &agent).spawn()
}

/// A hand-driven bridge connected to `node`.
async fn raw_bridge(node: &TestServer, token: &str) -> RawBridge {
    RawBridge::connect(node.addr(), Some(token))
        .await
        .unwrap_or_else(|e| panic!("bridge connects to {}: {e:?}", node.url()))
}

/// Every input was stored once, echoed by the agent once, and settled as applied once.
#[track_caller]
fn assert_inputs_applied_once(log: &[Entry], texts: &[String]) {
    let inputs = of_kind(log, kinds::INPUT_TEXT);
    assert_eq!(
        inputs.len(),
        texts.len(),
        "inputs stored once; {}",
        summary(log)
    );
    for input in &inputs {
        let applied = of_kind(log, kinds::INPUT_APPLIED)
            .into_iter()
            .filter(|r| input_seq(r) == Some(input.seq.0))
            .count();
        assert_eq!(
            applied,
            1,
            "input {} applied once; {}",
            input.seq,
            summary(log)
        );
    }
    assert!(
        of_kind(log, kinds::INPUT_UNCERTAIN).is_empty(),
        "no uncertain input"
    );
    let mut echoed: Vec<String> = agent_texts(log, "stdout")
        .into_iter()
        .filter_map(|t| t.strip_prefix("got: ").map(str::to_owned))
        .collect();
    echoed.sort();
    let mut want = texts.to_vec();
    want.sort();
    assert_eq!(echoed, want, "the agent got every input exactly once");
}

/// The session's head seq as `server` reports it.
async fn head(server: &TestServer, name: &str) -> u64 {
    server
        .session(name)
        .await
        .expect("session exists")
        .head_seq
        .0
}

/// The viewer ends with exactly `log`: every entry once, in order.
async fn assert_viewer_has(viewer: &SseClient, log: &[Entry], who: &str) {
    let head = log.last().map_or(0, |e| e.seq.0);
    viewer.wait_seq(head, WAIT).await;
    let got = viewer.snapshot().entries;
    assert_eq!(
        got.len(),
        log.len(),
        "{who}: one event per entry, no duplicates"
    );
    for (g, e) in got.iter().zip(log) {
        assert_eq!(g, e, "{who}: the same entries in the same order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_mid_stream_leaves_every_viewer_with_the_whole_log_once() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    // arrange: nodes A and B; the bridge knows both and starts on A; viewers on both
    const LINES: u64 = 1500;
    const INPUTS: u64 = 10;
    let (token, mut a, b) = two_nodes(&db).await;
    // What A's viewers connect through, as a load balancer would: it moves them when A dies.
    let balancer = FaultProxy::start(a.addr()).await;
    let name = session_name();
    let servers = format!("{},{}", a.url(), b.url());
    let mut bridge = echoing_counter(&servers, &token, &name, LINES, 4, INPUTS as usize);
    let id = b.api().wait_session(&name, WAIT).await.id;
    a.api().wait_bridge_online(&name, true, WAIT).await;
    let on_a = SseClient::connect(&balancer.url(), &token, id, SseOpts::default());
    let on_b = SseClient::connect(&b.url(), &token, id, SseOpts::default());
    let texts: Vec<String> = (1..=INPUTS).map(|i| format!("input {i}")).collect();

    // act: inputs posted on B reach the bridge on A; then A dies mid-stream
    for (i, text) in texts.iter().enumerate().take(INPUTS as usize / 2) {
        b.api().post_input(id, &format!("in-{i}"), text).await;
    }
    on_b.wait_for(WAIT, "output and the first echoes, relayed to B", |s| {
        let t = agent_texts(&s.entries, "stdout");
        t.len() >= 300 && t.iter().filter(|t| t.starts_with("got: ")).count() >= INPUTS as usize / 2
    })
    .await;
    a.kill().await;
    balancer.set_upstream(b.addr());
    for (i, text) in texts.iter().enumerate().skip(INPUTS as usize / 2) {
        b.api().post_input(id, &format!("in-{i}"), text).await;
    }
    bridge.wait_success(FINISH).await;
    b.api().wait_ended(&name, WAIT).await;

    // assert
    let log = b.entries_all(id).await;
    assert_contiguous(&log);
    let out = agent_texts(&log, "stdout");
    assert_eq!(
        assert_counted_prefix(&out, "line-"),
        LINES,
        "the whole output, once, in order"
    );
    assert_inputs_applied_once(&log, &texts);
    assert!(
        of_kind(&log, kinds::BRIDGE_CONNECTED).len() >= 2,
        "the bridge connected again (to B); {}",
        summary(&log)
    );
    assert_viewer_has(&on_b, &log, "viewer on B").await;
    assert_viewer_has(&on_a, &log, "viewer on A, moved to B").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_nodes_appending_at_once_keep_one_contiguous_log() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    // arrange: the bridge streams through A while inputs are posted on A and on B
    const LINES: u64 = 3000;
    const PER_NODE: usize = 60;
    let (token, a, b) = two_nodes(&db).await;
    let name = session_name();
    let mut bridge = echoing_counter(&a.url(), &token, &name, LINES, 1, 2 * PER_NODE);
    let id = a.api().wait_session(&name, WAIT).await.id;

    // act: each input goes to one node and is retried on the other, paced over the stream
    let post = |first: &TestServer, second: &TestServer, node: &'static str| {
        let (first, second) = (first.api(), second.api());
        async move {
            let mut pace = tokio::time::interval(std::time::Duration::from_millis(40));
            let mut seqs = Vec::new();
            for i in 0..PER_NODE {
                pace.tick().await;
                let (cid, text) = (format!("{node}-{i}"), format!("from {node} {i}"));
                let stored = first.post_input(id, &cid, &text).await;
                let retried = second.post_input(id, &cid, &text).await;
                assert!(
                    !stored.duplicate && retried.duplicate,
                    "{cid}: stored once, retry is a duplicate"
                );
                assert_eq!(
                    stored.seq, retried.seq,
                    "{cid}: the retry on the other node finds it"
                );
                seqs.push(stored.seq);
            }
            seqs
        }
    };
    let (from_a, from_b) = tokio::join!(post(&a, &b, "a"), post(&b, &a, "b"));
    bridge.wait_success(FINISH).await;
    b.api().wait_ended(&name, WAIT).await;

    // assert
    let log = b.entries_all(id).await;
    assert_contiguous(&log);
    assert_eq!(
        log,
        a.entries_all(id).await,
        "both nodes serve the same log"
    );
    let out = agent_texts(&log, "stdout");
    assert_eq!(assert_counted_prefix(&out, "line-"), LINES);
    let texts: Vec<String> = (0..PER_NODE)
        .flat_map(|i| [format!("from a {i}"), format!("from b {i}")])
        .collect();
    assert_inputs_applied_once(&log, &texts);
    let by_seq: HashMap<u64, &Entry> = log.iter().map(|e| (e.seq.0, e)).collect();
    for seq in from_a.iter().chain(&from_b) {
        assert_eq!(
            by_seq[&seq.0].kind,
            kinds::INPUT_TEXT,
            "the seq an input got holds it"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_lost_its_listen_connection_catches_its_viewers_up_from_the_store() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    // arrange: a hand-driven bridge on A, a viewer on B
    let (token, a, b) = two_nodes(&db).await;
    let admin = db.admin().await;
    let name = session_name();
    let mut bridge = raw_bridge(&a, &token).await;
    let id: SessionId = bridge.hello(&name, ProducerId::new()).await.session_id;
    let viewer = SseClient::connect(&b.url(), &token, id, SseOpts::default());
    let lines: Vec<String> = (1..=30).map(|i| format!("line-{i}")).collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    bridge.send_lines(1, &refs[..10]).await;
    bridge.wait_ack(10, WAIT).await;
    viewer.wait_seq(head(&a, &name).await, WAIT).await;

    // act 1: the listen connection is killed; it comes back and notices flow again
    let old = db.listen_pids(&admin, "b").await;
    assert_eq!(
        db.kill_listen(&admin, "b").await,
        1,
        "B has one listen connection"
    );
    eventually(WAIT, "B listening again", || async {
        let now = db.listen_pids(&admin, "b").await;
        now.len() == 1 && now != old
    })
    .await;
    bridge.send_lines(11, &refs[10..20]).await;
    bridge.wait_ack(20, WAIT).await;
    viewer.wait_seq(head(&a, &name).await, WAIT).await;

    // act 2: killed again, and kept from reconnecting while A commits; then let back in. No
    // notice will ever announce lines 21..30 to B: only B's catch-up by query can deliver them.
    db.allow_connections(&admin, false).await;
    assert_eq!(db.kill_listen(&admin, "b").await, 1);
    bridge.send_lines(21, &refs[20..30]).await;
    bridge.wait_ack(30, WAIT).await;
    let final_head = head(&a, &name).await;
    db.allow_connections(&admin, true).await;

    // assert
    viewer.wait_seq(final_head, WAIT).await;
    let log = a.entries_all(id).await;
    assert_eq!(log.last().map(|e| e.seq.0), Some(final_head));
    assert_viewer_has(&viewer, &log, "viewer on B").await;
    assert_eq!(agent_texts(&viewer.snapshot().entries, "stdout"), lines);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_connecting_to_another_node_supersedes_the_one_on_the_first() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    // arrange
    let (token, a, b) = two_nodes(&db).await;
    let name = session_name();
    let producer = ProducerId::new();
    let mut first = raw_bridge(&a, &token).await;
    first.hello(&name, producer).await;

    // act
    let mut second = raw_bridge(&b, &token).await;
    let welcome = second.hello(&name, producer).await;

    // assert: the bridge's own later connection took over (4013: the older one is not told
    // that another bridge has the session)
    let closed = first.expect_close(WAIT).await;
    assert_eq!(closed.code, close::SUPERSEDED_BY_SAME_BRIDGE, "{closed:?}");
    second
        .send_lines(welcome.producer_mark + 1, &["still here"])
        .await;
    second.wait_ack(welcome.producer_mark + 1, WAIT).await;
}

/// A user's live SSE stream and viewer socket on one node.
struct Streams {
    sse: reqwest::Response,
    ws: moor_e2e::ws::Ws,
}

impl Streams {
    async fn open(node: &TestServer, access: &str, session: SessionId) -> Self {
        let sse = reqwest::Client::new()
            .get(format!("{}/api/v1/sessions/{session}/events", node.url()))
            .bearer_auth(access)
            .send()
            .await
            .expect("SSE request");
        assert_eq!(
            sse.status(),
            reqwest::StatusCode::OK,
            "SSE on {}",
            node.url()
        );
        let ws = moor_e2e::ws::connect(
            &format!("ws://{}/api/v1/sessions/{session}/ws", node.addr()),
            Some(access),
        )
        .await
        .expect("viewer socket");
        Self { sse, ws }
    }

    /// Both end (the SSE body ends, the socket closes with `code`); `WAIT` is only the failure
    /// guard.
    async fn assert_closed(mut self, code: u16, what: &str) {
        let limit = WAIT;
        use futures_util::StreamExt;
        use tokio_tungstenite::tungstenite::Message;
        let sse = async { while let Ok(Some(_)) = self.sse.chunk().await {} };
        let ws = async {
            loop {
                match self.ws.next().await {
                    Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => return None,
                }
            }
        };
        let (sse, ws) = tokio::join!(
            tokio::time::timeout(limit, sse),
            tokio::time::timeout(limit, ws)
        );
        assert!(
            sse.is_ok(),
            "{what}: the SSE stream on B is still open after {limit:?}"
        );
        let ws =
            ws.unwrap_or_else(|_| panic!("{what}: the socket on B is still open after {limit:?}"));
        assert_eq!(ws, Some(code), "{what}: close code");
    }
}

/// `method /api/v1{path}` on `node`, with an optional bearer and JSON body: the status and the
/// answer. As every client does, a 503 (the node cannot reach its database right now) is
/// retried after its `Retry-After`, until [`WAIT`] has passed.
async fn call(
    node: &TestServer,
    method: reqwest::Method,
    path: &str,
    bearer: Option<&str>,
    body: Option<serde_json::Value>,
) -> (reqwest::StatusCode, serde_json::Value) {
    let give_up = tokio::time::Instant::now() + WAIT;
    loop {
        let r = node
            .api()
            .raw(
                method.clone(),
                &format!("/api/v1{path}"),
                bearer,
                body.clone().map(RawBody::Json),
            )
            .await;
        if r.status != reqwest::StatusCode::SERVICE_UNAVAILABLE
            || tokio::time::Instant::now() >= give_up
        {
            return (r.status, r.body);
        }
        let backoff = Duration::from_secs(r.retry_after.unwrap_or(1));
        tokio::time::sleep(backoff).await;
    }
}

/// `POST /api/v1{path}` on `node` (see [`call`]).
async fn post(
    node: &TestServer,
    path: &str,
    bearer: Option<&str>,
    body: serde_json::Value,
) -> (reqwest::StatusCode, serde_json::Value) {
    call(node, reqwest::Method::POST, path, bearer, Some(body)).await
}

/// Removes `user` from session `id`'s members, on `node`.
async fn remove_member(node: &TestServer, admin: &str, id: SessionId, user: &str) {
    let path = format!("/sessions/{id}/members/{user}");
    let (s, _) = call(node, reqwest::Method::DELETE, &path, Some(admin), None).await;
    assert_eq!(s, reqwest::StatusCode::NO_CONTENT, "remove member {user}");
}

/// Two nodes on one database, a session on A and users watching it as viewers.
struct Shared {
    a: TestServer,
    b: TestServer,
    /// The admin token both nodes accept.
    admin: String,
    /// The session's bridge, on A.
    bridge: RawBridge,
    id: SessionId,
    /// Each user's login (token pair) on A.
    login: HashMap<&'static str, serde_json::Value>,
}

/// Starts nodes A and B sharing their signing keys (deployed nodes share the data dir), attaches
/// a bridge on A, and gives each of `users` a viewer role on its session and a login.
async fn shared_session(db: &TestDb, users: &[&'static str]) -> Shared {
    shared_session_via(db, users, db.url()).await
}

/// [`shared_session`] with node B reaching the database at `b_url` (through a proxy, say).
async fn shared_session_via(db: &TestDb, users: &[&'static str], b_url: &str) -> Shared {
    let admin = token();
    let a = TestServer::start(db.node_opts("a", &admin)).await;
    let keys = a.data_file("jwt-keys.json");
    let b_opts = TestDb::node_opts_via(b_url, "b", &admin);
    let b = TestServer::start(b_opts.data_file("jwt-keys.json", keys)).await;
    let mut bridge = raw_bridge(&a, &admin).await;
    let id = bridge
        .hello(&session_name(), ProducerId::new())
        .await
        .session_id;
    let password = "correct horse battery";
    let mut login = HashMap::new();
    for &user in users {
        let (s, _) = post(
            &a,
            "/users",
            Some(&admin),
            json!({"name": user, "password": password}),
        )
        .await;
        assert_eq!(s, reqwest::StatusCode::CREATED);
        let (s, _) = call(
            &a,
            reqwest::Method::PUT,
            &format!("/sessions/{id}/members/{user}"),
            Some(&admin),
            Some(json!({"role": "viewer"})),
        )
        .await;
        assert_eq!(s, reqwest::StatusCode::NO_CONTENT);
        let (s, pair) = post(
            &a,
            "/auth/login",
            None,
            json!({"name": user, "password": password}),
        )
        .await;
        assert_eq!(s, reqwest::StatusCode::OK);
        login.insert(user, pair);
    }
    Shared {
        a,
        b,
        admin,
        bridge,
        id,
        login,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocations_on_one_node_close_live_streams_on_the_other() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    // arrange: a session on A shared with four viewers, each watching it on B
    let Shared {
        a,
        b,
        admin,
        bridge: _bridge,
        id,
        login,
    } = shared_session(&db, &["vic", "rey", "lou", "mem"]).await;
    let access = |user: &str| login[user]["access_token"].as_str().unwrap().to_owned();
    let refresh = |user: &str| json!({"refresh_token": login[user]["refresh_token"]});

    // act + assert: a user revoked on A
    let vic = Streams::open(&b, &access("vic"), id).await;
    let (s, _) = post(&a, "/users/vic/revoke", Some(&admin), json!({})).await;
    assert_eq!(s, reqwest::StatusCode::NO_CONTENT);
    vic.assert_closed(close::UNAUTHORIZED, "user revoked on A")
        .await;

    // a refresh token reused on A (its family is revoked)
    let rey = Streams::open(&b, &access("rey"), id).await;
    let (s, rotated) = post(&a, "/auth/refresh", None, refresh("rey")).await;
    assert_eq!(s, reqwest::StatusCode::OK, "the first use rotates");
    // Once its successor is used, the spent token's grace is over.
    let (s, _) = post(
        &a,
        "/auth/refresh",
        None,
        json!({"refresh_token": rotated["refresh_token"]}),
    )
    .await;
    assert_eq!(s, reqwest::StatusCode::OK, "the successor rotates");
    let (s, _) = post(&a, "/auth/refresh", None, refresh("rey")).await;
    assert_eq!(
        s,
        reqwest::StatusCode::UNAUTHORIZED,
        "the spent one is reuse"
    );
    rey.assert_closed(close::UNAUTHORIZED, "refresh reuse on A")
        .await;

    // a logout on A
    let lou = Streams::open(&b, &access("lou"), id).await;
    let (s, _) = post(&a, "/auth/logout", Some(&access("lou")), json!({})).await;
    assert_eq!(s, reqwest::StatusCode::NO_CONTENT);
    lou.assert_closed(close::UNAUTHORIZED, "logout on A").await;

    // a member removed on A
    let mem = Streams::open(&b, &access("mem"), id).await;
    remove_member(&a, &admin, id, "mem").await;
    mem.assert_closed(close::UNAUTHORIZED, "member removed on A")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_missed_revocation_notices_ends_those_streams_when_it_listens_again() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    // arrange: three viewers of a session on A, watching on B, which reaches the database
    // through a proxy (A does not)
    let (b_db, b_url) = db.proxied().await;
    let Shared {
        a,
        b,
        admin: admin_token,
        mut bridge,
        id,
        login,
    } = shared_session_via(&db, &["vic", "mem", "kept"], &b_url).await;
    let access = |user: &str| login[user]["access_token"].as_str().unwrap().to_owned();
    let vic = Streams::open(&b, &access("vic"), id).await;
    let mem = Streams::open(&b, &access("mem"), id).await;
    let mut kept = Streams::open(&b, &access("kept"), id).await;

    // act: B loses its listen connection and cannot open another (nor any new connection) while
    // A revokes vic and removes mem; no notice of either will ever reach B. B's pooled
    // connections stay open, and A's database stays open to A.
    b_db.refuse(true);
    assert_eq!(db.kill_listen(&db.admin().await, "b").await, 1);
    let (s, _) = post(&a, "/users/vic/revoke", Some(&admin_token), json!({})).await;
    assert_eq!(s, reqwest::StatusCode::NO_CONTENT);
    remove_member(&a, &admin_token, id, "mem").await;
    b_db.refuse(false);

    // assert: B checks what it holds against the store once it listens again
    vic.assert_closed(close::UNAUTHORIZED, "revoked while B was deaf")
        .await;
    mem.assert_closed(close::UNAUTHORIZED, "removed while B was deaf")
        .await;
    bridge.send_lines(1, &["after"]).await;
    bridge.wait_ack(1, WAIT).await;
    let got = tokio::time::timeout(WAIT, async {
        let mut all = String::new();
        while let Ok(Some(chunk)) = kept.sse.chunk().await {
            all.push_str(&String::from_utf8_lossy(&chunk));
            if all.contains("after") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(got, Ok(true), "a viewer nobody revoked keeps its stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_database_refuses_connections_answers_a_retryable_503_until_it_reopens() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    // arrange: a node that has served a request (so its pool holds connections)
    let admin_token = token();
    let a = TestServer::start(db.node_opts("a", &admin_token)).await;
    let list_sessions = || call(&a, Method::GET, "/sessions", Some(&admin_token), None);
    let (s, _) = list_sessions().await;
    assert_eq!(s, reqwest::StatusCode::OK);
    let admin = db.admin().await;

    // act: the database refuses new connections and the node's open ones are gone
    db.allow_connections(&admin, false).await;
    assert!(
        db.kill_pool(&admin, "a").await > 0,
        "the node had connections"
    );
    let during = a
        .api()
        .raw(Method::GET, "/api/v1/sessions", Some(&admin_token), None)
        .await;
    db.allow_connections(&admin, true).await;
    let (after, _) = list_sessions().await;

    // assert
    assert_eq!(
        during.status,
        reqwest::StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        during.body
    );
    assert_eq!(during.error_code(), Some("unavailable"));
    assert!(during.retry_after.is_some(), "a 503 says when to retry");
    assert_eq!(
        after,
        reqwest::StatusCode::OK,
        "served again once it reopens"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_with_its_bridge_has_the_lost_connection_recorded_once_by_the_other() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    // arrange: short leases; a bridge on A, inputs posted on B
    let token = token();
    let lease = |node| {
        db.node_opts(node, &token)
            .flag("--bridge-lease-ms", 3000)
            .flag("--bridge-lease-renew-ms", 500)
    };
    let mut a = TestServer::start(lease("a")).await;
    let b = TestServer::start(lease("b")).await;
    let name = session_name();
    let producer = ProducerId::new();
    let mut first = raw_bridge(&a, &token).await;
    first.hello(&name, producer).await;
    let id = b.api().wait_session(&name, WAIT).await.id;
    let live = b.api().post_input(id, "before", "to the bridge on A").await;
    assert!(!live.queued, "B sees A's lease: {live:?}");
    // B does not hold the bridge, but A's live lease says it is there: online on B too, in the
    // session and in the list.
    let on_b = b.api().session(&name).await.expect("the session on B");
    assert!(on_b.bridge.online, "B shows A's bridge: {:?}", on_b.bridge);
    let listed = b.api().sessions().await;
    assert!(
        listed.iter().any(|s| s.id == id && s.bridge.online),
        "B's list shows A's bridge online"
    );

    // act: A dies with the bridge's socket
    a.kill().await;
    let killed = std::time::Instant::now();

    // assert: B records the lost connection once its lease has run out
    let mut tail = moor_e2e::LogTail::new(b.api(), id);
    let lost = tail
        .wait_kind(kinds::BRIDGE_DISCONNECTED, live.seq.0, WAIT, |_| true)
        .await;
    eprintln!(
        "B recorded the lost bridge {:?} after A died",
        killed.elapsed()
    );
    let reason = lost.payload["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("node lost: node a"), "{reason}");
    let queued = b.api().post_input(id, "after", "waits for a bridge").await;
    assert!(queued.queued, "nobody holds the session: {queued:?}");

    // ... and the bridge reconnecting to B comes after it, with no second record
    drop(first);
    let mut second = raw_bridge(&b, &token).await;
    second.hello(&name, producer).await;
    b.api().wait_bridge_online(&name, true, WAIT).await;
    let log = b.entries_all(id).await;
    let disconnects = of_kind(&log, kinds::BRIDGE_DISCONNECTED);
    assert_eq!(disconnects.len(), 1, "{}", summary(&log));
    let connects = of_kind(&log, kinds::BRIDGE_CONNECTED);
    assert_eq!(connects.len(), 2, "{}", summary(&log));
    assert!(connects[1].seq > disconnects[0].seq, "{}", summary(&log));
}
