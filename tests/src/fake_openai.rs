//! `FakeOpenAi`: a scripted OpenAI Responses API (`POST /v1/responses`, SSE) on 127.0.0.1,
//! enough for Codex (through codex-acp) to run offline with a custom model provider.
//!
//! The script is in the last user message, as for `FakeAnthropic`:
//! - `[[bash:CMD]]` → an `exec_command` function call running CMD;
//! - `[[stall]]` → the response is created, then nothing more (held open until the fake is
//!   dropped);
//! - after a function call output → "Tool finished.";
//! - anything else → "Hello from the fake OpenAI." plus, when an earlier user message of the
//!   conversation contains `remember the word W`, " You asked me to remember W.".

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::fake_model::{marker, remembered, FakeServer, Shared};

/// The running fake; shuts down (and releases held streams) when dropped.
#[derive(Debug)]
pub struct FakeOpenAi {
    server: FakeServer<Value>,
}

/// The handlers' state: the fake's, and the number of the next response.
#[derive(Clone)]
struct OpenAiState {
    shared: Shared<Value>,
    next: Arc<AtomicU64>,
}

impl FakeOpenAi {
    /// Binds 127.0.0.1:0 and serves.
    pub async fn start() -> Self {
        let server = FakeServer::start(|shared| {
            Router::new().fallback(handle).with_state(OpenAiState {
                shared,
                next: Arc::new(AtomicU64::new(0)),
            })
        })
        .await;
        Self { server }
    }

    /// The provider's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr)
    }

    /// Every `POST /v1/responses` body so far.
    pub fn requests(&self) -> Vec<Value> {
        self.server.requests()
    }

    /// Whether the latest request so far holds `text` (in the conversation it sends).
    pub fn last_request_mentions(&self, text: &str) -> bool {
        self.requests()
            .last()
            .is_some_and(|r| r.to_string().contains(text))
    }
}

async fn handle(State(state): State<OpenAiState>, uri: Uri, body: Bytes) -> Response {
    if uri.path() != "/v1/responses" {
        return Json(json!({"models": [], "data": []})).into_response();
    }
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    state.shared.record(req.clone());
    let n = state.next.fetch_add(1, Ordering::Relaxed) + 1;
    let id = format!("resp_{n}");
    let mut events = vec![json!({"type": "response.created", "response": {"id": id}})];
    let stall = match script(&req, n) {
        None => true,
        Some(item) => {
            if let Some(text) = item["content"][0]["text"].as_str() {
                let mut added = item.clone();
                added["content"] = json!([]);
                events.push(
                    json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
                );
                let cut = text.len() / 2;
                for delta in [&text[..cut], &text[cut..]] {
                    events.push(
                        json!({"type": "response.output_text.delta", "item_id": item["id"],
                        "output_index": 0, "content_index": 0, "delta": delta}),
                    );
                }
            }
            events.push(
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            );
            events.push(
                json!({"type": "response.completed", "response": {"id": id, "usage": {
                "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 15}}}),
            );
            false
        }
    };
    let frames = events
        .into_iter()
        .map(|e| {
            let name = e["type"].as_str().unwrap_or_default();
            format!("event: {name}\ndata: {e}\n\n")
        })
        .collect();
    state.shared.sse(frames, stall)
}

/// The output item for `req`; `None` when the stream stalls.
fn script(req: &Value, n: u64) -> Option<Value> {
    let items = req["input"].as_array().cloned().unwrap_or_default();
    let last = items.last().cloned().unwrap_or(Value::Null);
    let message = |text: String| {
        json!({"type": "message", "role": "assistant", "id": format!("msg_{n}"),
            "content": [{"type": "output_text", "text": text}]})
    };
    if last["type"] == "function_call_output" {
        return Some(message("Tool finished.".into()));
    }
    let text = texts(&last);
    if let Some(cmd) = marker(&text, "[[bash:") {
        return Some(json!({"type": "function_call", "id": format!("fc_{n}"),
            "name": "exec_command", "arguments": json!({"cmd": cmd}).to_string(),
            "call_id": format!("call_{n}")}));
    }
    if text.contains("[[stall]]") {
        return None;
    }
    let mut reply = "Hello from the fake OpenAI.".to_owned();
    let earlier = items[..items.len().saturating_sub(1)]
        .iter()
        .filter(|i| i["role"] == "user")
        .find_map(|i| remembered(&texts(i)));
    if let Some(word) = earlier {
        reply.push_str(&format!(" You asked me to remember {word}."));
    }
    Some(message(reply))
}

fn texts(item: &Value) -> String {
    item["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}
