//! The memory budget under attack, against a real server over loopback sockets: each test is an
//! attack from the security review (an oversized `hello`, another user's sessions with huge
//! agent descriptions, readers that never read, a page of big entries), and proves it now costs
//! a bounded amount. Memory is the peak of the process's anonymous RSS, sampled from
//! `/proc/self/status` during the attack: run under nextest, one test per process.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use moor_protocol::api::{EntriesPage, SessionInfo};
use moor_protocol::bridge::{AgentInfo, BridgeToServer, Hello};
use moor_protocol::{close, kinds, now_ms, SessionId};
use moor_server::store::{Append, IdemKey, Role, Stores};
use moor_server::ServerConfig;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

mod support;

use support::client::{self, Client};
use support::{serve_on_loopback, Serving};

const WAIT: Duration = Duration::from_secs(20);
const ADMIN: &str = "memory-test-token";
const PASSWORD: &str = "correct horse battery";
const MIB: u64 = 1 << 20;

struct TestServer {
    addr: std::net::SocketAddr,
    store: Stores,
    http: reqwest::Client,
    serving: Serving,
    dir: tempfile::TempDir,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.serving.shutdown.cancel();
    }
}

impl TestServer {
    async fn spawn(tweak: impl FnOnce(&mut ServerConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server = support::build(dir.path(), ADMIN, tweak).await;
        let store = server.store();
        let serving = serve_on_loopback(server).await;
        Self {
            addr: serving.addr,
            store,
            http: reqwest::Client::new(),
            serving,
            dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}/api/v1{path}", self.addr)
    }

    async fn get(&self, path: &str, token: &str) -> reqwest::Response {
        self.http
            .get(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str, token: &str) -> T {
        let resp = self.get(path, token).await;
        assert_eq!(resp.status(), StatusCode::OK, "GET {path}");
        resp.json().await.unwrap()
    }

    /// A new user, logged in: its access token.
    async fn user(&self, name: &str) -> String {
        Client::new(self.addr, ADMIN).add_user(name, PASSWORD).await;
        Client::login(self.addr, name, PASSWORD).await.token
    }

    /// A session of `entries` agent outputs of `bytes` each, written straight to the store.
    async fn big_session(&self, name: &str, entries: usize, bytes: usize) -> SessionId {
        let log = &self.store.log;
        let id = log.open_session(name, None).await.unwrap().id;
        let filler = "x".repeat(bytes);
        for chunk in (0..entries).collect::<Vec<_>>().chunks(10) {
            let batch = chunk
                .iter()
                .map(|i| Append {
                    ts: now_ms(),
                    kind: kinds::AGENT_OUTPUT.into(),
                    author: kinds::AUTHOR_BRIDGE.into(),
                    payload: json!({"stream": "stdout", "text": format!("{i:06}{filler}")}).into(),
                    key: IdemKey::None,
                })
                .collect();
            log.append(id, batch).await.unwrap();
        }
        id
    }

    /// Viewers of `session`, from the list (which, unlike `GET /sessions/{id}`, derives no
    /// state: the first read of a session's state folds its log).
    async fn watchers(&self, session: &str) -> u32 {
        let list: Vec<SessionInfo> = self.get_json("/sessions?limit=1000", ADMIN).await;
        list.iter().find(|s| s.name == session).unwrap().watchers
    }

    /// Waits (bounded) until the session has `n` viewers.
    async fn until_watchers(&self, session: &str, n: u32) {
        let start = Instant::now();
        while self.watchers(session).await != n {
            assert!(start.elapsed() < WAIT, "{session} never had {n} viewers");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kb * 1024
}

/// The peak of the process's anonymous memory (`RssAnon`: what the heap costs, without the
/// SQLite file pages it maps, which the OS can drop) from now until [`Peak::growth`].
struct Peak {
    base: u64,
    max: std::sync::Arc<std::sync::atomic::AtomicU64>,
    sampler: tokio::task::JoinHandle<()>,
}

impl Peak {
    fn start() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        let base = status_bytes("RssAnon:");
        let max = std::sync::Arc::new(AtomicU64::new(base));
        let seen = max.clone();
        // Sampled on its own thread, so a busy runtime cannot hide a peak.
        let sampler = tokio::task::spawn_blocking(move || {
            while std::sync::Arc::strong_count(&seen) > 1 {
                seen.fetch_max(status_bytes("RssAnon:"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Self { base, max, sampler }
    }

    /// Growth of the peak over the start.
    async fn growth(self) -> u64 {
        let Self { base, max, sampler } = self;
        let peak = max
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(status_bytes("RssAnon:"));
        drop(max);
        sampler.await.unwrap();
        peak.saturating_sub(base)
    }
}

fn hello(agent: AgentInfo) -> String {
    let hello = Hello {
        agent,
        ..client::hello("hello-attack")
    };
    serde_json::to_string(&BridgeToServer::Hello(hello)).unwrap()
}

/// Sends `hello` on a new bridge socket and returns the close code it is answered with.
async fn hello_close_code(server: &TestServer, hello: String) -> u16 {
    let mut ws = client::bridge_socket(server.addr, ADMIN).await;
    ws.send(Message::Text(hello.into())).await.unwrap();
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await.expect("answer") {
            Some(Ok(Message::Close(Some(f)))) => return u16::from(f.code),
            Some(Ok(Message::Text(t))) => panic!("answered instead of refused: {t:.200}"),
            Some(Ok(_)) => {}
            other => panic!("no close code: {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_oversized_hello_is_refused_with_a_close_code_and_nothing_is_stored() {
    let server = TestServer::spawn(|_| {}).await;
    // The review's attack: a 20 MiB `agent.command` under the 4 MiB frame limit.
    let huge = AgentInfo {
        command: vec!["x".repeat(20 << 20)],
        ..Default::default()
    };
    assert_eq!(
        hello_close_code(&server, hello(huge)).await,
        close::MESSAGE_TOO_BIG
    );
    // Within the frame limit, an agent description over 16 KiB is refused too.
    let long = AgentInfo {
        command: vec!["x".repeat(64 << 10)],
        ..Default::default()
    };
    assert_eq!(
        hello_close_code(&server, hello(long)).await,
        close::BAD_FRAME
    );
    let missing = server.store.log.find_session("hello-attack").await;
    assert!(missing.is_err(), "no session was created: {missing:?}");
}

#[tokio::test]
async fn another_users_sessions_with_huge_agents_cost_a_list_nothing() {
    let server = TestServer::spawn(|_| {}).await;
    let _alice = server.user("alice").await;
    let bob = server.user("bob").await;
    // Fifteen sessions of alice's whose stored agent descriptions are 4 MiB each (what the
    // handshake used to accept), written straight to the store.
    let huge = AgentInfo {
        command: vec!["x".repeat(4 << 20)],
        ..Default::default()
    };
    for i in 0..15 {
        let s = server
            .store
            .log
            .open_session(&format!("alice-{i}"), Some(&huge))
            .await
            .unwrap();
        server
            .store
            .access
            .set_member(s.id, "alice", Role::Owner)
            .await
            .unwrap();
    }
    let mine = server.big_session("bobs", 1, 10).await;
    server
        .store
        .access
        .set_member(mine, "bob", Role::Owner)
        .await
        .unwrap();
    let peak = Peak::start();
    let start = Instant::now();
    // Eight lists at once, as in the review (3.4 GB then).
    let lists = (0..8).map(|_| server.get_json::<Vec<SessionInfo>>("/sessions", &bob));
    let lists = futures_util::future::join_all(lists).await;
    let took = start.elapsed();
    let grew = peak.growth().await;
    for list in lists {
        let names: Vec<&str> = list.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["bobs"]);
    }
    eprintln!("peak anonymous memory growth: {grew} bytes");
    assert!(took < Duration::from_secs(2), "eight lists took {took:?}");
    assert!(
        grew < 16 * MIB,
        "eight lists grew the peak RSS by {grew} bytes"
    );
    // An administrator's list reads every session, without the oversized descriptions.
    let all: Vec<SessionInfo> = server.get_json("/sessions?limit=1000", ADMIN).await;
    assert_eq!(all.len(), 16);
    assert!(all.iter().all(|s| s.agent.is_none()));
    let bad = server.get("/sessions?limit=0", &bob).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_page_of_entries_is_bounded_in_bytes_and_walks_the_whole_log() {
    let server = TestServer::spawn(|c| c.max_page_bytes = 4 * MIB).await;
    let entry = 512 * 1024;
    server.big_session("big", 60, entry).await;
    let peak = Peak::start();
    let resp = server.get("/sessions/big/entries?limit=1000", ADMIN).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp.bytes().await.unwrap();
    let grew = peak.growth().await;
    eprintln!("peak anonymous memory growth: {grew} bytes");
    // The review's attack built a 315 MB page; now a page stops at the byte bound.
    assert!(
        body.len() as u64 <= 4 * MIB + entry as u64,
        "page of {} bytes",
        body.len()
    );
    let page: EntriesPage = serde_json::from_slice(&body).unwrap();
    assert!(page.has_more);
    assert!(page.entries.len() < 10, "{} entries", page.entries.len());
    assert!(
        grew < 64 * MIB,
        "one page grew the peak RSS by {grew} bytes"
    );
    // Paging on gets every entry once, in order.
    let mut seen = page.entries.iter().map(|e| e.seq.0).collect::<Vec<_>>();
    for _ in 0..100 {
        let after = *seen.last().unwrap();
        let page: EntriesPage = server
            .get_json(
                &format!("/sessions/big/entries?after={after}&limit=1000"),
                ADMIN,
            )
            .await;
        seen.extend(page.entries.iter().map(|e| e.seq.0));
        if !page.has_more {
            break;
        }
    }
    assert_eq!(seen, (1..=60).collect::<Vec<_>>());
}

/// A loopback connection with a tiny receive buffer that sends `request` and never reads.
async fn stalled(addr: std::net::SocketAddr, request: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

#[tokio::test]
async fn stalled_sse_readers_over_big_entries_stay_under_the_bound_and_are_cut_off() {
    let server = TestServer::spawn(|c| {
        c.max_page_bytes = MIB;
        c.stall_timeout = Duration::from_millis(1500);
        c.keepalive = Duration::from_secs(3600);
    })
    .await;
    // The review's attack, scaled: entries of 512 KiB, eight sockets on `?after=0` that never
    // read (then 4.9 GB for 600 entries).
    server.big_session("big", 120, 512 * 1024).await;
    let peak = Peak::start();
    let request = format!(
        "GET /api/v1/sessions/big/events?after=0 HTTP/1.1\r\nHost: moor\r\n\
         Authorization: Bearer {ADMIN}\r\n\r\n"
    );
    let mut sockets = Vec::new();
    for _ in 0..8 {
        sockets.push(stalled(server.addr, &request).await);
    }
    server.until_watchers("big", 8).await;
    // Each stream is cut off once its reader has taken nothing for the stall timeout.
    server.until_watchers("big", 0).await;
    let grew = peak.growth().await;
    eprintln!("peak anonymous memory growth: {grew} bytes");
    // Per stream: a page (1 MiB) read and parsed, two chunks of 64 KiB plus an entry each.
    assert!(
        grew < 48 * MIB,
        "eight stalled readers grew the peak RSS by {grew} bytes"
    );
    drop(sockets);
    let _ = &server.dir;
}

#[tokio::test]
async fn a_stalled_viewer_socket_is_closed_lagged_and_resumes_from_its_cursor() {
    let server = TestServer::spawn(|c| {
        c.max_page_bytes = MIB;
        c.stall_timeout = Duration::from_millis(1500);
        c.keepalive = Duration::from_secs(3600);
        c.idle_timeout = Duration::from_secs(3600);
    })
    .await;
    server.big_session("big", 120, 512 * 1024).await;
    let peak = Peak::start();
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(server.addr).await.unwrap();
    let mut req = format!("ws://{}/api/v1/sessions/big/ws?after=0", server.addr)
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {ADMIN}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::client_async(req, stream).await.unwrap();
    server.until_watchers("big", 1).await;
    server.until_watchers("big", 0).await;
    let grew = peak.growth().await;
    eprintln!("peak anonymous memory growth: {grew} bytes");
    assert!(
        grew < 32 * MIB,
        "a stalled viewer grew the peak RSS by {grew} bytes"
    );
    // Reading now gets the entries that were on their way, in order, then the end: a LAGGED
    // close when it got through.
    let mut last = 0;
    let mut code = None;
    for _ in 0..1000 {
        match tokio::time::timeout(WAIT, ws.next()).await.expect("frame") {
            Some(Ok(Message::Text(t))) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["type"] == "entry" {
                    let seq = v["seq"].as_u64().unwrap();
                    assert_eq!(seq, last + 1, "in order, nothing skipped");
                    last = seq;
                }
            }
            Some(Ok(Message::Close(f))) => {
                code = f.map(|f| u16::from(f.code));
                break;
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => break,
        }
    }
    assert!(last < 120, "the viewer was cut off before the end");
    assert!(matches!(code, None | Some(close::LAGGED)), "{code:?}");
    // Resuming from the cursor gets the rest.
    let page: EntriesPage = server
        .get_json(
            &format!("/sessions/big/entries?after={last}&limit=1"),
            ADMIN,
        )
        .await;
    assert_eq!(page.entries[0].seq.0, last + 1);
}

#[tokio::test]
async fn an_account_holds_only_so_many_streams_and_sockets_open() {
    let server = TestServer::spawn(|c| c.max_streams_per_user = 3).await;
    let ann = server.user("ann").await;
    let id = server.big_session("watched", 1, 10).await;
    server
        .store
        .access
        .set_member(id, "ann", Role::Owner)
        .await
        .unwrap();
    let events = |token: &str| {
        server
            .http
            .get(server.url("/sessions/watched/events"))
            .bearer_auth(token.to_owned())
            .send()
    };
    // act: two streams and a bridge socket take ann's three slots
    let first = events(&ann).await.unwrap();
    let second = events(&ann).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(second.status(), StatusCode::OK);
    let mut req = format!("ws://{}/api/v1/bridge", server.addr)
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {ann}").parse().unwrap());
    let (bridge, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    // assert: a fourth of any kind is refused with 429; administrators are not counted
    assert_eq!(
        events(&ann).await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let mut viewer = format!("ws://{}/api/v1/sessions/watched/ws", server.addr)
        .into_client_request()
        .unwrap();
    viewer
        .headers_mut()
        .insert("authorization", format!("Bearer {ann}").parse().unwrap());
    match tokio_tungstenite::connect_async(viewer).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status().as_u16(), 429);
        }
        other => panic!("a fourth socket was not refused: {other:?}"),
    }
    assert_eq!(events(ADMIN).await.unwrap().status(), StatusCode::OK);
    // closing one gives its slot back
    drop(first);
    let start = Instant::now();
    loop {
        let resp = events(&ann).await.unwrap();
        if resp.status() == StatusCode::OK {
            break;
        }
        assert!(
            start.elapsed() < WAIT,
            "the closed stream's slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop((second, bridge));
}
