//! A small typed client for moord's HTTP API, plus raw access for the bad-input tests.
//!
//! Typed helpers panic on anything but the expected success status, with the response body in
//! the message: in a test, an unexpected answer is the failure.

use std::time::Duration;

use moor_protocol::api::{
    EntriesPage, Health, InputAccepted, InputRequest, SessionInfo, SessionStatus,
};
use moor_protocol::payload::{InputPermission, PermissionDecision};
use moor_protocol::{kinds, Entry, SessionId};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::util::{eventually, eventually_some};

/// Page size used by [`Api::entries_all`].
pub const PAGE_LIMIT: u64 = 500;

/// moord's HTTP API at one base URL, with one token.
#[derive(Debug, Clone)]
pub struct Api {
    base: String,
    token: String,
    http: reqwest::Client,
}

/// A raw answer: status and body (JSON when it parses, else a string value).
#[derive(Debug, Clone)]
pub struct RawResponse {
    /// HTTP status.
    pub status: StatusCode,
    /// `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// `Retry-After` header in seconds, if any (429 and 503 carry one).
    pub retry_after: Option<u64>,
    /// Parsed body (a JSON string holding the text when it is not JSON).
    pub body: Value,
}

impl RawResponse {
    /// The `code` field of a JSON error body.
    pub fn error_code(&self) -> Option<&str> {
        self.body.get("code").and_then(Value::as_str)
    }
}

impl Api {
    /// A client for `base` (`http://127.0.0.1:PORT`).
    pub fn new(base: impl Into<String>, token: impl Into<String>) -> Self {
        Self::with_client(base, token, reqwest::Client::builder())
    }

    /// A client for `base` built from `builder` (e.g. trusting a test CA for `https://`).
    pub fn with_client(
        base: impl Into<String>,
        token: impl Into<String>,
        builder: reqwest::ClientBuilder,
    ) -> Self {
        let http = builder
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .build()
            .expect("reqwest client builds");
        Self {
            base: base.into(),
            token: token.into(),
            http,
        }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The bearer token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Sends a request with the given bearer token (`None`: no `Authorization` header).
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<RawBody>,
    ) -> RawResponse {
        self.try_raw(method, path, token, body)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Api::raw`], returning a failed request (refused, reset, timed out) as an error.
    pub async fn try_raw(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<RawBody>,
    ) -> Result<RawResponse, String> {
        let mut req = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        match body {
            Some(RawBody::Json(v)) => req = req.json(&v),
            Some(RawBody::Text(s)) => {
                req = req
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(s)
            }
            None => {}
        }
        let resp = req
            .send()
            .await
            .map_err(|e| format!("request {path} failed: {e}"))?;
        let status = resp.status();
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let text = resp.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok(RawResponse {
            status,
            content_type,
            retry_after,
            body,
        })
    }

    /// Like [`Api::raw`] with this client's token.
    pub async fn authed(&self, method: Method, path: &str, body: Option<RawBody>) -> RawResponse {
        let token = self.token.clone();
        self.raw(method, path, Some(&token), body).await
    }

    /// `DELETE /api/v1/sessions/{session}`: the answer, whatever it is.
    pub async fn delete_session(&self, session: SessionId) -> RawResponse {
        let path = format!("/api/v1/sessions/{session}");
        self.authed(Method::DELETE, &path, None).await
    }

    async fn get_ok<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        let r = self.authed(Method::GET, path, None).await;
        assert_eq!(r.status, StatusCode::OK, "GET {path}: {:?}", r.body);
        serde_json::from_value(r.body.clone())
            .unwrap_or_else(|e| panic!("GET {path}: unexpected body {:?}: {e}", r.body))
    }

    /// `POST /api/v1/users` (as an administrator): adds `name` with `password`.
    pub async fn add_user(&self, name: &str, password: &str) {
        let body = RawBody::Json(serde_json::json!({"name": name, "password": password}));
        let r = self.authed(Method::POST, "/api/v1/users", Some(body)).await;
        assert_eq!(
            r.status,
            StatusCode::CREATED,
            "add user {name}: {:?}",
            r.body
        );
    }

    /// `POST /api/v1/auth/login`: `name`'s token pair (`access_token`, `refresh_token`, ...).
    pub async fn login(&self, name: &str, password: &str) -> Value {
        let body = RawBody::Json(serde_json::json!({"name": name, "password": password}));
        let r = self
            .raw(Method::POST, "/api/v1/auth/login", None, Some(body))
            .await;
        assert_eq!(r.status, StatusCode::OK, "login {name}: {:?}", r.body);
        r.body
    }

    /// `GET /healthz`.
    pub async fn healthz(&self) -> Health {
        let r = self.raw(Method::GET, "/healthz", None, None).await;
        assert_eq!(r.status, StatusCode::OK, "GET /healthz: {:?}", r.body);
        serde_json::from_value(r.body).expect("health body")
    }

    /// `GET /api/v1/sessions`.
    pub async fn sessions(&self) -> Vec<SessionInfo> {
        self.get_ok("/api/v1/sessions").await
    }

    /// `GET /api/v1/sessions/{id or name}`; `None` on 404.
    pub async fn session(&self, id_or_name: &str) -> Option<SessionInfo> {
        let path = format!("/api/v1/sessions/{id_or_name}");
        let r = self.authed(Method::GET, &path, None).await;
        if r.status == StatusCode::NOT_FOUND {
            return None;
        }
        assert_eq!(r.status, StatusCode::OK, "GET {path}: {:?}", r.body);
        Some(
            serde_json::from_value(r.body.clone())
                .unwrap_or_else(|e| panic!("GET {path}: {:?}: {e}", r.body)),
        )
    }

    /// Waits until the session exists (a bridge said `Hello`) and returns it.
    pub async fn wait_session(&self, name: &str, timeout: Duration) -> SessionInfo {
        eventually_some(timeout, &format!("session {name} to exist"), || {
            self.session(name)
        })
        .await
    }

    /// Waits until the session's status is `ended`.
    pub async fn wait_ended(&self, name: &str, timeout: Duration) -> SessionInfo {
        eventually_some(timeout, &format!("session {name} to end"), || async {
            self.session(name)
                .await
                .filter(|s| s.status == SessionStatus::Ended)
        })
        .await
    }

    /// Waits until the session's bridge is online (`true`) or offline (`false`).
    pub async fn wait_bridge_online(&self, name: &str, online: bool, timeout: Duration) {
        eventually(
            timeout,
            &format!("session {name} bridge online={online}"),
            || async {
                self.session(name)
                    .await
                    .is_some_and(|s| s.bridge.online == online)
            },
        )
        .await
    }

    /// One page of `GET /entries?after=N&limit=M`.
    pub async fn entries_after(&self, session: SessionId, after: u64, limit: u64) -> EntriesPage {
        self.get_ok(&format!(
            "/api/v1/sessions/{session}/entries?after={after}&limit={limit}"
        ))
        .await
    }

    /// One page of `GET /entries?before=N&limit=M`.
    pub async fn entries_before(&self, session: SessionId, before: u64, limit: u64) -> EntriesPage {
        self.get_ok(&format!(
            "/api/v1/sessions/{session}/entries?before={before}&limit={limit}"
        ))
        .await
    }

    /// The whole log, paging forward through `/entries`.
    pub async fn entries_all(&self, session: SessionId) -> Vec<Entry> {
        self.try_entries_all(session)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Api::entries_all`], returning a failed request or a non-200 answer as an error.
    pub async fn try_entries_all(&self, session: SessionId) -> Result<Vec<Entry>, String> {
        let mut all: Vec<Entry> = Vec::new();
        loop {
            let after = all.last().map_or(0, |e| e.seq.0);
            let path =
                format!("/api/v1/sessions/{session}/entries?after={after}&limit={PAGE_LIMIT}");
            let token = self.token.clone();
            let r = self.try_raw(Method::GET, &path, Some(&token), None).await?;
            if r.status != StatusCode::OK {
                return Err(format!("GET {path}: {} {:?}", r.status, r.body));
            }
            let page: EntriesPage = serde_json::from_value(r.body)
                .map_err(|e| format!("GET {path}: unexpected body: {e}"))?;
            let got = page.entries.len();
            all.extend(page.entries);
            if !page.has_more || got == 0 {
                return Ok(all);
            }
        }
    }

    /// `POST /inputs` with an `input.text`; panics unless 200.
    pub async fn post_input(
        &self,
        session: SessionId,
        client_msg_id: &str,
        text: &str,
    ) -> InputAccepted {
        self.post_input_kind(
            session,
            client_msg_id,
            kinds::INPUT_TEXT,
            text_payload(text),
        )
        .await
    }

    /// `POST /inputs` with any input kind; panics unless 200.
    pub async fn post_input_kind(
        &self,
        session: SessionId,
        client_msg_id: &str,
        kind: &str,
        payload: Value,
    ) -> InputAccepted {
        let r = self
            .post_input_kind_raw(session, client_msg_id, kind, payload)
            .await;
        assert!(
            r.status.is_success(),
            "POST {kind}: {} {:?}",
            r.status,
            r.body
        );
        serde_json::from_value(r.body.clone())
            .unwrap_or_else(|e| panic!("POST inputs: {:?}: {e}", r.body))
    }

    /// `POST /inputs` with an `input.permission` answering the `agent.permission.request` entry
    /// `request`; panics unless 200.
    pub async fn answer_permission(
        &self,
        session: SessionId,
        client_msg_id: &str,
        request: &Entry,
        decision: PermissionDecision,
    ) -> InputAccepted {
        let payload = permission_answer(request, decision);
        self.post_input_kind(session, client_msg_id, kinds::INPUT_PERMISSION, payload)
            .await
    }

    /// `POST /inputs` with an `input.text`, raw answer.
    pub async fn post_input_raw(
        &self,
        session: SessionId,
        client_msg_id: &str,
        text: &str,
    ) -> RawResponse {
        self.post_input_kind_raw(
            session,
            client_msg_id,
            kinds::INPUT_TEXT,
            text_payload(text),
        )
        .await
    }

    /// `POST /inputs` with an input of `kind`, raw answer.
    pub async fn post_input_kind_raw(
        &self,
        session: SessionId,
        client_msg_id: &str,
        kind: &str,
        payload: Value,
    ) -> RawResponse {
        let req = InputRequest {
            client_msg_id: client_msg_id.to_owned(),
            kind: kind.to_owned(),
            payload,
        };
        let body = serde_json::to_value(req).expect("input request serialises");
        self.authed(
            Method::POST,
            &format!("/api/v1/sessions/{session}/inputs"),
            Some(RawBody::Json(body)),
        )
        .await
    }

    /// `POST /bridge/close`: the server closes the session's live bridge socket with `code`.
    /// Returns the status (204 when a bridge was closed, 404 when none is connected).
    pub async fn close_bridge(&self, session: SessionId, code: u16, reason: &str) -> StatusCode {
        let body = serde_json::json!({ "code": code, "reason": reason });
        self.authed(
            Method::POST,
            &format!("/api/v1/sessions/{session}/bridge/close"),
            Some(RawBody::Json(body)),
        )
        .await
        .status
    }
}

/// A request body for [`Api::raw`].
#[derive(Debug, Clone)]
pub enum RawBody {
    /// Serialised as JSON.
    Json(Value),
    /// Sent as is, labelled `application/json` (for malformed bodies).
    Text(String),
}

/// Incrementally polls a session's log (`/entries?after=last`), for waiting on progress without
/// depending on the viewer streams under test elsewhere.
#[derive(Debug)]
pub struct LogTail {
    api: Api,
    session: SessionId,
    /// Every entry fetched so far, in seq order.
    pub entries: Vec<Entry>,
}

impl LogTail {
    /// A tail of `session`'s log starting at seq 1.
    pub fn new(api: Api, session: SessionId) -> Self {
        Self {
            api,
            session,
            entries: Vec::new(),
        }
    }

    /// Fetches whatever is new.
    pub async fn refresh(&mut self) {
        loop {
            let after = self.entries.last().map_or(0, |e| e.seq.0);
            let page = self
                .api
                .entries_after(self.session, after, PAGE_LIMIT)
                .await;
            let got = page.entries.len();
            self.entries.extend(page.entries);
            if !page.has_more || got == 0 {
                return;
            }
        }
    }

    /// Waits until `pred` holds for the entries fetched so far.
    pub async fn wait_for(
        &mut self,
        timeout: Duration,
        what: &str,
        mut pred: impl FnMut(&[Entry]) -> bool,
    ) {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            self.refresh().await;
            if pred(&self.entries) {
                return;
            }
            if std::time::Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for: {what}; log so far ({} entries): {}",
                    self.entries.len(),
                    crate::assert::summary(&self.entries)
                );
            }
            tokio::time::sleep(crate::util::POLL_INTERVAL).await;
        }
    }

    /// Waits until at least `n` `agent.output` stdout lines are stored.
    pub async fn wait_agent_lines(&mut self, n: usize, timeout: Duration) {
        self.wait_for(timeout, &format!("{n} agent.output lines"), |es| {
            crate::assert::agent_texts(es, "stdout").len() >= n
        })
        .await
    }

    /// Waits for `needle` in the terminal output (`agent.pty.output`) of the log.
    pub async fn wait_pty_output(&mut self, needle: &str, timeout: Duration) {
        self.wait_for(
            timeout,
            &format!("{needle:?} in the terminal output"),
            |es| contains(&pty_bytes(es), needle.as_bytes()),
        )
        .await;
    }

    /// Waits until an entry of `kind` matching `pred` exists after `after_seq`; returns it.
    pub async fn wait_kind(
        &mut self,
        kind: &str,
        after_seq: u64,
        timeout: Duration,
        mut pred: impl FnMut(&Entry) -> bool,
    ) -> Entry {
        self.wait_for(
            timeout,
            &format!("a {kind} entry after seq {after_seq}"),
            |es| {
                es.iter()
                    .any(|e| e.kind == kind && e.seq.0 > after_seq && pred(e))
            },
        )
        .await;
        self.entries
            .iter()
            .find(|e| e.kind == kind && e.seq.0 > after_seq && pred(e))
            .cloned()
            .expect("just found")
    }
}

/// The payload of an `input.text`.
fn text_payload(text: &str) -> Value {
    serde_json::json!({ "text": text })
}

/// The `input.permission` payload answering the `agent.permission.request` entry `request`.
pub fn permission_answer(request: &Entry, decision: PermissionDecision) -> Value {
    let request_id = request.payload["request_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a permission request has an id: {request:?}"))
        .to_owned();
    let answer = InputPermission {
        request_id: Some(request_id),
        decision,
        message: None,
    };
    serde_json::to_value(answer).expect("input.permission serialises")
}

/// Every byte of `agent.pty.output` in `entries`, in order.
pub fn pty_bytes(entries: &[Entry]) -> Vec<u8> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    entries
        .iter()
        .filter(|e| e.kind == kinds::AGENT_PTY_OUTPUT)
        .flat_map(|e| {
            b64.decode(e.payload["data"].as_str().expect("data is a string"))
                .expect("data is base64")
        })
        .collect()
}

/// Whether `needle` occurs in `hay`.
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}
