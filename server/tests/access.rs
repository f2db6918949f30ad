//! Access control over real sockets: who may do what on which session, token lifecycle, and
//! revocation of live connections. Users log in with passwords and act with JWT access tokens;
//! bridges and viewers are hand-driven WebSockets.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use moor_protocol::close;
use moor_protocol::error::ErrorCode;
use moor_protocol::web::{ServerToViewer, ViewerToServer};
use moor_server::access::jwt::{Claims, Keys};
use moor_server::{Server, ServerConfig};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::sync::DropGuard;

mod support;

use support::{client, serve_on_loopback, DataDir, Serving};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;
const WAIT: Duration = Duration::from_secs(10);
const ADMIN: &str = "admin-test-token";
const PASSWORD: &str = "correct horse battery";

/// A served server; stops when dropped, and then its data directory goes.
struct TestServer {
    _stop: DropGuard,
    addr: std::net::SocketAddr,
    http: reqwest::Client,
    /// The first-start setup code, while no administrator exists.
    setup_code: Option<String>,
    dir: DataDir,
}

/// An access token, or none at all.
#[derive(Debug, Clone)]
struct Cred(Option<String>);

impl TestServer {
    async fn spawn() -> Self {
        Self::spawn_with(|_| {}).await
    }

    async fn spawn_with(tweak: impl FnOnce(&mut ServerConfig)) -> Self {
        let dir = DataDir::new("moor-access");
        let server = support::build(&dir, ADMIN, |c| {
            c.idle_timeout = Duration::from_secs(30);
            tweak(c);
        })
        .await;
        let setup_code = server.setup_code().map(str::to_owned);
        let Serving { addr, shutdown, .. } = serve_on_loopback(server).await;
        Self {
            _stop: shutdown.drop_guard(),
            addr,
            http: reqwest::Client::new(),
            setup_code,
            dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}/api/v1{path}", self.addr)
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        cred: &Cred,
        body: Option<Value>,
    ) -> reqwest::Response {
        let mut req = self.http.request(method.parse().unwrap(), self.url(path));
        if let Some(t) = &cred.0 {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        req.send().await.unwrap()
    }

    /// `call`, with the answer's body read as JSON.
    async fn call_json(&self, method: &str, path: &str, cred: &Cred, body: Option<Value>) -> Value {
        self.call(method, path, cred, body)
            .await
            .json()
            .await
            .unwrap()
    }

    async fn status(
        &self,
        method: &str,
        path: &str,
        cred: &Cred,
        body: Option<Value>,
    ) -> StatusCode {
        self.call(method, path, cred, body).await.status()
    }

    /// `POST /auth/refresh` with the refresh token of `pair` (a login's or a refresh's answer).
    async fn refresh(&self, pair: &Value) -> reqwest::Response {
        let body = json!({"refresh_token": pair["refresh_token"]});
        self.call("POST", "/auth/refresh", &Cred(None), Some(body))
            .await
    }

    /// `cred` makes a share link of s1 as `body` says.
    async fn share_link(&self, cred: &Cred, body: Value) -> reqwest::Response {
        self.call("POST", "/sessions/s1/share-links", cred, Some(body))
            .await
    }

    /// `cred` answers a device's `code` with `answer` (`approve` or `deny`): the status.
    async fn answer_device(&self, answer: &str, code: &str, cred: &Cred) -> StatusCode {
        let body = json!({ "user_code": code });
        self.status("POST", &format!("/auth/device/{answer}"), cred, Some(body))
            .await
    }

    /// Asserts that answering a device's `code` with `answer` takes a credential, then answers
    /// it as `user`.
    async fn answer_device_as(&self, user: &Cred, answer: &str, code: &str) {
        assert_eq!(
            self.answer_device(answer, code, &Cred(None)).await,
            StatusCode::UNAUTHORIZED,
            "{answer} without a credential"
        );
        assert_eq!(
            self.answer_device(answer, code, user).await,
            StatusCode::NO_CONTENT,
            "{answer} as a user"
        );
    }

    /// `cred` makes a share link of s1 as `body` asks: the link.
    async fn made_link(&self, cred: &Cred, body: Value) -> Value {
        let resp = self.share_link(cred, body).await;
        assert_eq!(resp.status(), StatusCode::CREATED);
        resp.json().await.unwrap()
    }

    /// `cred` redeems the share link `token`: the status.
    async fn redeem(&self, token: &Value, cred: &Cred) -> StatusCode {
        let body = json!({ "token": token });
        self.status("POST", "/share-links/redeem", cred, Some(body))
            .await
    }

    /// `owner` offers `role` on `session` to `user` by name, and `user` (logged in as `them`)
    /// accepts.
    async fn share(&self, session: &str, owner: &Cred, user: &str, them: &Cred, role: &str) {
        let offer = self
            .status(
                "PUT",
                &format!("/sessions/{session}/members/{user}"),
                owner,
                Some(json!({ "role": role })),
            )
            .await;
        assert_eq!(offer, StatusCode::ACCEPTED, "offer to {user}");
        let accept = self
            .status("POST", &format!("/offers/{session}/accept"), them, None)
            .await;
        assert_eq!(accept, StatusCode::OK, "{user} accepts");
    }

    async fn add_user(&self, name: &str) {
        let s = self
            .status(
                "POST",
                "/users",
                &admin(),
                Some(json!({"name": name, "password": PASSWORD})),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "add user {name}");
    }

    /// Logs in; returns the token pair as JSON.
    async fn login(&self, name: &str) -> Value {
        let resp = self
            .call(
                "POST",
                "/auth/login",
                &Cred(None),
                Some(json!({"name": name, "password": PASSWORD})),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::OK, "login {name}");
        resp.json().await.unwrap()
    }

    async fn user(&self, name: &str) -> Cred {
        self.user_with(name, false).await
    }

    /// A new user (an administrator when `admin`), logged in.
    async fn user_with(&self, name: &str, admin_user: bool) -> Cred {
        let s = self
            .status(
                "POST",
                "/users",
                &admin(),
                Some(json!({"name": name, "password": PASSWORD, "admin": admin_user})),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "add user {name}");
        let pair = self.login(name).await;
        Cred(Some(pair["access_token"].as_str().unwrap().to_owned()))
    }

    fn ws_request(
        &self,
        path: &str,
        cred: &Cred,
    ) -> tokio_tungstenite::tungstenite::handshake::client::Request {
        let mut req = format!("ws://{}/api/v1{path}", self.addr)
            .into_client_request()
            .unwrap();
        if let Some(t) = &cred.0 {
            req.headers_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        req
    }

    /// Opens a WebSocket; the HTTP status of a refused upgrade otherwise.
    async fn ws(&self, path: &str, cred: &Cred) -> Result<Ws, StatusCode> {
        match tokio_tungstenite::connect_async(self.ws_request(path, cred)).await {
            Ok((ws, _)) => Ok(ws),
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                Err(StatusCode::from_u16(resp.status().as_u16()).unwrap())
            }
            Err(e) => panic!("ws connect: {e}"),
        }
    }

    /// A bridge socket after its `Hello`: the welcome, or the close code it was refused with.
    async fn bridge(&self, session: &str, cred: &Cred) -> Result<Ws, u16> {
        let ws = self.ws("/bridge", cred).await.map_err(|s| s.as_u16())?;
        client::handshake(ws, client::hello(session))
            .await
            .welcomed()
    }
}

fn sha256_hex(content: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(content.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn admin() -> Cred {
    Cred(Some(ADMIN.into()))
}

/// Reads until the socket closes; the close code (1005 without one, 1006 on a reset).
async fn closed(ws: &mut Ws) -> u16 {
    loop {
        match ws.next().await {
            Some(Ok(Message::Close(Some(f)))) => return u16::from(f.code),
            Some(Ok(Message::Close(None))) | None => return 1005,
            Some(Ok(_)) => {}
            Some(Err(_)) => return 1006,
        }
    }
}

/// The close code of a socket that closes within [`WAIT`] (`None` if it stays open).
async fn closes_with(ws: &mut Ws) -> Option<u16> {
    tokio::time::timeout(WAIT, closed(ws)).await.ok()
}

/// Whether an SSE response ends within [`WAIT`].
async fn sse_ends(sse: &mut reqwest::Response) -> bool {
    tokio::time::timeout(WAIT, async { while let Ok(Some(_)) = sse.chunk().await {} })
        .await
        .is_ok()
}

/// A JWT's claims, read without checking it (the test forges variants of real tokens).
fn claims_of(token: &str) -> Claims {
    let body = token.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// Uploads `content` as a blob and a checkpoint of `session` naming it (as its patch); returns
/// the blob's SHA-256.
async fn upload_checkpoint(
    server: &TestServer,
    cred: &Cred,
    session: &str,
    content: &str,
) -> String {
    let sha = sha256_hex(content);
    let resp = server
        .http
        .put(server.url(&format!("/blobs/{sha}")))
        .bearer_auth(cred.0.as_deref().unwrap())
        .body(content.to_owned())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "blob upload: {}", resp.status());
    let id = &sha[..16];
    let manifest = json!({
        "id": id, "created_at": 1, "reason": "tool", "base": null, "branch": null,
        "tree": "t", "commit": "c", "commit_object": "", "object_format": "sha1",
        "repo_state": null, "work_tree": "/w", "files": [], "skipped": [],
        "diffstat": {"files": 0, "insertions": 0, "deletions": 0},
        "patch": {"sha256": sha, "size": content.len()},
    });
    let s = server
        .status(
            "PUT",
            &format!("/sessions/{session}/checkpoints/{id}"),
            cred,
            Some(manifest),
        )
        .await;
    assert!(s.is_success(), "manifest upload: {s}");
    sha
}

/// Content of the blob `cast` attaches to a checkpoint of `s1`.
const S1_BLOB: &str = "the patch of s1's checkpoint";

/// The roles of the matrix, as credentials on session `s1`.
struct Cast {
    none: Cred,
    viewer: Cred,
    controller: Cred,
    owner: Cred,
    other_owner: Cred,
    revoked: Cred,
    expired: Cred,
}

/// Users, one session owned by `ann` (her bridge attached it) and shared with a viewer and a
/// controller, and one session owned by `ola`.
async fn cast(server: &TestServer) -> (Cast, Ws) {
    let owner = server.user("ann").await;
    let viewer = server.user("vic").await;
    let controller = server.user("cole").await;
    let other_owner = server.user("ola").await;
    let revoked = server.user("rex").await;
    let expired = server.user("eve").await;
    let bridge = server.bridge("s1", &owner).await.expect("owner attaches");
    let _ola = server
        .bridge("s2", &other_owner)
        .await
        .expect("ola attaches");
    upload_checkpoint(server, &owner, "s1", S1_BLOB).await;
    upload_checkpoint(server, &other_owner, "s2", "the patch of s2's checkpoint").await;
    for (user, cred, role) in [
        ("vic", &viewer, "viewer"),
        ("cole", &controller, "controller"),
        ("rex", &revoked, "controller"),
        ("eve", &expired, "controller"),
    ] {
        server.share("s1", &owner, user, cred, role).await;
    }
    assert_eq!(
        server
            .status("POST", "/users/rex/revoke", &admin(), None)
            .await,
        StatusCode::NO_CONTENT
    );
    // eve's token, re-signed with the server's own key as expired a minute ago.
    let keys = Keys::load_or_create(&server.dir).unwrap();
    let mut c = claims_of(expired.0.as_deref().unwrap());
    c.exp = c.iat - 60;
    c.nbf = c.iat - 120;
    let expired = Cred(Some(keys.sign(&c).unwrap()));
    let cast = Cast {
        none: Cred(None),
        viewer,
        controller,
        owner,
        other_owner,
        revoked,
        expired,
    };
    (cast, bridge)
}

#[tokio::test]
async fn every_endpoint_answers_each_role_as_it_should() {
    // arrange
    let server = TestServer::spawn().await;
    let (c, _bridge) = cast(&server).await;
    let input = || {
        Some(
            json!({"client_msg_id": uuid::Uuid::new_v4().to_string(), "kind": "input.text", "payload": {"text": "hi"}}),
        )
    };
    // (method, path, body, expected for none, viewer, controller, owner, other owner, revoked, expired)
    type Row = (&'static str, &'static str, fn() -> Option<Value>, [u16; 7]);
    let read = [401, 200, 200, 200, 404, 401, 401];
    let s1_blob: &'static str =
        Box::leak(format!("/blobs/{}", sha256_hex(S1_BLOB)).into_boxed_str());
    let rows: Vec<Row> = vec![
        // A blob: readable with a role on a session whose checkpoint names it, else 404.
        ("GET", s1_blob, || None, read),
        ("GET", "/sessions/s1", || None, read),
        ("GET", "/sessions/s1/entries", || None, read),
        ("GET", "/sessions/s1/recovery", || None, read),
        ("GET", "/sessions/s1/transcript", || None, read),
        ("GET", "/sessions/s1/events", || None, read),
        ("GET", "/sessions/s1/checkpoints", || None, read),
        (
            "POST",
            "/sessions/s1/inputs",
            || None,
            [401, 403, 200, 200, 404, 401, 401],
        ),
        (
            "PUT",
            "/sessions/s1/members/vic",
            || Some(json!({"role": "viewer"})),
            [401, 403, 403, 204, 404, 401, 401],
        ),
        (
            "GET",
            "/sessions/s1/members",
            || None,
            [401, 403, 403, 200, 404, 401, 401],
        ),
        (
            "GET",
            "/sessions/s1/share-links",
            || None,
            [401, 403, 403, 200, 404, 401, 401],
        ),
        (
            "GET",
            "/sessions",
            || None,
            [401, 200, 200, 200, 200, 401, 401],
        ),
        (
            "POST",
            "/users",
            || Some(json!({"name": "zed", "password": "short"})),
            [401, 403, 403, 403, 403, 401, 401],
        ),
        (
            "GET",
            "/sessions/nope",
            || None,
            [401, 404, 404, 404, 404, 401, 401],
        ),
    ];
    let roles = [
        ("none", &c.none),
        ("viewer", &c.viewer),
        ("controller", &c.controller),
        ("owner", &c.owner),
        ("other owner", &c.other_owner),
        ("revoked", &c.revoked),
        ("expired", &c.expired),
    ];
    // act + assert
    let mut failures = Vec::new();
    for (method, path, body, expected) in &rows {
        for ((role, cred), want) in roles.iter().zip(expected) {
            let body = if *path == "/sessions/s1/inputs" {
                input()
            } else {
                body()
            };
            let got = server.status(method, path, cred, body).await.as_u16();
            if got != *want {
                failures.push(format!("{method} {path} as {role}: got {got}, want {want}"));
            }
        }
    }
    // The viewer WebSocket: the upgrade is refused exactly like the HTTP reads.
    for ((role, cred), want) in roles.iter().zip(read) {
        let got = match server.ws("/sessions/s1/ws", cred).await {
            Ok(_) => 200,
            Err(s) => s.as_u16(),
        };
        if got != want {
            failures.push(format!("viewer ws as {role}: got {got}, want {want}"));
        }
    }
    // The bridge WebSocket: only the owner may attach to s1; others are refused at the
    // upgrade (401) or after the hello (4001, whatever their role, and whether or not s1 is
    // visible to them).
    let mut attached = Vec::new();
    for ((role, cred), want) in roles.iter().zip([401, 4001, 4001, 1000, 4001, 401, 401]) {
        let got = match server.bridge("s1", cred).await {
            Ok(ws) => {
                attached.push(ws);
                1000
            }
            Err(code) => code,
        };
        if got != want {
            failures.push(format!("bridge ws as {role}: got {got}, want {want}"));
        }
    }
    // Closing the bridge: owner only (last, since it closes the owner's bridge).
    for ((role, cred), want) in roles.iter().zip([401, 403, 403, 404, 404, 401, 401]) {
        if *role == "owner" {
            continue;
        }
        let got = server
            .status(
                "POST",
                "/sessions/s1/bridge/close",
                cred,
                Some(json!({"code": 4000})),
            )
            .await
            .as_u16();
        if got != want {
            failures.push(format!("bridge close as {role}: got {got}, want {want}"));
        }
    }
    let got = server
        .status(
            "POST",
            "/sessions/s1/bridge/close",
            &c.owner,
            Some(json!({"code": 4000})),
        )
        .await;
    if !got.is_success() {
        failures.push(format!("bridge close as owner: got {got}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The list shows each user only their sessions.
    let names = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let list = server
        .call_json("GET", "/sessions", &c.other_owner, None)
        .await;
    assert_eq!(names(list), vec!["s2"]);
    let list = server.call_json("GET", "/sessions", &c.viewer, None).await;
    assert_eq!(names(list), vec!["s1"]);
}

#[tokio::test]
async fn a_viewer_socket_refuses_input_from_a_viewer_and_takes_it_from_a_controller() {
    // arrange
    let server = TestServer::spawn().await;
    let (c, _bridge) = cast(&server).await;
    for (cred, allowed) in [(&c.viewer, false), (&c.controller, true)] {
        let mut ws = server.ws("/sessions/s1/ws", cred).await.unwrap();
        // act
        let frame = ViewerToServer::Input(serde_json::from_value(json!({
            "client_msg_id": uuid::Uuid::new_v4().to_string(), "kind": "input.text", "payload": {"text": "x"}
        })).unwrap());
        ws.send(Message::Text(serde_json::to_string(&frame).unwrap().into()))
            .await
            .unwrap();
        // assert
        let answer = loop {
            let Some(Ok(Message::Text(t))) = tokio::time::timeout(WAIT, ws.next()).await.unwrap()
            else {
                continue;
            };
            let frame: ServerToViewer = serde_json::from_str(&t).unwrap();
            if let ServerToViewer::InputAccepted { .. } | ServerToViewer::Error { .. } = frame {
                break frame;
            }
        };
        match answer {
            ServerToViewer::InputAccepted { .. } => assert!(allowed),
            ServerToViewer::Error { code, .. } => {
                assert!(!allowed);
                assert_eq!(code, ErrorCode::Forbidden);
            }
            _ => unreachable!(),
        }
    }
}

#[tokio::test]
async fn refresh_tokens_rotate_and_reuse_revokes_the_family() {
    // arrange, act: normal rotations
    let server = TestServer::spawn().await;
    let (first, second) = login_and_refresh(&server).await;
    assert!(second["refresh_token"].is_string());
    assert_ne!(second["refresh_token"], first["refresh_token"]);
    let third: Value = server.refresh(&second).await.json().await.unwrap();
    let access = Cred(Some(third["access_token"].as_str().unwrap().to_owned()));
    assert_eq!(
        server.status("GET", "/sessions", &access, None).await,
        StatusCode::OK
    );
    // act: a spent token again (as a thief would), its successor used already
    let reuse = server.refresh(&first).await.status();
    // assert: refused, and the whole family with it
    assert_eq!(reuse, StatusCode::UNAUTHORIZED);
    assert_eq!(
        server.refresh(&third).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        server.status("GET", "/sessions", &access, None).await,
        StatusCode::UNAUTHORIZED
    );
    // Another login is another family, unaffected.
    let other = server.login("ann").await;
    assert_eq!(server.refresh(&other).await.status(), StatusCode::OK);
}

/// Logs `ann` (created here) in and refreshes once: the first pair and the one replacing it.
async fn login_and_refresh(server: &TestServer) -> (Value, Value) {
    server.add_user("ann").await;
    let first = server.login("ann").await;
    let second: Value = server.refresh(&first).await.json().await.unwrap();
    (first, second)
}

/// A refresh whose answer is lost (the connection reset after the server rotated the token)
/// leaves the client with the spent token: within the grace window, while the token that
/// replaced it is unused, presenting it again gets a new pair; the lost token is then spent,
/// and presenting it (as a thief holding it would) revokes the family.
#[tokio::test]
async fn a_refresh_whose_answer_was_lost_can_be_repeated_within_the_grace_window() {
    // arrange
    let server = TestServer::spawn().await;
    let (first, lost) = login_and_refresh(&server).await;

    // act: the client never saw `lost`, and presents its token again
    let resp = server.refresh(&first).await;

    // assert
    assert_eq!(resp.status(), StatusCode::OK);
    let again: Value = resp.json().await.unwrap();
    assert_ne!(again["refresh_token"], lost["refresh_token"]);
    let next = server.refresh(&again).await;
    assert_eq!(next.status(), StatusCode::OK, "the new pair rotates on");
    let next: Value = next.json().await.unwrap();
    assert_eq!(
        server.refresh(&lost).await.status(),
        StatusCode::UNAUTHORIZED,
        "the pair whose answer was lost is spent"
    );
    assert_eq!(
        server.refresh(&next).await.status(),
        StatusCode::UNAUTHORIZED,
        "presenting the spent one revoked the family"
    );
}

/// Past the grace window a spent token is a reuse, even while its successor is unused.
#[tokio::test]
async fn a_spent_refresh_token_past_the_grace_window_revokes_the_family() {
    // arrange: no grace
    let server = TestServer::spawn_with(|c| c.refresh_grace = Duration::ZERO).await;
    let (first, second) = login_and_refresh(&server).await;

    // act
    let reuse = server.refresh(&first).await.status();

    // assert
    assert_eq!(reuse, StatusCode::UNAUTHORIZED);
    assert_eq!(
        server.refresh(&second).await.status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn forged_tokens_are_refused() {
    // arrange
    let server = TestServer::spawn().await;
    server.add_user("ann").await;
    let pair = server.login("ann").await;
    let real = pair["access_token"].as_str().unwrap().to_owned();
    let claims = claims_of(&real);
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let keys = Keys::load_or_create(&server.dir).unwrap();
    let body = serde_json::to_vec(&claims).unwrap();
    let header: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(real.split('.').next().unwrap())
            .unwrap(),
    )
    .unwrap();
    let kid = header["kid"].as_str().unwrap();
    let alg_none = format!(
        "{}.{}.",
        b64(format!(r#"{{"alg":"none","kid":"{kid}"}}"#).as_bytes()),
        b64(&body)
    );
    let other_key = Keys::ephemeral().sign(&claims).unwrap();
    let resign = |f: &dyn Fn(&mut Claims)| {
        let mut c = claims.clone();
        f(&mut c);
        keys.sign(&c).unwrap()
    };
    let forged = [
        ("alg none", alg_none),
        ("other key", other_key),
        ("wrong audience", resign(&|c| c.aud = "other".into())),
        ("wrong issuer", resign(&|c| c.iss = "evil".into())),
        ("expired", resign(&|c| c.exp = c.iat - 1)),
        (
            "not yet valid",
            resign(&|c| {
                c.nbf = c.iat + 3600;
                c.exp = c.iat + 7200
            }),
        ),
        ("unknown family", resign(&|c| c.fam = "made-up".into())),
    ];
    // act + assert
    assert_eq!(
        server
            .status("GET", "/sessions", &Cred(Some(real)), None)
            .await,
        StatusCode::OK
    );
    for (what, token) in forged {
        let got = server
            .status("GET", "/sessions", &Cred(Some(token)), None)
            .await;
        assert_eq!(got, StatusCode::UNAUTHORIZED, "{what}");
    }
}

#[tokio::test]
async fn the_browser_gets_httponly_samesite_cookies_that_authenticate() {
    // arrange
    let server = TestServer::spawn().await;
    server.add_user("ann").await;
    // act
    let resp = server
        .call(
            "POST",
            "/auth/login",
            &Cred(None),
            Some(json!({"name": "ann", "password": PASSWORD})),
        )
        .await;
    // assert
    let cookies = set_cookies(&resp);
    assert_eq!(cookies.len(), 2);
    for c in &cookies {
        assert!(
            c.contains("HttpOnly") && c.contains("SameSite=Strict"),
            "{c}"
        );
    }
    let access = cookies
        .iter()
        .find(|c| c.starts_with("moor_access="))
        .unwrap();
    let pair = access.split(';').next().unwrap();
    let s = server
        .http
        .get(server.url("/sessions"))
        .header("cookie", pair)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(s, StatusCode::OK);
    // A wrong password, and an unknown user, are both plain 401s.
    for (name, pw) in [("ann", "wrong password"), ("nobody", PASSWORD)] {
        let s = server
            .status(
                "POST",
                "/auth/login",
                &Cred(None),
                Some(json!({"name": name, "password": pw})),
            )
            .await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }
}

#[tokio::test]
async fn revocation_closes_live_sse_viewer_sockets_and_bridges() {
    // arrange
    let server = TestServer::spawn().await;
    let (c, mut bridge) = cast(&server).await;
    let mut sse = server
        .call("GET", "/sessions/s1/events", &c.viewer, None)
        .await;
    assert_eq!(sse.status(), StatusCode::OK);
    let mut viewer_ws = server.ws("/sessions/s1/ws", &c.viewer).await.unwrap();
    let mut controller_sse = server
        .call("GET", "/sessions/s1/events", &c.controller, None)
        .await;
    // act: revoke vic
    let t0 = Instant::now();
    assert_eq!(
        server
            .status("POST", "/users/vic/revoke", &admin(), None)
            .await,
        StatusCode::NO_CONTENT
    );
    // assert: both of vic's streams end, the socket with UNAUTHORIZED
    let (sse_ended, ws_code) = tokio::join!(sse_ends(&mut sse), closes_with(&mut viewer_ws));
    assert!(sse_ended, "vic's SSE still open after {:?}", t0.elapsed());
    assert_eq!(ws_code, Some(close::UNAUTHORIZED), "vic's socket closed");
    // cole's stream is untouched: it still gets new entries.
    let s = server
        .status("POST", "/sessions/s1/inputs", &c.controller, Some(json!({"client_msg_id": "m1", "kind": "input.text", "payload": {"text": "still here"}})))
        .await;
    assert_eq!(s, StatusCode::OK);
    let got = tokio::time::timeout(WAIT, async {
        let mut all = String::new();
        while let Ok(Some(chunk)) = controller_sse.chunk().await {
            all.push_str(&String::from_utf8_lossy(&chunk));
            if all.contains("still here") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(got, Ok(true));
    // act: revoke ann, whose bridge is attached
    let t0 = Instant::now();
    assert_eq!(
        server
            .status("POST", "/users/ann/revoke", &admin(), None)
            .await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        closes_with(&mut bridge).await,
        Some(close::UNAUTHORIZED),
        "bridge closed after {:?}",
        t0.elapsed()
    );
}

#[tokio::test]
async fn logout_revokes_the_family_and_closes_its_streams() {
    // arrange
    let server = TestServer::spawn().await;
    let (c, _bridge) = cast(&server).await;
    let mut ws = server.ws("/sessions/s1/ws", &c.controller).await.unwrap();
    // act
    assert_eq!(
        server
            .status("POST", "/auth/logout", &c.controller, None)
            .await,
        StatusCode::NO_CONTENT
    );
    // assert
    assert_eq!(
        closes_with(&mut ws).await,
        Some(close::UNAUTHORIZED),
        "closed"
    );
    assert_eq!(
        server.status("GET", "/sessions", &c.controller, None).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn a_flood_gets_429_with_retry_after_per_credential() {
    // arrange
    let server = TestServer::spawn_with(|c| {
        c.rate_limit_per_sec = 0.5;
        c.rate_limit_burst = 5.0;
    })
    .await;
    // act
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(server.call("GET", "/sessions", &admin(), None).await);
    }
    // assert
    let codes: Vec<u16> = statuses.iter().map(|r| r.status().as_u16()).collect();
    assert_eq!(codes, [200, 200, 200, 200, 200, 429, 429, 429]);
    let retry: u64 = statuses[5].headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry), "retry-after {retry}");
    // Other clients (no credential: by address) have their own bucket.
    assert_eq!(
        server.status("GET", "/sessions", &Cred(None), None).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn failed_logins_are_throttled() {
    // arrange
    let server = TestServer::spawn().await;
    server.add_user("ann").await;
    let bad = || Some(json!({"name": "ann", "password": "wrong password"}));
    // act
    let mut codes = Vec::new();
    for _ in 0..7 {
        codes.push(
            server
                .status("POST", "/auth/login", &Cred(None), bad())
                .await
                .as_u16(),
        );
    }
    // assert: a free retry, then 429 (even with the right password) until a short wait is over
    assert_eq!(codes, [401, 401, 429, 429, 429, 429, 429]);
    let right = Some(json!({"name": "ann", "password": PASSWORD}));
    let resp = server.call("POST", "/auth/login", &Cred(None), right).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=10).contains(&wait), "retry-after {wait}");
}

#[tokio::test]
async fn a_cross_origin_websocket_upgrade_is_refused_and_same_origin_is_not() {
    // arrange
    let server =
        TestServer::spawn_with(|c| c.allowed_origins = vec!["https://app.example".into()]).await;
    let open = |origin: &str| {
        let mut req = server.ws_request("/sessions/s1/ws", &admin());
        req.headers_mut().insert("origin", origin.parse().unwrap());
        req
    };
    let _bridge = server.bridge("s1", &admin()).await.unwrap();
    // act + assert
    match tokio_tungstenite::connect_async(open("https://evil.example")).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 403),
        other => panic!("cross-origin upgrade not refused: {:?}", other.map(|_| ())),
    }
    let same = format!("http://{}", server.addr);
    assert!(tokio_tungstenite::connect_async(open(&same)).await.is_ok());
    assert!(
        tokio_tungstenite::connect_async(open("https://app.example"))
            .await
            .is_ok()
    );
    // Bridges (no Origin header) are not browsers and are not affected.
    assert!(server.bridge("s1", &admin()).await.is_ok());
}

#[tokio::test]
async fn cors_answers_only_allowed_origins_and_every_response_has_security_headers() {
    // arrange
    let server =
        TestServer::spawn_with(|c| c.allowed_origins = vec!["https://app.example".into()]).await;
    let get = |origin: &'static str| {
        server
            .http
            .get(server.url("/sessions"))
            .bearer_auth(ADMIN)
            .header("origin", origin)
            .send()
    };
    // act
    let allowed = get("https://app.example").await.unwrap();
    let other = get("https://evil.example").await.unwrap();
    let page = server
        .http
        .get(format!("http://{}/", server.addr))
        .send()
        .await
        .unwrap();
    // assert
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    assert!(!other.headers().contains_key("access-control-allow-origin"));
    for resp in [&allowed, &other, &page] {
        assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
        let csp = resp.headers()["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    }
    assert!(page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("script-src 'self'"));
}

#[tokio::test]
async fn a_body_over_the_limit_gets_413() {
    // arrange
    let server = TestServer::spawn_with(|c| c.max_body_bytes = 1024).await;
    let _bridge = server.bridge("s1", &admin()).await.unwrap();
    let big = "x".repeat(4096);
    // act
    let s = server
        .status(
            "POST",
            "/sessions/s1/inputs",
            &admin(),
            Some(json!({"client_msg_id": "m", "kind": "input.text", "payload": {"text": big}})),
        )
        .await;
    // assert
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn a_device_gets_its_own_tokens_once_a_user_approves_its_code() {
    // arrange
    let server = TestServer::spawn().await;
    let ann = server.user("ann").await;
    let grant: Value = server
        .call_json("POST", "/auth/device", &Cred(None), None)
        .await;
    let poll = || Some(json!({"device_code": grant["device_code"]}));
    // act + assert: pending until approved
    assert_eq!(
        server
            .status("POST", "/auth/device/token", &Cred(None), poll())
            .await,
        StatusCode::ACCEPTED
    );
    let code = grant["user_code"].as_str().unwrap().to_lowercase();
    server.answer_device_as(&ann, "approve", &code).await;
    let resp = server
        .call("POST", "/auth/device/token", &Cred(None), poll())
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let pair: Value = resp.json().await.unwrap();
    let device = Cred(Some(pair["access_token"].as_str().unwrap().to_owned()));
    // The device acts as ann, in a family of its own: ann's logout does not end it.
    assert!(server.bridge("dev", &device).await.is_ok());
    assert_eq!(
        server.status("POST", "/auth/logout", &ann, None).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        server.status("GET", "/sessions/dev", &device, None).await,
        StatusCode::OK
    );
    // The code is spent.
    assert_eq!(
        server
            .status("POST", "/auth/device/token", &Cred(None), poll())
            .await,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn unsharing_or_changing_a_role_closes_that_members_live_streams() {
    // arrange
    let server = TestServer::spawn().await;
    let (c, _bridge) = cast(&server).await;
    let mut viewer_sse = server
        .call("GET", "/sessions/s1/events", &c.viewer, None)
        .await;
    let mut controller_ws = server.ws("/sessions/s1/ws", &c.controller).await.unwrap();
    // act: stop sharing with vic; make cole a viewer
    let t0 = Instant::now();
    let s = server
        .status("DELETE", "/sessions/s1/members/vic", &c.owner, None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let s = server
        .status(
            "PUT",
            "/sessions/s1/members/cole",
            &c.owner,
            Some(json!({"role": "viewer"})),
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    // assert: both end; vic no longer sees s1, cole reconnects as a viewer
    assert!(
        sse_ends(&mut viewer_sse).await,
        "vic's SSE still open after {:?}",
        t0.elapsed()
    );
    assert_eq!(
        closes_with(&mut controller_ws).await,
        Some(close::UNAUTHORIZED),
        "cole's socket closed"
    );
    assert_eq!(
        server.status("GET", "/sessions/s1", &c.viewer, None).await,
        StatusCode::NOT_FOUND
    );
    let input = Some(json!({"client_msg_id": "x", "kind": "input.text", "payload": {"text": "x"}}));
    assert_eq!(
        server
            .status("POST", "/sessions/s1/inputs", &c.controller, input)
            .await,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn share_links_grant_their_role_for_their_uses_until_revoked() {
    // arrange
    let server = TestServer::spawn().await;
    let owner = server.user("ann").await;
    let pat = server.user("pat").await;
    let quinn = server.user("quinn").await;
    let _bridge = server.bridge("s1", &owner).await.unwrap();
    // Only the owner makes links (a stranger does not even see the session).
    assert_eq!(
        server
            .share_link(&pat, json!({"role": "viewer"}))
            .await
            .status(),
        StatusCode::NOT_FOUND
    );
    let made = server
        .made_link(&owner, json!({"role": "controller", "uses": 1}))
        .await;
    assert!(made["url"]
        .as_str()
        .unwrap()
        .ends_with(&format!("/#/join&link={}", made["token"].as_str().unwrap())));
    // act + assert: one use, then it is spent
    assert_eq!(server.redeem(&made["token"], &pat).await, StatusCode::OK);
    assert_eq!(
        server.redeem(&made["token"], &quinn).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        server.status("GET", "/sessions/s1", &pat, None).await,
        StatusCode::OK
    );
    assert_eq!(
        server.status("GET", "/sessions/s1", &quinn, None).await,
        StatusCode::NOT_FOUND
    );
    // An expired link does nothing.
    let expired: Value = server
        .made_link(&owner, json!({"role": "viewer", "expires_in": 0}))
        .await;
    assert_eq!(
        server.redeem(&expired["token"], &quinn).await,
        StatusCode::NOT_FOUND
    );
    // Revoking the link removes pat's role and ends pat's live stream.
    let mut sse = server.call("GET", "/sessions/s1/events", &pat, None).await;
    assert_eq!(sse.status(), StatusCode::OK);
    let path = format!("/share-links/{}", made["id"].as_str().unwrap());
    // pat (a controller now) sees the session but may not revoke its links.
    assert_eq!(
        server.status("DELETE", &path, &pat, None).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        server.status("DELETE", &path, &owner, None).await,
        StatusCode::NO_CONTENT
    );
    assert!(sse_ends(&mut sse).await, "pat's stream outlived the link");
    assert_eq!(
        server.status("GET", "/sessions/s1", &pat, None).await,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn a_share_link_says_what_it_grants_before_any_login_without_spending_a_use() {
    // arrange: a one-use controller link of s1, made by its owner
    let spawned = TestServer::spawn().await;
    let server = &spawned;
    let owner = server.user("ann").await;
    let pat = server.user("pat").await;
    let _bridge = server.bridge("s1", &owner).await.unwrap();
    let made: Value = server
        .made_link(&owner, json!({"role": "controller", "uses": 1}))
        .await;
    let preview = |token: Value| async move {
        server
            .call(
                "POST",
                "/share-links/preview",
                &Cred(None),
                Some(json!({ "token": token })),
            )
            .await
    };

    // act: asked twice with no credential at all
    let first = preview(made["token"].clone()).await;
    assert_eq!(first.status(), StatusCode::OK);
    let said: Value = first.json().await.unwrap();
    let again = preview(made["token"].clone()).await.status();

    // assert: the session's name and the role, and the one use is still there to redeem
    assert_eq!(said["name"], "s1");
    assert_eq!(said["role"], "controller");
    assert_eq!(said["created_by"], "ann");
    assert!(said["session"].is_string());
    assert_eq!(again, StatusCode::OK);
    assert_eq!(server.redeem(&made["token"], &pat).await, StatusCode::OK);
    // Spent, unknown or expired: a 404, as redeeming would answer.
    assert_eq!(
        preview(made["token"].clone()).await.status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        preview(json!("no-such-link")).await.status(),
        StatusCode::NOT_FOUND
    );
    let expired: Value = server
        .made_link(&owner, json!({"role": "viewer", "expires_in": 0}))
        .await;
    assert_eq!(
        preview(expired["token"].clone()).await.status(),
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn owners_list_members_and_share_links_without_the_links_secrets() {
    // arrange: ann owns s1, shares it with cole by name and with pat through a link of 2 uses;
    // a second link is revoked.
    let server = TestServer::spawn().await;
    let owner = server.user("ann").await;
    let pat = server.user("pat").await;
    let cole = server.user("cole").await;
    let _bridge = server.bridge("s1", &owner).await.unwrap();
    server
        .share("s1", &owner, "cole", &cole, "controller")
        .await;
    let mut made = Vec::new();
    for body in [
        json!({"role": "viewer", "uses": 2, "expires_in": 3600}),
        json!({"role": "controller"}),
    ] {
        made.push(server.made_link(&owner, body).await);
    }
    assert_eq!(server.redeem(&made[0]["token"], &pat).await, StatusCode::OK);
    let revoke = format!("/share-links/{}", made[1]["id"].as_str().unwrap());
    assert_eq!(
        server.status("DELETE", &revoke, &owner, None).await,
        StatusCode::NO_CONTENT
    );

    // act
    let members = server
        .call("GET", "/sessions/s1/members", &owner, None)
        .await;
    let links = server
        .call("GET", "/sessions/s1/share-links", &owner, None)
        .await;

    // assert
    assert_eq!(members.status(), StatusCode::OK);
    let members: Value = members.json().await.unwrap();
    let link_id = made[0]["id"].as_str().unwrap();
    assert_eq!(
        members,
        json!([
            {"principal": "ann", "role": "owner", "via_link": null, "pending": false},
            {"principal": "cole", "role": "controller", "via_link": null, "pending": false},
            {"principal": "pat", "role": "viewer", "via_link": link_id, "pending": false},
        ])
    );
    assert_eq!(links.status(), StatusCode::OK);
    let text = links.text().await.unwrap();
    for link in &made {
        let secret = link["token"].as_str().unwrap();
        assert!(!text.contains(secret), "a link's secret is listed");
        assert!(
            !text.contains(&sha256_hex(secret)),
            "a link's hash is listed"
        );
    }
    let links: Value = serde_json::from_str(&text).unwrap();
    let links = links.as_array().unwrap();
    assert_eq!(links.len(), 2, "{links:?}");
    let by_id = |id: &Value| links.iter().find(|l| l["id"] == *id).unwrap().clone();
    let live = by_id(&made[0]["id"]);
    assert_eq!(
        (&live["role"], &live["uses_left"], &live["max_uses"]),
        (&json!("viewer"), &json!(1), &json!(2))
    );
    assert_eq!(live["expires_at"], made[0]["expires_at"]);
    assert_eq!(live["created_by"], "ann");
    assert!(live["revoked_at"].is_null());
    assert!(live["created_at"].as_i64().unwrap() <= live["expires_at"].as_i64().unwrap());
    let dead = by_id(&made[1]["id"]);
    assert!(dead["revoked_at"].is_i64(), "revoked: {dead}");
    let keys: Vec<&String> = live.as_object().unwrap().keys().collect();
    assert_eq!(
        keys.len(),
        8,
        "id, role, created_by, created_at, expires_at, uses_left, max_uses, revoked_at: {keys:?}"
    );
}

#[tokio::test]
async fn a_blob_no_checkpoint_of_yours_names_is_not_found_but_administrators_read_any() {
    // arrange
    let server = TestServer::spawn().await;
    let (c, _bridge) = cast(&server).await;
    let s2_blob = sha256_hex("the patch of s2's checkpoint");
    // Uploaded by ann, but named by no checkpoint (yet).
    let orphan = "uploaded, never named";
    let resp = server
        .http
        .put(server.url(&format!("/blobs/{}", sha256_hex(orphan))))
        .bearer_auth(c.owner.0.as_deref().unwrap())
        .body(orphan)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let boss = server.user_with("boss", true).await;
    // act + assert
    let get = |path: String, cred: Cred| {
        let server = &server;
        async move { server.status("GET", &path, &cred, None).await }
    };
    let orphan_path = format!("/blobs/{}", sha256_hex(orphan));
    assert_eq!(
        get(orphan_path.clone(), c.owner.clone()).await,
        StatusCode::NOT_FOUND,
        "even its uploader reads a blob only through a checkpoint"
    );
    assert_eq!(
        get(format!("/blobs/{s2_blob}"), c.owner.clone()).await,
        StatusCode::NOT_FOUND,
        "ann has no role on s2"
    );
    assert_eq!(
        get(format!("/blobs/{s2_blob}"), c.other_owner.clone()).await,
        StatusCode::OK
    );
    for cred in [admin(), boss] {
        assert_eq!(get(orphan_path.clone(), cred.clone()).await, StatusCode::OK);
        let resp = server
            .call("GET", &format!("/blobs/{s2_blob}"), &cred, None)
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.text().await.unwrap(), "the patch of s2's checkpoint");
    }
}

/// `POST /api/v1/auth/setup` with `code`, as `name`.
async fn setup(server: &TestServer, code: &str, name: &str) -> reqwest::Response {
    server
        .call(
            "POST",
            "/auth/setup",
            &Cred(None),
            Some(json!({"code": code, "name": name, "password": PASSWORD})),
        )
        .await
}

/// The `Set-Cookie` headers of an answer.
fn set_cookies(resp: &reqwest::Response) -> Vec<String> {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

async fn setup_open(server: &TestServer) -> bool {
    let v: Value = server
        .call_json("GET", "/auth/setup", &Cred(None), None)
        .await;
    v["open"].as_bool().expect("{\"open\": bool}")
}

#[tokio::test]
async fn the_setup_code_creates_the_first_administrator_once_and_logs_them_in() {
    // arrange
    let server = TestServer::spawn().await;
    let code = server
        .setup_code
        .clone()
        .expect("no administrator yet: a setup code");
    assert!(setup_open(&server).await);
    // act + assert: a wrong code, then bad input with the right one (not spent by it)
    let wrong = setup(&server, "not-the-code", "root").await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let bad_name = setup(&server, &code, "no spaces allowed").await;
    assert_eq!(bad_name.status(), StatusCode::BAD_REQUEST);
    // act: the right code
    let resp = setup(&server, &code, "root").await;
    // assert: answered like a login (token pair and the HttpOnly cookies)
    assert_eq!(resp.status(), StatusCode::OK);
    let cookies = set_cookies(&resp);
    assert_eq!(cookies.len(), 2, "{cookies:?}");
    assert!(cookies
        .iter()
        .all(|c| c.contains("HttpOnly") && c.contains("SameSite=Strict")));
    assert!(cookies.iter().any(|c| c.starts_with("moor_access=")));
    assert!(cookies.iter().any(|c| c.starts_with("moor_refresh=")));
    let pair: Value = resp.json().await.unwrap();
    assert_eq!(pair["token_type"], "Bearer");
    assert!(pair["refresh_token"]
        .as_str()
        .is_some_and(|t| !t.is_empty()));
    let root = Cred(Some(pair["access_token"].as_str().unwrap().to_owned()));
    // Setup is over: the same code, or any other, is 410 with a message saying what to do.
    assert!(!setup_open(&server).await);
    for c in [code.as_str(), "not-the-code"] {
        let again = setup(&server, c, "second").await;
        assert_eq!(again.status(), StatusCode::GONE);
        let body: Value = again.json().await.unwrap();
        assert_eq!(body["code"], "gone");
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains("setup is done") && message.contains("log in"),
            "{message}"
        );
    }
    // The administrator is a user: logs in with the password, manages users, owns every
    // session (ann's included), and sees them all.
    assert_eq!(server.login("root").await["token_type"], "Bearer");
    let s = server
        .status(
            "POST",
            "/users",
            &root,
            Some(json!({"name": "ann", "password": PASSWORD})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let ann = Cred(Some(
        server.login("ann").await["access_token"]
            .as_str()
            .unwrap()
            .to_owned(),
    ));
    let _bridge = server.bridge("anns", &ann).await.expect("ann attaches");
    assert_eq!(
        server.status("GET", "/sessions/anns", &root, None).await,
        StatusCode::OK
    );
    assert_eq!(
        server
            .status(
                "PUT",
                "/sessions/anns/members/ann",
                &root,
                Some(json!({"role": "owner"}))
            )
            .await,
        StatusCode::NO_CONTENT,
        "an administrator owns every session"
    );
    let list: Value = server.call_json("GET", "/sessions", &root, None).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(
        server
            .status(
                "POST",
                "/users",
                &ann,
                Some(json!({"name": "zed", "password": PASSWORD}))
            )
            .await,
        StatusCode::FORBIDDEN,
        "an ordinary user does not manage users"
    );
}

#[tokio::test]
async fn wrong_setup_codes_are_throttled_like_logins() {
    // arrange
    let server = TestServer::spawn().await;
    let code = server.setup_code.clone().unwrap();
    // act
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(setup(&server, "guess", "root").await.status().as_u16());
    }
    let right_code_meanwhile = setup(&server, &code, "root").await;
    // assert
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429]);
    assert_eq!(right_code_meanwhile.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(right_code_meanwhile.headers().contains_key("retry-after"));
}

#[tokio::test]
async fn an_expired_setup_code_is_refused_and_setup_is_not_open() {
    // arrange
    let server = TestServer::spawn_with(|c| c.setup_code_ttl = Duration::ZERO).await;
    let code = server.setup_code.clone().unwrap();
    // act + assert
    assert!(!setup_open(&server).await);
    assert_eq!(
        setup(&server, &code, "root").await.status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn no_setup_code_once_an_administrator_exists_and_user_add_admin_makes_one() {
    // arrange: `moord user add ops --admin` on a fresh data dir
    let dir = std::env::temp_dir().join(format!("moor-access-{}", uuid::Uuid::new_v4()));
    let mut config = ServerConfig::default();
    config.data_dir = dir.clone();
    let first = Server::build(config.clone()).await.unwrap();
    assert!(first.setup_code().is_some());
    assert!(first
        .setup_link("127.0.0.1:7070".parse().unwrap())
        .unwrap()
        .starts_with("http://127.0.0.1:7070/#/setup&code="));
    first.add_user("ops", PASSWORD.into(), true).await.unwrap();
    drop(first);
    // act
    let again = Server::build(config).await.unwrap();
    // assert
    assert_eq!(again.setup_code(), None);
    assert!(again.store().access.user("ops").await.unwrap().admin);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn revoking_an_administrator_closes_their_live_connections() {
    // arrange: an administrator (unlike the bootstrap token, a user) watching ann's session
    let server = TestServer::spawn().await;
    let ann = server.user("ann").await;
    let _bridge = server.bridge("s1", &ann).await.unwrap();
    let boss = server.user_with("boss", true).await;
    let mut sse = server.call("GET", "/sessions/s1/events", &boss, None).await;
    assert_eq!(sse.status(), StatusCode::OK);
    let mut ws = server.ws("/sessions/s1/ws", &boss).await.unwrap();
    let mut bootstrap_ws = server.ws("/sessions/s1/ws", &admin()).await.unwrap();
    // act
    assert_eq!(
        server
            .status("POST", "/users/boss/revoke", &admin(), None)
            .await,
        StatusCode::NO_CONTENT
    );
    // assert
    let (sse_ended, ws_code) = tokio::join!(sse_ends(&mut sse), closes_with(&mut ws));
    assert!(sse_ended, "the administrator's SSE stream is still open");
    assert_eq!(ws_code, Some(close::UNAUTHORIZED), "closed");
    assert_eq!(
        server.status("GET", "/sessions", &boss, None).await,
        StatusCode::UNAUTHORIZED
    );
    // The bootstrap admin's socket is not a user's: untouched, it still gets new entries.
    let input =
        json!({"client_msg_id": "m1", "kind": "input.text", "payload": {"text": "still here"}});
    assert_eq!(
        server
            .status("POST", "/sessions/s1/inputs", &ann, Some(input))
            .await,
        StatusCode::OK
    );
    let got = tokio::time::timeout(WAIT, async {
        while let Some(Ok(m)) = bootstrap_ws.next().await {
            if let Message::Text(t) = m {
                if t.contains("still here") {
                    return true;
                }
            }
        }
        false
    })
    .await;
    assert_eq!(got, Ok(true), "the bootstrap admin's socket ended");
}

#[tokio::test]
async fn sessions_and_me_tell_each_caller_its_role() {
    // arrange: s1 owned by ann, shared with vic (viewer) and cole (controller); s2 owned by ola
    let server = TestServer::spawn().await;
    let (c, _bridge) = cast(&server).await;
    let get = |path: &'static str, cred: Cred| {
        let server = &server;
        async move {
            let resp = server.call("GET", path, &cred, None).await;
            assert_eq!(resp.status(), StatusCode::OK, "GET {path}");
            resp.json::<Value>().await.unwrap()
        }
    };
    // act + assert: each caller's role, on the session and in the list
    for (who, cred, role) in [
        ("owner", c.owner.clone(), "owner"),
        ("controller", c.controller.clone(), "controller"),
        ("viewer", c.viewer.clone(), "viewer"),
        ("admin", admin(), "owner"),
    ] {
        let one = get("/sessions/s1", cred.clone()).await;
        assert_eq!(one["role"], role, "GET /sessions/s1 as {who}");
        let list = get("/sessions", cred).await;
        let s1 = list
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "s1")
            .unwrap_or_else(|| panic!("s1 listed for {who}"));
        assert_eq!(s1["role"], role, "GET /sessions as {who}");
    }
    // The admin owns every session, ola's included.
    let list = get("/sessions", admin()).await;
    let s2 = list.as_array().unwrap().iter().find(|s| s["name"] == "s2");
    assert_eq!(s2.unwrap()["role"], "owner");
    // /me: who is calling.
    assert_eq!(
        get("/me", c.viewer.clone()).await,
        json!({"name": "vic", "admin": false, "bootstrap": false})
    );
    assert_eq!(
        get("/me", admin()).await,
        json!({"name": "admin", "admin": true, "bootstrap": true})
    );
    let ada = server.user_with("ada", true).await;
    assert_eq!(
        get("/me", ada).await,
        json!({"name": "ada", "admin": true, "bootstrap": false})
    );
    assert_eq!(
        server.status("GET", "/me", &c.none, None).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        server.status("GET", "/me", &c.expired, None).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn a_denied_device_is_told_so_and_its_code_is_gone() {
    // arrange
    let server = TestServer::spawn().await;
    let ann = server.user("ann").await;
    let grant: Value = server
        .call_json("POST", "/auth/device", &Cred(None), None)
        .await;
    let code = grant["user_code"].as_str().unwrap();
    // The complete link opens the web app's approval page with the code filled in.
    assert!(
        grant["verification_uri_complete"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/#/device&code={code}")),
        "{grant}"
    );
    let poll = || Some(json!({"device_code": grant["device_code"]}));
    // act
    server.answer_device_as(&ann, "deny", code).await;
    // assert: approving it now finds nothing; the device hears "denied" once, then nothing
    assert_eq!(
        server.answer_device("approve", code, &ann).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        server
            .status("POST", "/auth/device/token", &Cred(None), poll())
            .await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        server
            .status("POST", "/auth/device/token", &Cred(None), poll())
            .await,
        StatusCode::NOT_FOUND
    );
}
