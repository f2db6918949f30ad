//! `FakeGemini`: a scripted Gemini API (`generativelanguage` v1beta) on 127.0.0.1, enough for
//! the real Gemini CLI to run offline (`GOOGLE_GEMINI_BASE_URL`): `…:streamGenerateContent?alt=sse`
//! (SSE), `…:generateContent` and `…:countTokens`.
//!
//! The script is in the last user text, as for `FakeAnthropic`:
//! - `[[bash:CMD]]` → a `run_shell_command` function call running CMD;
//! - `[[stall]]` → the response starts, sends a few words, then goes silent (held open until the
//!   fake is dropped);
//! - after a function response → "Tool finished.";
//! - anything else → "Hello from the fake Gemini." plus, when an earlier user turn of the
//!   conversation contains `remember the word W`, "You asked me to remember W." (how a test sees
//!   that a loaded session carries its history).
//!
//! Every request body is recorded with its path.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::fake_model::{marker, remembered, FakeServer, Shared};

/// The running fake; shuts down (and releases held streams) when dropped.
#[derive(Debug)]
pub struct FakeGemini {
    server: FakeServer<(String, Value)>,
}

impl FakeGemini {
    /// Binds 127.0.0.1:0 and serves.
    pub async fn start() -> Self {
        let server =
            FakeServer::start(|shared| Router::new().fallback(handle).with_state(shared)).await;
        Self { server }
    }

    /// `GOOGLE_GEMINI_BASE_URL` for the CLI.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr)
    }

    /// Every request so far: (path, body).
    pub fn requests(&self) -> Vec<(String, Value)> {
        self.server.requests()
    }
}

async fn handle(State(shared): State<Shared<(String, Value)>>, uri: Uri, body: Bytes) -> Response {
    let path = uri.path().to_owned();
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    shared.record((path.clone(), req.clone()));
    if path.ends_with(":countTokens") {
        return Json(json!({"totalTokens": 42})).into_response();
    }
    let (parts, stall) = script(&req);
    if path.ends_with(":generateContent") {
        return Json(chunk(parts, true)).into_response();
    }
    if !path.ends_with(":streamGenerateContent") {
        return (axum::http::StatusCode::NOT_FOUND, "not faked").into_response();
    }
    let mut events: Vec<Value> = Vec::new();
    if stall {
        events.push(chunk(json!([{"text": "Let me think"}]), false));
    } else {
        // The text in two pieces, so the CLI streams deltas.
        let parts = parts.as_array().cloned().unwrap_or_default();
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            match part.get("text").and_then(Value::as_str) {
                Some(text) if text.len() > 8 => {
                    let (a, b) = text.split_at(text.len() / 2);
                    events.push(chunk(json!([{"text": a}]), false));
                    events.push(chunk(json!([{"text": b}]), last));
                }
                _ => events.push(chunk(json!([part]), last)),
            }
        }
    }
    let frames = events
        .into_iter()
        .map(|e| format!("data: {e}\r\n\r\n"))
        .collect();
    shared.sse(frames, stall)
}

/// One response chunk with `parts`; the last one says why the model stopped.
fn chunk(parts: Value, last: bool) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if last {
        candidate["finishReason"] = json!("STOP");
    }
    json!({
        "candidates": [candidate],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": "gemini-fake",
    })
}

/// The model's parts for `req`, and whether the stream stalls.
fn script(req: &Value) -> (Value, bool) {
    let contents = req
        .get("contents")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let last = contents.last().cloned().unwrap_or(Value::Null);
    let parts = last
        .get("parts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if parts.iter().any(|p| p.get("functionResponse").is_some()) {
        return (json!([{"text": "Tool finished."}]), false);
    }
    let text = texts(&last);
    if let Some(cmd) = marker(&text, "[[bash:") {
        let call = json!({"functionCall": {"name": "run_shell_command",
            "args": {"command": cmd, "description": "run a command"}}});
        return (json!([call]), false);
    }
    if text.contains("[[stall]]") {
        return (json!([]), true);
    }
    let mut reply = "Hello from the fake Gemini.".to_owned();
    let earlier = contents[..contents.len().saturating_sub(1)]
        .iter()
        .filter(|c| c.get("role").and_then(Value::as_str) == Some("user"))
        .find_map(|c| remembered(&texts(c)));
    if let Some(word) = earlier {
        reply.push_str(&format!(" You asked me to remember {word}."));
    }
    (json!([{ "text": reply }]), false)
}

fn texts(content: &Value) -> String {
    content
        .get("parts")
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}
