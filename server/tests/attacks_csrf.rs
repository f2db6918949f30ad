//! Attacks a hostile page or a stranger could try without any role, each written as the attack
//! against a real `moord` on loopback and asserting it now fails safely: cross-site requests
//! with the user's cookie (from another port of the same host), fresh made-up bearers and
//! device-grant floods against the rate limits, concurrent and stranger password guesses,
//! forged log lines, readable data files, and a malformed session id in a bridge's hello.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use moor_protocol::close;
use moor_server::ServerConfig;
use reqwest::{RequestBuilder, StatusCode};
use serde_json::{json, Value};
use tokio_util::sync::DropGuard;

mod support;

use support::client::{self, Client};
use support::{serve_on_loopback, DataDir, Serving};

const ADMIN: &str = "admin-attack-token";
const PASSWORD: &str = "correct horse battery";
/// A page an agent's dev server serves on another port of the same host.
const EVIL: &str = "http://127.0.0.1:9999";

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The server under attack; stops when dropped, and then its data directory goes.
struct Target {
    _stop: DropGuard,
    addr: std::net::SocketAddr,
    http: reqwest::Client,
    dir: DataDir,
}

impl Target {
    async fn spawn_with(tweak: impl FnOnce(&mut ServerConfig)) -> Self {
        let dir = DataDir::new("moor-attack");
        let server = support::build(&dir, ADMIN, tweak).await;
        let Serving { addr, shutdown, .. } = serve_on_loopback(server).await;
        Self {
            _stop: shutdown.drop_guard(),
            addr,
            http: reqwest::Client::new(),
            dir,
        }
    }

    async fn spawn() -> Self {
        Self::spawn_with(|_| {}).await
    }

    fn post(&self, path: &str) -> RequestBuilder {
        self.http.post(format!("http://{}/api/v1{path}", self.addr))
    }

    fn get(&self, path: &str) -> RequestBuilder {
        self.http.get(format!("http://{}/api/v1{path}", self.addr))
    }

    /// This server's own origin, as its pages send it.
    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    async fn add_user(&self, name: &str) {
        Client::new(self.addr, ADMIN).add_user(name, PASSWORD).await;
    }

    /// Logs `name` in: the `moor_access=…` cookie a browser would hold, and the access token.
    async fn login(&self, name: &str) -> (String, String) {
        let r = self
            .post("/auth/login")
            .json(&json!({"name": name, "password": PASSWORD}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "login {name}");
        let cookie = r
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_owned())
            .find(|c| c.starts_with("moor_access="))
            .unwrap();
        let pair: Value = r.json().await.unwrap();
        (cookie, pair["access_token"].as_str().unwrap().to_owned())
    }

    /// A bridge's socket after its hello: the welcome, or the close code it was refused with.
    async fn bridge(&self, session: &str, token: &str) -> Result<Ws, u16> {
        let ws = client::bridge_socket(self.addr, token).await;
        client::handshake(ws, client::hello(session))
            .await
            .welcomed()
    }

    /// Starts a device grant as `moor login` does, from client address `from`.
    async fn start_grant(&self, from: &str) -> reqwest::Response {
        self.post("/auth/device")
            .header("x-forwarded-for", from)
            .send()
            .await
            .unwrap()
    }

    async fn guess(&self, name: &str, password: &str, from: &str) -> reqwest::Response {
        self.post("/auth/login")
            .header("x-forwarded-for", from)
            .json(&json!({"name": name, "password": password}))
            .send()
            .await
            .unwrap()
    }
}

fn retry_after(r: &reqwest::Response) -> u64 {
    r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_page_on_another_port_cannot_approve_a_device_with_the_users_cookie() {
    // arrange: ann is logged in in her browser; the attacker's device waits for approval
    let server = Target::spawn().await;
    server.add_user("ann").await;
    let (cookie, _) = server.login("ann").await;
    let grant: Value = server
        .post("/auth/device")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let body = json!({"user_code": grant["user_code"]}).to_string();
    // act: the page's simple (no preflight) form-like post, and the same with a JSON type
    let as_text = server
        .post("/auth/device/approve")
        .header("cookie", &cookie)
        .header("origin", EVIL)
        .header("content-type", "text/plain")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    let as_json = server
        .post("/auth/device/approve")
        .header("cookie", &cookie)
        .header("origin", EVIL)
        .header("sec-fetch-site", "same-site")
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    // assert: refused, and the attacker's device gets no tokens of ann's
    assert_eq!(as_text.status(), StatusCode::FORBIDDEN);
    assert_eq!(as_json.status(), StatusCode::FORBIDDEN);
    let err: Value = as_json.json().await.unwrap();
    assert_eq!(err["code"], "forbidden");
    let poll = server
        .post("/auth/device/token")
        .json(&json!({"device_code": grant["device_code"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(poll.status(), StatusCode::ACCEPTED, "still pending");
    // ann's own page (same origin, JSON) still approves.
    let own = server
        .post("/auth/device/approve")
        .header("cookie", &cookie)
        .header("origin", server.origin())
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn a_page_on_another_port_cannot_send_input_with_the_users_cookie() {
    // arrange: ann's own agent session, and her browser's cookie
    let server = Target::spawn().await;
    server.add_user("ann").await;
    let (cookie, token) = server.login("ann").await;
    let _bridge = server.bridge("s1", &token).await.unwrap();
    let input = |id: &str| {
        json!({"client_msg_id": id, "kind": "input.text", "payload": {"text": "rm -rf ~"}})
            .to_string()
    };
    // act: the attack as text/plain; without any Origin (a browser always sends one on a
    // POST); and from our origin but with a form's content type
    let attacks = [
        (Some(EVIL), None, "text/plain"),
        (None, None, "application/json"),
        (Some(EVIL), Some("cross-site"), "application/json"),
        (
            None,
            Some("same-origin"),
            "application/x-www-form-urlencoded",
        ),
    ];
    let mut refused = Vec::new();
    for (i, (origin, site, content_type)) in attacks.into_iter().enumerate() {
        let mut req = server
            .post("/sessions/s1/inputs")
            .header("cookie", &cookie)
            .header("content-type", content_type)
            .body(input(&format!("evil-{i}")));
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        if let Some(s) = site {
            req = req.header("sec-fetch-site", s);
        }
        refused.push(req.send().await.unwrap().status().as_u16());
    }
    // assert: every one refused, and nothing reached the session's log
    assert_eq!(refused, [403, 403, 403, 403]);
    let page: Value = server
        .get("/sessions/s1/entries?after=0")
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kinds: Vec<&str> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(!kinds.contains(&"input.text"), "{kinds:?}");
    // Her own page (by Origin, or by Sec-Fetch-Site alone) and programs (a bearer, no Origin,
    // any content type) are not affected.
    let own = server
        .post("/sessions/s1/inputs")
        .header("cookie", &cookie)
        .header("origin", server.origin())
        .header("content-type", "application/json")
        .body(input("own-1"));
    let fetch_meta = server
        .post("/sessions/s1/inputs")
        .header("cookie", &cookie)
        .header("sec-fetch-site", "same-origin")
        .header("content-type", "application/json")
        .body(input("own-2"));
    let program = server
        .post("/sessions/s1/inputs")
        .bearer_auth(&token)
        .header("cookie", &cookie)
        .header("content-type", "text/plain")
        .body(input("prog-1"));
    for req in [own, fetch_meta, program] {
        assert_eq!(req.send().await.unwrap().status(), StatusCode::OK);
    }
}

#[tokio::test]
async fn a_page_on_another_port_cannot_log_the_browser_into_its_account() {
    // arrange: the attacker's own account
    let server = Target::spawn().await;
    server.add_user("mallory").await;
    // act: a cross-site form posts the attacker's credentials to the login endpoint
    let r = server
        .post("/auth/login")
        .header("origin", EVIL)
        .header("content-type", "text/plain")
        .body(json!({"name": "mallory", "password": PASSWORD}).to_string())
        .send()
        .await
        .unwrap();
    // assert: refused, and no cookie set
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.headers().get("set-cookie").is_none());
}

#[tokio::test]
async fn fresh_made_up_bearers_are_counted_against_their_address() {
    // arrange: five requests in a burst, then one every hundred seconds
    let server = Target::spawn_with(|c| {
        c.rate_limit_per_sec = 0.01;
        c.rate_limit_burst = 5.0;
    })
    .await;
    server.add_user("ann").await;
    let (_, ann) = server.login("ann").await;
    // act: every request with a new random bearer
    let mut codes = Vec::new();
    for i in 0..8 {
        let r = server
            .get("/sessions")
            .bearer_auth(format!("junk{i}-{}", uuid::Uuid::new_v4()))
            .send()
            .await
            .unwrap();
        codes.push(r.status().as_u16());
    }
    // assert: the address's bucket ran dry (login took its first request; adding the user
    // was counted against the admin); a verified user keeps a bucket of her own
    assert_eq!(codes, [401, 401, 401, 401, 429, 429, 429, 429]);
    let own = server
        .get("/sessions")
        .bearer_auth(&ann)
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_flood_of_device_grants_from_one_address_cannot_lock_out_a_real_login() {
    // arrange: addresses come from the (trusted) proxy's X-Forwarded-For
    let server = Target::spawn_with(|c| c.trust_forwarded = true).await;
    // act: one address asks for far more grants than anyone needs
    let mut codes = Vec::new();
    for _ in 0..40 {
        codes.push(server.start_grant("10.6.6.6").await.status().as_u16());
    }
    let real = server.start_grant("10.0.0.7").await;
    // assert: the flood is cut off at the per-address cap; the real `moor login` is not
    let granted = codes.iter().filter(|&&c| c == 200).count();
    assert_eq!(granted, 10, "{codes:?}");
    assert!(codes[10..].iter().all(|&c| c == 429), "{codes:?}");
    assert_eq!(real.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_guesses_reach_the_password_check_one_at_a_time() {
    // arrange
    let server = Arc::new(Target::spawn().await);
    server.add_user("ann").await;
    // act: 64 wrong guesses at once, from one address
    let guesses: Vec<_> = (0..64)
        .map(|i| {
            let server = server.clone();
            tokio::spawn(async move {
                let r = server
                    .guess("ann", &format!("wrong guess {i}"), "127.0.0.1")
                    .await;
                r.status().as_u16()
            })
        })
        .collect();
    let mut codes = Vec::new();
    for g in guesses {
        codes.push(g.await.unwrap());
    }
    // assert: one guess at a time reached argon2 (401), the next only after the first failed,
    // and then none for a second; every other was refused before it (429)
    let checked = codes.iter().filter(|&&c| c == 401).count();
    let throttled = codes.iter().filter(|&&c| c == 429).count();
    assert!((1..=2).contains(&checked), "{codes:?}");
    assert_eq!(checked + throttled, 64, "{codes:?}");
}

#[tokio::test]
async fn a_stranger_guessing_a_name_only_delays_its_owner_briefly() {
    // arrange
    let server = Target::spawn_with(|c| c.trust_forwarded = true).await;
    server.add_user("ann").await;
    // act: a stranger, from their own address, keeps guessing ann's password
    let mut stranger = Vec::new();
    for i in 0..20 {
        let r = server.guess("ann", &format!("guess {i}"), "10.6.6.6").await;
        stranger.push(r.status().as_u16());
    }
    // ...then ann logs in from hers, honouring any Retry-After (a short delay, not a lock)
    let mut waited = 0;
    let mut owner = None;
    for _ in 0..3 {
        let r = server.guess("ann", PASSWORD, "10.0.0.7").await;
        if r.status() != StatusCode::TOO_MANY_REQUESTS {
            owner = Some(r.status());
            break;
        }
        let wait = retry_after(&r);
        assert!(wait <= 10, "the owner was told to wait {wait} s");
        waited += wait;
        // The server's stated wait is what is under test here.
        tokio::time::sleep(Duration::from_secs(wait)).await;
    }
    // assert: the stranger's own guesses were throttled, and ann got in within the cap
    assert!(stranger.contains(&429), "{stranger:?}");
    assert_eq!(owner, Some(StatusCode::OK), "after waiting {waited} s");
    assert!(waited <= 10, "{waited} s");
}

#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// One thread: the server's tasks run where the test's log subscriber is installed.
#[tokio::test(flavor = "current_thread")]
async fn login_names_cannot_forge_log_lines_or_flood_the_log() {
    // arrange: the server's log, captured
    let buf = LogBuf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("moor_server=info")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _log = tracing::subscriber::set_default(subscriber);
    let server = Target::spawn_with(|c| c.trust_forwarded = true).await;
    // Within the 64-byte limit on names, so it reaches the log.
    let forged = "ann\r\n INFO moor_server: login ok user=root";
    // Half a MiB: under the body limit, so the name itself is what is refused.
    let huge = "x".repeat(1 << 19);
    // act
    let forged_answer = server.guess(forged, "wrong password", "10.0.0.1").await;
    let huge_answer = server.guess(&huge, "wrong password", "10.0.0.2").await;
    // assert: the forged name stays on its own line; the huge one is refused unlogged
    assert_eq!(forged_answer.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(huge_answer.status(), StatusCode::BAD_REQUEST);
    let log = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert!(
        lines
            .iter()
            .all(|l| !l.contains("login ok user=root") || l.contains("login refused")),
        "a forged line: {log}"
    );
    assert!(lines.iter().any(|l| l.contains("login refused")), "{log}");
    assert!(log.len() < 16 << 10, "{} bytes of log", log.len());
}

#[cfg(unix)]
#[tokio::test]
async fn the_data_dir_database_and_blobs_are_readable_by_their_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    // arrange: a new data dir
    let server = Target::spawn().await;
    let data = server.dir.to_path_buf();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    // act: write something to the database and store a blob
    server.add_user("ann").await;
    let content = b"API_KEY=secret\n";
    let sha = sha256_hex(content);
    let put = server
        .http
        .put(format!("http://{}/api/v1/blobs/{sha}", server.addr))
        .bearer_auth(ADMIN)
        .body(content.to_vec())
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.status());
    // assert
    assert_eq!(mode(&data), 0o700, "data dir");
    // (Directories below it need not be private: nobody else can enter the data dir.)
    for file in walk(&data).into_iter().filter(|p| p.is_file()) {
        let m = mode(&file);
        assert_eq!(m, 0o600, "{} is {m:o}", file.display());
    }
    assert!(walk(&data).iter().any(|p| p.ends_with("moor.db")));
    assert!(walk(&data)
        .iter()
        .any(|p| p.to_string_lossy().contains(&sha[4..])));
}

fn sha256_hex(content: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(content)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Every file and directory below `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p.clone());
            }
            out.push(p);
        }
    }
    out
}

#[tokio::test]
async fn a_hello_naming_a_non_canonical_uuid_is_refused_for_good() {
    // arrange: a session known by its id
    let server = Target::spawn().await;
    let id = uuid::Uuid::new_v4();
    let _first = server.bridge(&id.to_string(), ADMIN).await.unwrap();
    // act: the same id spelled otherwise, and a name no session can have
    let upper = server.bridge(&id.to_string().to_uppercase(), ADMIN).await;
    let simple = server.bridge(&id.simple().to_string(), ADMIN).await;
    let overlong = server.bridge(&"s".repeat(200), ADMIN).await;
    // assert: a close code that tells `moor` to stop retrying, not "store unavailable; retry"
    for refused in [upper, simple, overlong] {
        let code = refused.map(|_| ()).unwrap_err();
        assert_eq!(code, close::INVALID_SESSION);
        assert!(close::is_terminal(code));
    }
}
