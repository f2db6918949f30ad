//! The OpenAPI description the server serves: a valid OpenAPI 3.1 document whose references
//! all resolve, and which describes exactly the routes the server answers: every documented
//! operation is routed (the request reaches a handler, not the router's not-found or
//! method-not-allowed answer), every status the handler answered with is documented, and every
//! method the document leaves out of a path is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use moor_protocol::bridge::{BridgeToServer, ServerToBridge};
use moor_protocol::{kinds, NewEntry};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::sync::DropGuard;

mod support;

use support::{client, DataDir};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

const TOKEN: &str = "test-token";

/// A served server; stops when dropped, and then its data directory goes.
struct TestServer {
    _stop: DropGuard,
    addr: std::net::SocketAddr,
    http: reqwest::Client,
    _dir: DataDir,
}

impl TestServer {
    async fn spawn() -> Self {
        let dir = DataDir::new("moor-openapi");
        let server = support::build(&dir, TOKEN, |_| {}).await;
        let support::Serving { addr, shutdown, .. } = support::serve_on_loopback(server).await;
        Self {
            addr,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
            _stop: shutdown.drop_guard(),
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The document as served, without a credential.
    async fn document(&self) -> (String, Value) {
        let resp = self
            .http
            .get(self.url("/api/v1/openapi.json"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.headers()[reqwest::header::CONTENT_TYPE],
            "application/json"
        );
        let text = resp.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap();
        (text, value)
    }

    /// Sends `method path` as the admin, with an empty JSON object as the body of writes.
    async fn call(&self, method: &Method, path: &str) -> (StatusCode, String) {
        let (status, _, body) = self.answer(method, path).await;
        (status, body)
    }

    /// As [`Self::call`], with the answer's media type (without parameters; empty if none).
    async fn answer(&self, method: &Method, path: &str) -> (StatusCode, String, String) {
        let mut req = self
            .http
            .request(method.clone(), self.url(path))
            .bearer_auth(TOKEN);
        if *method == Method::POST || *method == Method::PUT {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body("{}");
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let media = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .unwrap_or_default()
            .trim()
            .to_owned();
        (status, media, resp.text().await.unwrap_or_default())
    }
}

/// Whether an answer is the router's own: no route for the path, or none for the method.
fn is_router_answer(status: StatusCode, body: &str) -> bool {
    let route_not_found = status == StatusCode::NOT_FOUND
        && serde_json::from_str::<Value>(body)
            .is_ok_and(|b| b["code"] == "not_found" && b["message"] == "route not found");
    route_not_found || status == StatusCode::METHOD_NOT_ALLOWED
}

/// A value for a path parameter: one the handler accepts as well formed where that matters.
fn sample(param: &str) -> &'static str {
    match param {
        "id" => "no-such-session",
        "checkpoint" => "0123456789abcdef",
        "sha256" => "0000000000000000000000000000000000000000000000000000000000000000",
        "file" => "index.html",
        "dir" => "assets",
        _ => "nobody",
    }
}

/// The `{name}`s of a path template.
fn template_params(path: &str) -> BTreeSet<String> {
    path.split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}'))
        .map(|(name, _)| name.to_owned())
        .collect()
}

fn fill(path: &str) -> String {
    template_params(path)
        .iter()
        .fold(path.to_owned(), |p, name| {
            p.replace(&format!("{{{name}}}"), sample(name))
        })
}

/// Every `$ref` in `value`, with where it was found.
fn refs<'a>(value: &'a Value, at: String, out: &mut Vec<(String, &'a str)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push((at.clone(), r)),
                    _ => refs(v, format!("{at}/{k}"), out),
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                refs(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Runs `openapi-spec-validator` (installed by `scripts/install-openapi-validator`, named by
/// `MOOR_OPENAPI_VALIDATOR`, which `scripts/test` sets) on the document.
fn validate_with_external_validator(text: &str) {
    let Ok(validator) = std::env::var("MOOR_OPENAPI_VALIDATOR") else {
        return;
    };
    let file = std::env::temp_dir().join(format!("moor-openapi-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&file, text).unwrap();
    let out = std::process::Command::new(&validator)
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("run {validator}: {e}"));
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "openapi-spec-validator refused the document: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether `value` fits `schema` (the subset of JSON Schema the document uses: `$ref`, `type`,
/// `properties`/`required`, `items`, `enum`, `oneOf`, `allOf`), with `doc` resolving references.
/// `Err` says where it does not.
fn conforms(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    if let Some(r) = schema["$ref"].as_str() {
        let target = doc.pointer(r.trim_start_matches('#')).ok_or(r)?;
        return conforms(doc, target, value, at);
    }
    if let Some(all) = schema["allOf"].as_array() {
        for s in all {
            conforms(doc, s, value, at)?;
        }
    }
    if let Some(one) = schema["oneOf"].as_array() {
        let fits = one
            .iter()
            .filter(|s| conforms(doc, s, value, at).is_ok())
            .count();
        if fits != 1 {
            return Err(format!("{at}: {value} fits {fits} of oneOf"));
        }
    }
    if let Some(options) = schema["enum"].as_array() {
        if !options.contains(value) {
            return Err(format!("{at}: {value} is not one of {options:?}"));
        }
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let number_ok = kind == "integer" && types.contains(&"number");
    if !types.is_empty() && !types.contains(&kind) && !number_ok {
        return Err(format!("{at}: {value} is not {types:?}"));
    }
    if let (Some(items), Value::Array(values)) = (schema.get("items"), value) {
        for (i, v) in values.iter().enumerate() {
            conforms(doc, items, v, &format!("{at}/{i}"))?;
        }
    }
    if let Value::Object(fields) = value {
        if let Some(props) = schema["properties"].as_object() {
            for (k, v) in fields {
                let Some(prop) = props.get(k) else {
                    return Err(format!("{at}: {k} is not a documented property"));
                };
                conforms(doc, prop, v, &format!("{at}/{k}"))?;
            }
        }
        for k in schema["required"].as_array().into_iter().flatten() {
            let k = k.as_str().unwrap_or_default();
            if !fields.contains_key(k) {
                return Err(format!("{at}: required {k} is missing"));
            }
        }
    }
    Ok(())
}

/// Checks an answer of `method template` against the description: its status is documented,
/// its media type is one the status documents (or there is no body where none is), and a JSON
/// body fits its schema. Whether a JSON body was checked.
fn check_answer(
    doc: &Value,
    method: &Method,
    template: &str,
    status: StatusCode,
    media: &str,
    body: &str,
) -> bool {
    let response =
        &doc["paths"][template][method.as_str().to_lowercase()]["responses"][status.as_str()];
    assert!(
        response.is_object(),
        "{method} {template} answered {status}, which its description lacks: {body}"
    );
    match response["content"].as_object() {
        None => assert!(
            body.is_empty(),
            "{method} {template} answered {status} with a body its description lacks: {body}"
        ),
        Some(content) => assert!(
            content.contains_key(media) || (body.is_empty() && media.is_empty()),
            "{method} {template} answered {status} as {media:?}, documented as {:?}: {body}",
            content.keys().collect::<Vec<_>>()
        ),
    }
    let schema = &response["content"][media]["schema"];
    if media != "application/json" || schema.is_null() {
        return false;
    }
    let body: Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("{method} {template} answered {e}: {body}"));
    if let Err(e) = conforms(doc, schema, &body, "") {
        panic!("{method} {template} answered {status} off its schema: {e}\n{body}");
    }
    true
}

const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
];

#[tokio::test]
async fn the_served_description_is_a_valid_openapi_document_whose_references_resolve() {
    let server = TestServer::spawn().await;
    let (text, doc) = server.document().await;
    let spec = oas3::from_json(&text).expect("an OpenAPI 3.1 document");
    let version = spec
        .validate_version()
        .expect("a supported OpenAPI version");
    assert_eq!((version.major, version.minor), (3, 1));
    assert_eq!(spec.info.title, "Mooring");
    validate_with_external_validator(&text);

    let mut found = Vec::new();
    refs(&doc, String::new(), &mut found);
    assert!(found.len() > 50, "only {} references", found.len());
    for (at, r) in &found {
        let pointer = r
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("{at}: {r} is not local"));
        assert!(doc.pointer(pointer).is_some(), "{at}: {r} does not resolve");
    }

    let schemes: BTreeSet<&str> = doc["components"]["securitySchemes"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for requirement in doc["security"].as_array().unwrap() {
        for scheme in requirement.as_object().unwrap().keys() {
            assert!(schemes.contains(scheme.as_str()), "unknown scheme {scheme}");
        }
    }

    let ops: Vec<_> = spec.operations().collect();
    assert!(ops.len() >= 43, "only {} operations", ops.len());
    let ids: BTreeSet<&str> = ops
        .iter()
        .map(|(path, method, op)| {
            op.operation_id
                .as_deref()
                .unwrap_or_else(|| panic!("{method} {path} has no operationId"))
        })
        .collect();
    assert_eq!(ids.len(), ops.len(), "operationIds repeat");
    let tags: BTreeSet<&str> = spec.tags.iter().map(|t| t.name.as_str()).collect();
    let mut json_errors = 0;
    for (path, method, op) in &ops {
        assert!(
            !op.tags.is_empty() && op.tags.iter().all(|t| tags.contains(t.as_str())),
            "{method} {path} has tags {:?}, not among {tags:?}",
            op.tags
        );
        let params = op.parameters(&spec).unwrap();
        let in_path: BTreeSet<String> = params
            .iter()
            .filter(|p| matches!(p.location, oas3::spec::ParameterIn::Path))
            .map(|p| p.name.clone())
            .collect();
        assert_eq!(in_path, template_params(path), "{method} {path}");

        let responses = op.responses(&spec);
        assert!(
            responses
                .keys()
                .any(|s| s.starts_with('2') || s.starts_with('3') || s == "101"),
            "{method} {path} has no success response"
        );
        for status in ["429", "500", "503"] {
            assert!(
                responses.contains_key(status),
                "{method} {path}: no {status}"
            );
        }
        // Errors are ErrorBody objects wherever they are JSON.
        let raw = &doc["paths"][path.as_str()][method.as_str().to_lowercase()]["responses"];
        for (status, response) in raw.as_object().unwrap() {
            let json = &response["content"]["application/json"]["schema"]["$ref"];
            if (status.starts_with('4') || status.starts_with('5')) && !json.is_null() {
                assert_eq!(
                    json, "#/components/schemas/ErrorBody",
                    "{method} {path} {status}"
                );
                json_errors += 1;
            }
        }
    }
    assert!(
        json_errors > 2 * ops.len(),
        "{json_errors} JSON error responses"
    );
}

#[tokio::test]
async fn every_documented_operation_is_routed_and_answers_a_documented_status() {
    let server = TestServer::spawn().await;
    let (text, doc) = server.document().await;
    let spec = oas3::from_json(&text).unwrap();
    if let Ok(path) = std::env::var("MOOR_OPENAPI_OUT") {
        std::fs::write(path, &text).unwrap();
    }

    // The check can fail: the router's own answers are recognised.
    let (status, body) = server.call(&Method::GET, "/api/v1/no-such-route").await;
    assert!(is_router_answer(status, &body), "{status} {body}");
    let (status, body) = server.call(&Method::GET, "/a/b/no-such-file").await;
    assert!(is_router_answer(status, &body), "{status} {body}");
    let (status, body) = server.call(&Method::DELETE, "/api/v1/me").await;
    assert!(is_router_answer(status, &body), "{status} {body}");

    let mut probed = 0;
    let mut checked = BTreeSet::new();
    for (path, item) in spec.paths.as_ref().unwrap() {
        let url = fill(path);
        let documented: BTreeSet<String> = item
            .methods()
            .into_iter()
            .map(|(m, _)| m.as_str().to_owned())
            .collect();
        for method in &METHODS {
            let (status, media, body) = server.answer(method, &url).await;
            let Some(op) = spec.operation(&method.as_str().parse().unwrap(), path) else {
                assert!(
                    is_router_answer(status, &body),
                    "{method} {url} is not documented but answered {status} {body}"
                );
                continue;
            };
            assert!(documented.contains(method.as_str()));
            assert!(
                !is_router_answer(status, &body),
                "{method} {path} is documented but not routed: {status} {body}"
            );
            let answered = status.as_str().to_owned();
            assert!(
                op.responses(&spec).contains_key(&answered),
                "{method} {url} answered {status}, which its description lacks: {body}"
            );
            probed += 1;
            if check_answer(&doc, method, path, status, &media, &body) {
                checked.insert(format!("{method} {path} {}", status.as_str()));
            }
        }
    }
    // Successful answers as well as errors were checked against their schemas.
    for answer in [
        "GET /healthz 200",
        "GET /api/v1/me 200",
        "GET /api/v1/sessions 200",
        "GET /app-config.json 200",
        "GET /api/v1/auth/setup 200",
        "POST /api/v1/auth/device 200",
        "GET /api/v1/sessions/{id} 404",
    ] {
        assert!(checked.contains(answer), "{answer} not in {checked:?}");
    }
    assert_eq!(probed, spec.operations().count());
    assert!(probed >= 43, "only {probed} operations probed");
}

/// Attaches a bridge to session `name` and stores `entries` through it.
async fn attach_bridge(server: &TestServer, name: &str, entries: Vec<NewEntry>) -> Ws {
    let ws = client::bridge_socket(server.addr, TOKEN).await;
    let last = entries.last().map(|e| e.producer_seq);
    let mut ws = client::handshake(ws, client::hello(name)).await.socket();
    send(&mut ws, &BridgeToServer::Entries { entries }).await;
    // Acks are cumulative: a batch with an agent.start is acked in two steps.
    while let Some(last) = last {
        match recv(&mut ws).await {
            ServerToBridge::Ack { producer_seq } if producer_seq == last => break,
            ServerToBridge::Ack { producer_seq } if producer_seq < last => {}
            other => panic!("expected an ack up to {last}, got {other:?}"),
        }
    }
    ws
}

async fn send(ws: &mut Ws, frame: &BridgeToServer) {
    ws.send(WsMessage::Text(
        serde_json::to_string(frame).unwrap().into(),
    ))
    .await
    .unwrap();
}

/// The next protocol frame, skipping heartbeats.
async fn recv(ws: &mut Ws) -> ServerToBridge {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a frame in time")
            .expect("an open socket")
            .unwrap();
        if let WsMessage::Text(t) = msg {
            let frame: ServerToBridge = serde_json::from_str(&t).unwrap();
            if frame != ServerToBridge::Heartbeat {
                return frame;
            }
        }
    }
}

#[tokio::test]
async fn answers_about_a_live_session_fit_their_documented_schemas() {
    let server = TestServer::spawn().await;
    let (_, doc) = server.document().await;
    let entry = |producer_seq, kind: &str, payload| NewEntry {
        producer_seq,
        ts: moor_protocol::now_ms(),
        kind: kind.into(),
        payload,
    };
    let _bridge = attach_bridge(
        &server,
        "probe",
        vec![
            entry(1, kinds::AGENT_START, json!({})),
            entry(2, kinds::AGENT_TEXT, json!({"text": "hello"})),
        ],
    )
    .await;
    let input =
        json!({"client_msg_id": "m1", "kind": kinds::INPUT_TEXT, "payload": {"text": "hi"}});
    let calls: [(Method, &str, &str, Option<Value>); 11] = [
        (Method::GET, "/api/v1/sessions", "/api/v1/sessions", None),
        (
            Method::POST,
            "/api/v1/sessions/{id}/inputs",
            "/api/v1/sessions/probe/inputs",
            Some(input),
        ),
        (
            Method::GET,
            "/api/v1/sessions/{id}",
            "/api/v1/sessions/probe",
            None,
        ),
        (
            Method::GET,
            "/api/v1/sessions/{id}/entries",
            "/api/v1/sessions/probe/entries?limit=2",
            None,
        ),
        (
            Method::GET,
            "/api/v1/sessions/{id}/recovery",
            "/api/v1/sessions/probe/recovery",
            None,
        ),
        (
            Method::GET,
            "/api/v1/sessions/{id}/transcript",
            "/api/v1/sessions/probe/transcript",
            None,
        ),
        (
            Method::GET,
            "/api/v1/sessions/{id}/checkpoints",
            "/api/v1/sessions/probe/checkpoints",
            None,
        ),
        (
            Method::POST,
            "/api/v1/sessions/{id}/share-links",
            "/api/v1/sessions/probe/share-links",
            Some(json!({"role": "viewer"})),
        ),
        (
            Method::GET,
            "/api/v1/sessions/{id}/share-links",
            "/api/v1/sessions/probe/share-links",
            None,
        ),
        (
            Method::GET,
            "/api/v1/sessions/{id}/members",
            "/api/v1/sessions/probe/members",
            None,
        ),
        (
            Method::GET,
            "/api/v1/sessions/{id}/entries",
            "/api/v1/sessions/probe/entries?after=x",
            None,
        ),
    ];
    for (method, template, url, body) in calls {
        let mut req = server
            .http
            .request(method.clone(), server.url(url))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let media = resp.headers()[reqwest::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned();
        let text = resp.text().await.unwrap();
        let expected = if url.ends_with("after=x") {
            StatusCode::BAD_REQUEST
        } else if method == Method::POST && template.ends_with("share-links") {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        assert_eq!(status, expected, "{method} {url}: {text}");
        assert!(
            check_answer(&doc, &method, template, status, &media, &text),
            "{method} {url} has no JSON schema"
        );
    }
}
