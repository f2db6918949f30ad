//! `FakeAnthropic`: a scripted Anthropic Messages API on 127.0.0.1, enough for the real Claude
//! Code CLI to run offline (`POST /v1/messages?beta=true`, streaming SSE or plain JSON).
//!
//! The script is in the prompt, so a test says what the model does by what it asks:
//! - `[[bash:CMD]]` → a short text, then a `Bash` tool call running CMD;
//! - `[[write:PATH:CONTENT]]` → a `Write` tool call (PATH absolute);
//! - `[[fail:STATUS]]` → every request of the turn is answered with that HTTP status (500, 529)
//!   and an Anthropic error body, so the CLI retries and then fails the turn;
//! - `[[stall]]` → the response starts, sends a few words, then goes silent (held open until
//!   the fake is dropped);
//! - after a tool result → "Tool finished. Result: <result text>";
//! - anything else → "Hello from the fake model.".
//!
//! Every request body is recorded so tests can check what the CLI sent (e.g. a recovery prompt).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::fake_model::{marker, FakeServer, Shared};

/// The running fake; shuts down (and releases held streams) when dropped.
#[derive(Debug)]
pub struct FakeAnthropic {
    server: FakeServer<Value>,
}

impl FakeAnthropic {
    /// Binds 127.0.0.1:0 and serves.
    pub async fn start() -> Self {
        let server = FakeServer::start(|shared| {
            Router::new()
                .route("/v1/messages", post(messages))
                .fallback(|| async { (axum::http::StatusCode::NOT_FOUND, "not faked") })
                .with_state(shared)
        })
        .await;
        Self { server }
    }

    /// `ANTHROPIC_BASE_URL` for the CLI.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr)
    }

    /// Every request body received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.server.requests()
    }

    /// The last user text of every request so far.
    pub fn prompts(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| last_user_text(r).unwrap_or_default())
            .collect()
    }
}

async fn messages(State(shared): State<Shared<Value>>, Json(req): Json<Value>) -> Response {
    shared.record(req.clone());
    let prompt = last_user_text(&req).unwrap_or_default();
    if let Some(status) = marker(&prompt, "[[fail:").and_then(|s| s.parse().ok()) {
        return api_error(status);
    }
    let reply = script(&req);
    if req.get("stream").and_then(Value::as_bool) != Some(true) {
        return Json(reply.message(&req)).into_response();
    }
    let frames = reply
        .events(&req)
        .into_iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    shared.sse(frames, reply.stall)
}

/// An Anthropic API error answer with `status` (529 is "overloaded").
fn api_error(status: u16) -> Response {
    let kind = match status {
        529 => "overloaded_error",
        _ => "api_error",
    };
    let body = json!({"type": "error", "error": {"type": kind, "message": format!("fake {kind}")}});
    let status = axum::http::StatusCode::from_u16(status)
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(body)).into_response()
}

/// What the fake model answers.
#[derive(Debug, Clone, Default)]
struct Reply {
    text: String,
    tool: Option<(String, Value)>,
    stall: bool,
}

fn script(req: &Value) -> Reply {
    if let Some(result) = last_tool_result(req) {
        return Reply {
            text: format!("Tool finished. Result: {result}"),
            ..Reply::default()
        };
    }
    let prompt = last_user_text(req).unwrap_or_default();
    if prompt.contains("[[stall]]") {
        return Reply {
            text: "Thinking about".into(),
            stall: true,
            ..Reply::default()
        };
    }
    if let Some(cmd) = marker(&prompt, "[[bash:") {
        return Reply {
            text: "I'll run a command.".into(),
            tool: Some((
                "Bash".into(),
                json!({"command": cmd, "description": "Run a command"}),
            )),
            ..Reply::default()
        };
    }
    if let Some(spec) = marker(&prompt, "[[write:") {
        let (path, content) = spec.split_once(':').unwrap_or((spec.as_str(), ""));
        return Reply {
            text: "I'll write a file.".into(),
            tool: Some((
                "Write".into(),
                json!({"file_path": path, "content": content}),
            )),
            ..Reply::default()
        };
    }
    Reply {
        text: "Hello from the fake model.".into(),
        ..Reply::default()
    }
}

fn last_user(req: &Value) -> Option<&Value> {
    req.get("messages")?
        .as_array()?
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
}

/// The last text block of the last user message.
pub fn last_user_text(req: &Value) -> Option<String> {
    let content = last_user(req)?.get("content")?;
    if let Some(text) = content.as_str() {
        return Some(text.to_owned());
    }
    content
        .as_array()?
        .iter()
        .rev()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .find(|t| !t.starts_with("<system-reminder>"))
        .map(str::to_owned)
}

fn last_tool_result(req: &Value) -> Option<String> {
    let blocks = last_user(req)?.get("content")?.as_array()?;
    let result = blocks
        .iter()
        .find(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))?;
    let prefix = if result.get("is_error").and_then(Value::as_bool) == Some(true) {
        "ERROR "
    } else {
        ""
    };
    let text = match result.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    };
    Some(format!("{prefix}{text}"))
}

impl Reply {
    fn message(&self, req: &Value) -> Value {
        let mut content = vec![json!({"type": "text", "text": self.text})];
        if let Some((name, input)) = &self.tool {
            content
                .push(json!({"type": "tool_use", "id": tool_id(), "name": name, "input": input}));
        }
        json!({
            "id": message_id(), "type": "message", "role": "assistant", "model": model(req),
            "content": content, "stop_reason": if self.tool.is_some() { "tool_use" } else { "end_turn" },
            "stop_sequence": null, "usage": {"input_tokens": 100, "output_tokens": 20},
        })
    }

    fn events(&self, req: &Value) -> Vec<(&'static str, String)> {
        let mut ev = vec![(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": message_id(), "type": "message", "role": "assistant", "model": model(req),
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 100, "output_tokens": 1}}}),
        )];
        ev.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ));
        for word in self.text.split_inclusive(' ') {
            ev.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word}}),
            ));
        }
        if self.stall {
            return ev.into_iter().map(|(n, v)| (n, v.to_string())).collect();
        }
        ev.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ));
        if let Some((name, input)) = &self.tool {
            ev.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": 1,
                "content_block": {"type": "tool_use", "id": tool_id(), "name": name, "input": {}}}),
            ));
            ev.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
            ));
            ev.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 1}),
            ));
        }
        let stop = if self.tool.is_some() {
            "tool_use"
        } else {
            "end_turn"
        };
        ev.push((
            "message_delta",
            json!({"type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 20}}),
        ));
        ev.push(("message_stop", json!({"type": "message_stop"})));
        ev.into_iter().map(|(n, v)| (n, v.to_string())).collect()
    }
}

fn model(req: &Value) -> Value {
    req.get("model").cloned().unwrap_or(json!("claude-fake"))
}

fn message_id() -> String {
    format!("msg_fake_{}", uuid::Uuid::new_v4().simple())
}

fn tool_id() -> String {
    format!(
        "toolu_fake_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..16]
    )
}
