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

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// The running fake; shuts down (and releases held streams) when dropped.
#[derive(Debug)]
pub struct FakeOpenAi {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Value>>>,
    stop: CancellationToken,
}

#[derive(Clone)]
struct Shared {
    requests: Arc<Mutex<Vec<Value>>>,
    stop: CancellationToken,
    next: Arc<AtomicU64>,
}

impl FakeOpenAi {
    /// Binds 127.0.0.1:0 and serves.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake API");
        let addr = listener.local_addr().expect("local addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let shared = Shared {
            requests: requests.clone(),
            stop: stop.clone(),
            next: Arc::new(AtomicU64::new(0)),
        };
        let app = Router::new().fallback(handle).with_state(shared);
        let shutdown = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await;
        });
        Self {
            addr,
            requests,
            stop,
        }
    }

    /// The provider's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every `POST /v1/responses` body so far.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("requests lock").clone()
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn handle(State(shared): State<Shared>, uri: Uri, body: Bytes) -> Response {
    if uri.path() != "/v1/responses" {
        return Json(json!({"models": [], "data": []})).into_response();
    }
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    shared
        .requests
        .lock()
        .expect("requests lock")
        .push(req.clone());
    let n = shared.next.fetch_add(1, Ordering::Relaxed) + 1;
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
    let frames: Vec<Result<Bytes, Infallible>> = events
        .into_iter()
        .map(|e| {
            let name = e["type"].as_str().unwrap_or_default().to_owned();
            Ok(Bytes::from(format!("event: {name}\ndata: {e}\n\n")))
        })
        .collect();
    let head = stream::iter(frames);
    let body = if stall {
        let stop = shared.stop.clone();
        let hang = stream::once(async move {
            stop.cancelled().await;
            Ok::<Bytes, Infallible>(Bytes::new())
        });
        Body::from_stream(head.chain(hang))
    } else {
        Body::from_stream(head)
    };
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap_or_else(|_| Response::new(Body::empty()))
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
    if let Some(cmd) = between(&text, "[[bash:", "]]") {
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
        .find_map(|i| {
            let t = texts(i);
            let start = t.find("remember the word ")? + "remember the word ".len();
            let word: String = t[start..]
                .chars()
                .take_while(|c| c.is_alphanumeric())
                .collect();
            Some(word)
        });
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

fn between(text: &str, open: &str, close: &str) -> Option<String> {
    let start = text.find(open)? + open.len();
    let end = text[start..].find(close)? + start;
    Some(text[start..end].to_owned())
}
