//! Claude Code's stream-json output, one line at a time, mapped to typed log entries plus the
//! few facts the adapter acts on (its session id, a permission request, turn progress).
//!
//! Pure: no I/O, no clock, so the mapping is tested against recorded captures and benchmarked
//! per event. Nothing is dropped silently: an event type not modelled here becomes
//! `agent.event` with the raw event, a line that is not JSON becomes `agent.error`.

use moor_protocol::kinds;
use serde_json::{json, Map, Value};

use crate::spool::Draft;

/// Most characters of raw text kept in `agent.error` / `agent.event` / result text.
pub const RAW_CHARS: usize = 16 * 1024;

/// What one output line means for the adapter, besides its entries.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    /// The model is producing (a stream event, an assistant message, a request being made).
    Model,
    /// The agent is alive, but this says nothing about a turn (init, other system notices).
    Alive,
    /// The agent started a tool call.
    ToolStarted {
        /// `tool_use` id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// A tool call finished.
    ToolFinished {
        /// `tool_use` id.
        id: String,
    },
    /// The agent asks for permission; the adapter must answer this request id.
    Permission(PermissionRequest),
    /// The agent withdrew a permission request.
    PermissionCancelled {
        /// The request id.
        request_id: String,
    },
    /// The agent answered one of our control requests.
    ControlResponse {
        /// Our request id.
        request_id: String,
        /// The error, if it failed.
        error: Option<String>,
    },
    /// A control request the adapter cannot serve; it must answer with an error.
    UnsupportedControl {
        /// The request id.
        request_id: String,
        /// Its subtype.
        subtype: String,
    },
    /// The turn ended (`result`).
    TurnEnded {
        /// Whether it succeeded.
        success: bool,
    },
}

/// A pending `can_use_tool` request.
#[derive(Debug, Clone, PartialEq)]
pub struct PermissionRequest {
    /// Control request id, echoed in the answer.
    pub request_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// The tool input, sent back unchanged on allow.
    pub input: Value,
}

/// Entries and signals of one line.
#[derive(Debug, Default)]
pub struct Mapped {
    /// Entries to spool, in order.
    pub drafts: Vec<Draft>,
    /// What happened, for the watchdog and the control loop.
    pub signals: Vec<Signal>,
    /// The agent session id, when the line names one.
    pub session_id: Option<String>,
}

/// Maps lines; keeps the little state needed to avoid repeating the per-turn `init`.
#[derive(Debug, Default)]
pub struct Mapper {
    last_init: Option<Value>,
}

impl Mapper {
    /// A mapper at the start of a process's output.
    pub fn new() -> Self {
        Self::default()
    }

    /// Map one output line (without its newline).
    pub fn map_line(&mut self, line: &str) -> Mapped {
        let mut out = Mapped::default();
        if line.trim().is_empty() {
            return out;
        }
        let event: Value = match serde_json::from_str(line) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) | Err(_) => {
                let what = "Claude Code printed a line that is not a stream-json object";
                out.drafts.push(error(what, Some(line)));
                return out;
            }
        };
        out.session_id = str_of(&event, "session_id")
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        match str_of(&event, "type").unwrap_or_default() {
            "system" => self.system(&event, &mut out),
            "stream_event" => stream_event(&event, &mut out),
            "assistant" => assistant(&event, &mut out),
            "user" => user(&event, &mut out),
            "result" => result(&event, &mut out),
            "control_request" => control_request(&event, &mut out),
            "control_response" => control_response(&event, &mut out),
            "control_cancel_request" => {
                if let Some(id) = str_of(&event, "request_id") {
                    out.signals.push(Signal::PermissionCancelled {
                        request_id: id.to_owned(),
                    });
                }
            }
            _ => out.drafts.push(unknown(&event)),
        }
        out
    }

    fn system(&mut self, event: &Value, out: &mut Mapped) {
        match str_of(event, "subtype") {
            Some("init") => {
                let session = json!({
                    "agent_session_id": event.get("session_id"),
                    "model": event.get("model"),
                    "cwd": event.get("cwd"),
                    "tools": event.get("tools"),
                    "permission_mode": event.get("permissionMode"),
                    "version": event.get("claude_code_version"),
                });
                // In stream-json input mode every turn starts with the same init; log changes only.
                if self.last_init.as_ref() != Some(&session) {
                    out.drafts
                        .push(Draft::new(kinds::AGENT_SESSION, session.clone()));
                    self.last_init = Some(session);
                }
                out.signals.push(Signal::Alive);
            }
            Some("status") if str_of(event, "status") == Some("requesting") => {
                out.signals.push(Signal::Model)
            }
            Some("status") => out.signals.push(Signal::Alive),
            _ => {
                out.signals.push(Signal::Alive);
                out.drafts.push(unknown(event));
            }
        }
    }
}

fn stream_event(event: &Value, out: &mut Mapped) {
    out.signals.push(Signal::Model);
    let Some(inner) = event.get("event") else {
        return out.drafts.push(unknown(event));
    };
    let delta = inner.get("delta");
    if str_of(inner, "type") == Some("content_block_delta")
        && delta.and_then(|d| str_of(d, "type")) == Some("text_delta")
    {
        out.drafts.push(Draft::new(
            kinds::AGENT_TEXT_DELTA,
            json!({
                "message_id": event.get("api_message_id"),
                "index": inner.get("index"),
                "text": delta.and_then(|d| d.get("text")),
            }),
        ));
    }
    // Every other stream event (block starts and stops, tool input JSON, thinking deltas) is
    // repeated whole in the assistant message that follows; it only proves the model is alive.
}

fn assistant(event: &Value, out: &mut Mapped) {
    out.signals.push(Signal::Model);
    let message = event.get("message");
    let message_id = message.and_then(|m| m.get("id")).cloned();
    let parent = event.get("parent_tool_use_id").filter(|p| !p.is_null());
    let blocks = message
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array);
    for block in blocks.into_iter().flatten() {
        let mut payload = match str_of(block, "type").unwrap_or_default() {
            "text" => Draft::new(
                kinds::AGENT_TEXT,
                json!({"message_id": message_id, "text": block.get("text")}),
            ),
            "thinking" => Draft::new(
                kinds::AGENT_THINKING,
                json!({"message_id": message_id, "text": block.get("thinking")}),
            ),
            "tool_use" => {
                let id = str_of(block, "id").unwrap_or_default().to_owned();
                let name = str_of(block, "name").unwrap_or_default().to_owned();
                let input = block.get("input").cloned().unwrap_or(Value::Null);
                out.signals.push(Signal::ToolStarted {
                    id: id.clone(),
                    name: name.clone(),
                });
                if name == "TodoWrite" {
                    if let Some(todos) = input.get("todos") {
                        out.drafts
                            .push(Draft::new(kinds::AGENT_TODOS, json!({ "todos": todos })));
                    }
                }
                Draft::new(
                    kinds::AGENT_TOOL_USE,
                    json!({"id": id, "name": name, "path": file_path(&input), "input": input}),
                )
            }
            _ => unknown(block),
        };
        if let (Some(parent), Value::Object(map)) = (parent, &mut payload.payload) {
            map.insert("parent_tool_use_id".into(), parent.clone());
        }
        out.drafts.push(payload);
    }
}

fn user(event: &Value, out: &mut Mapped) {
    let content = event.get("message").and_then(|m| m.get("content"));
    if let Some(text) = content.and_then(Value::as_str) {
        out.drafts
            .push(Draft::new(kinds::AGENT_USER, json!({ "text": text })));
        return;
    }
    for block in content.and_then(Value::as_array).into_iter().flatten() {
        match str_of(block, "type").unwrap_or_default() {
            "tool_result" => {
                let id = str_of(block, "tool_use_id").unwrap_or_default().to_owned();
                let (summary, bytes, truncated) = summarize(block.get("content"));
                out.signals.push(Signal::ToolFinished { id: id.clone() });
                out.drafts.push(Draft::new(
                    kinds::AGENT_TOOL_RESULT,
                    json!({
                        "tool_use_id": id,
                        "is_error": block.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                        "summary": summary, "bytes": bytes, "truncated": truncated,
                    }),
                ));
            }
            "text" => out.drafts.push(Draft::new(
                kinds::AGENT_USER,
                json!({ "text": block.get("text") }),
            )),
            _ => out.drafts.push(unknown(block)),
        }
    }
}

fn result(event: &Value, out: &mut Mapped) {
    let is_error = event
        .get("is_error")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    out.signals.push(Signal::TurnEnded { success: !is_error });
    let denials = event
        .get("permission_denials")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let text = str_of(event, "result").map(|r| bounded(r, RAW_CHARS).0);
    out.drafts.push(Draft::new(
        kinds::AGENT_RESULT,
        json!({
            "subtype": event.get("subtype"),
            "is_error": is_error,
            "duration_ms": event.get("duration_ms"),
            "duration_api_ms": event.get("duration_api_ms"),
            "num_turns": event.get("num_turns"),
            "cost_usd": event.get("total_cost_usd"),
            "result": text,
            "errors": event.get("errors"),
            "terminal_reason": event.get("terminal_reason"),
            "agent_session_id": event.get("session_id"),
            "permission_denials": denials,
        }),
    ));
}

fn control_request(event: &Value, out: &mut Mapped) {
    let request_id = str_of(event, "request_id").unwrap_or_default().to_owned();
    let request = event.get("request").cloned().unwrap_or(Value::Null);
    let subtype = str_of(&request, "subtype").unwrap_or_default().to_owned();
    if subtype != "can_use_tool" || request_id.is_empty() {
        out.drafts.push(unknown(event));
        out.signals.push(Signal::UnsupportedControl {
            request_id,
            subtype,
        });
        return;
    }
    let input = request.get("input").cloned().unwrap_or(json!({}));
    let tool_name = str_of(&request, "tool_name").unwrap_or_default().to_owned();
    out.drafts.push(Draft::new(
        kinds::AGENT_PERMISSION_REQUEST,
        json!({
            "request_id": request_id,
            "tool_name": tool_name,
            "tool_use_id": request.get("tool_use_id"),
            "input": input,
            "path": file_path(&input).or_else(|| str_of(&request, "blocked_path").map(str::to_owned)),
            "description": request.get("description"),
        }),
    ));
    out.signals.push(Signal::Permission(PermissionRequest {
        request_id,
        tool_name,
        input,
    }));
}

fn control_response(event: &Value, out: &mut Mapped) {
    let response = event.get("response");
    let request_id = response
        .and_then(|r| str_of(r, "request_id"))
        .unwrap_or_default()
        .to_owned();
    let error = match response.and_then(|r| str_of(r, "subtype")) {
        Some("success") => None,
        _ => Some(
            response
                .and_then(|r| str_of(r, "error"))
                .unwrap_or("control request failed")
                .to_owned(),
        ),
    };
    out.signals
        .push(Signal::ControlResponse { request_id, error });
}

/// The path a file tool works on.
fn file_path(input: &Value) -> Option<String> {
    ["file_path", "notebook_path"]
        .iter()
        .find_map(|k| str_of(input, k))
        .map(str::to_owned)
}

/// A tool result's text, bounded: (summary, full size in bytes, truncated).
fn summarize(content: Option<&Value>) -> (String, usize, bool) {
    let text = match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|b| match str_of(b, "type") {
                Some("text") => str_of(b, "text").unwrap_or_default().to_owned(),
                Some(other) => format!("[{other}]"),
                None => String::new(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let (summary, truncated) = bounded(&text, kinds::TOOL_RESULT_SUMMARY_CHARS);
    (summary, text.len(), truncated)
}

/// At most `max` characters of `text`.
fn bounded(text: &str, max: usize) -> (String, bool) {
    match text.char_indices().nth(max) {
        Some((cut, _)) => (text[..cut].to_owned(), true),
        None => (text.to_owned(), false),
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// An event kept as it came (bounded), for types nobody modelled.
fn unknown(event: &Value) -> Draft {
    let raw = event.to_string();
    let raw = if raw.len() > RAW_CHARS {
        Value::String(bounded(&raw, RAW_CHARS).0)
    } else {
        event.clone()
    };
    let mut payload = Map::new();
    payload.insert(
        "type".into(),
        event.get("type").cloned().unwrap_or(Value::Null),
    );
    payload.insert(
        "subtype".into(),
        event.get("subtype").cloned().unwrap_or(Value::Null),
    );
    payload.insert("raw".into(), raw);
    Draft::new(kinds::AGENT_EVENT, Value::Object(payload))
}

/// An `agent.error` entry.
pub fn error(message: &str, line: Option<&str>) -> Draft {
    Draft::new(
        kinds::AGENT_ERROR,
        json!({ "message": message, "line": line.map(|l| bounded(l, RAW_CHARS).0) }),
    )
}

#[cfg(test)]
#[path = "map_tests.rs"]
mod tests;
