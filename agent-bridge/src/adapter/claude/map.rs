//! Claude Code's stream-json output, one line at a time, mapped to typed log entries plus the
//! few facts the adapter acts on (its session id, a permission request, turn progress).
//!
//! Pure: no I/O, no clock, so the mapping is tested against recorded captures and benchmarked
//! per event. Nothing is dropped silently: an event type not modelled here becomes
//! `agent.event` with the raw event, a line that is not JSON becomes `agent.error`.

use moor_protocol::kinds;
use moor_protocol::payload::{
    AgentError, AgentEvent, AgentPermissionRequest, AgentResult, AgentSession, AgentText,
    AgentTextDelta, AgentThinking, AgentTodos, AgentToolResult, AgentToolUse, AgentUser, Todo,
};
use serde::Deserialize;
use serde_json::{Map, Value};

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
    last_init: Option<AgentSession>,
    /// Model API retries in the current turn.
    retries: u32,
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
            "result" => {
                result(&event, self.retries, &mut out);
                self.retries = 0;
            }
            "control_request" => control_request(&event, &mut out),
            "control_response" => control_response(&event, &mut out),
            "control_cancel_request" => {
                if let Some(id) = str_of(&event, "request_id") {
                    out.signals.push(Signal::PermissionCancelled {
                        request_id: id.to_owned(),
                    });
                }
            }
            _ => out.drafts.push(unknown(&event, None)),
        }
        out
    }

    fn system(&mut self, event: &Value, out: &mut Mapped) {
        match str_of(event, "subtype") {
            Some("init") => {
                let session = AgentSession {
                    agent_session_id: string(event, "session_id"),
                    model: string(event, "model"),
                    cwd: string(event, "cwd"),
                    tools: event
                        .get("tools")
                        .and_then(|t| Vec::<String>::deserialize(t).ok()),
                    permission_mode: string(event, "permissionMode"),
                    version: string(event, "claude_code_version"),
                };
                // In stream-json input mode every turn starts with the same init; log changes only.
                if self.last_init.as_ref() != Some(&session) {
                    out.drafts.push(Draft::new(session.clone()));
                    self.last_init = Some(session);
                }
                out.signals.push(Signal::Alive);
            }
            Some("status") if str_of(event, "status") == Some("requesting") => {
                out.signals.push(Signal::Model)
            }
            Some("status") => out.signals.push(Signal::Alive),
            Some("api_retry") => {
                out.signals.push(Signal::Alive);
                out.drafts.push(self.api_retry(event));
            }
            _ => {
                out.signals.push(Signal::Alive);
                out.drafts.push(unknown(event, None));
            }
        }
    }
}

impl Mapper {
    /// `system/api_retry`: the model API failed and Claude Code tries again.
    fn api_retry(&mut self, event: &Value) -> Draft {
        let number = |key| event.get(key).and_then(Value::as_u64);
        let attempt = number("attempt").and_then(|n| u32::try_from(n).ok());
        self.retries = attempt.unwrap_or(self.retries.saturating_add(1));
        let status = number("error_status").and_then(|n| u16::try_from(n).ok());
        let what = match event.get("error") {
            Some(Value::String(e)) => e.clone(),
            Some(e) if !e.is_null() => {
                str_of(e, "message").map_or_else(|| e.to_string(), str::to_owned)
            }
            _ => "no answer".into(),
        };
        let status_text = status.map_or(String::new(), |s| format!(" {s}"));
        let of = number("max_retries").map_or(String::new(), |m| format!(" of {m}"));
        let delay = number("retry_delay_ms").unwrap_or(0) as f64 / 1000.0;
        let message = format!(
            "model API error{status_text} ({}); retry {}{of} in {delay:.1} s",
            bounded(&what, 200).0,
            self.retries
        );
        Draft::new(AgentError {
            message,
            reason: Some("api_retry".into()),
            retries: Some(self.retries),
            status,
            ..AgentError::default()
        })
    }
}

/// Whether a turn's terminal reason says a person stopped it (not an error of the agent).
pub(super) fn interrupted(terminal_reason: Option<&str>) -> bool {
    matches!(terminal_reason, Some("aborted_streaming" | "aborted_tools"))
}

/// Why a failed turn failed: its terminal reason, else its subtype.
pub(super) fn failure_reason<'a>(
    terminal_reason: Option<&'a str>,
    subtype: Option<&'a str>,
) -> &'a str {
    terminal_reason
        .filter(|t| *t != "completed")
        .or(subtype)
        .unwrap_or("error")
}

/// The `agent.error` of a failed turn, unless a person interrupted it.
fn turn_error(event: &Value, retries: u32) -> Option<Draft> {
    let terminal = str_of(event, "terminal_reason");
    if interrupted(terminal) {
        return None;
    }
    let reason = failure_reason(terminal, str_of(event, "subtype"));
    let errors: Vec<String> = event
        .get("errors")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .take(3)
                .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let detail = match (errors.is_empty(), str_of(event, "result")) {
        (false, _) => errors.join("; "),
        (true, Some(text)) => text.to_owned(),
        (true, None) => "no reason given".into(),
    };
    let after = match retries {
        0 => String::new(),
        n => format!(" after {n} model API retries"),
    };
    Some(Draft::new(AgentError {
        message: format!(
            "Claude Code turn failed ({reason}){after}: {}",
            bounded(&detail, RAW_CHARS).0
        ),
        reason: Some(reason.to_owned()),
        retries: (retries > 0).then_some(retries),
        ..AgentError::default()
    }))
}

fn stream_event(event: &Value, out: &mut Mapped) {
    out.signals.push(Signal::Model);
    let Some(inner) = event.get("event") else {
        return out.drafts.push(unknown(event, None));
    };
    let delta = inner.get("delta");
    if str_of(inner, "type") == Some("content_block_delta")
        && delta.and_then(|d| str_of(d, "type")) == Some("text_delta")
    {
        out.drafts.push(Draft::new(AgentTextDelta {
            message_id: string(event, "api_message_id"),
            index: inner
                .get("index")
                .and_then(Value::as_u64)
                .and_then(|i| u32::try_from(i).ok()),
            text: delta.and_then(|d| string(d, "text")).unwrap_or_default(),
        }));
    }
    // Every other stream event (block starts and stops, tool input JSON, thinking deltas) is
    // repeated whole in the assistant message that follows; it only proves the model is alive.
}

fn assistant(event: &Value, out: &mut Mapped) {
    out.signals.push(Signal::Model);
    let message = event.get("message");
    let message_id = message.and_then(|m| string(m, "id"));
    let parent = string(event, "parent_tool_use_id");
    let blocks = message
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array);
    for block in blocks.into_iter().flatten() {
        let draft = match str_of(block, "type").unwrap_or_default() {
            "text" => Draft::new(AgentText {
                message_id: message_id.clone(),
                text: string(block, "text").unwrap_or_default(),
                parent_tool_use_id: parent.clone(),
            }),
            "thinking" => Draft::new(AgentThinking {
                message_id: message_id.clone(),
                text: string(block, "thinking").unwrap_or_default(),
                parent_tool_use_id: parent.clone(),
            }),
            "tool_use" => {
                let id = str_of(block, "id").unwrap_or_default().to_owned();
                let name = str_of(block, "name").unwrap_or_default().to_owned();
                let input = block.get("input").cloned().unwrap_or(Value::Null);
                out.signals.push(Signal::ToolStarted {
                    id: id.clone(),
                    name: name.clone(),
                });
                if name == "TodoWrite" {
                    let todos = input.get("todos").map(Vec::<Todo>::deserialize);
                    if let Some(Ok(todos)) = todos {
                        out.drafts.push(Draft::new(AgentTodos { todos }));
                    }
                }
                Draft::new(AgentToolUse {
                    id,
                    name,
                    path: file_path(&input),
                    input,
                    parent_tool_use_id: parent.clone(),
                })
            }
            _ => unknown(block, parent.clone()),
        };
        out.drafts.push(draft);
    }
}

fn user(event: &Value, out: &mut Mapped) {
    let content = event.get("message").and_then(|m| m.get("content"));
    if let Some(text) = content.and_then(Value::as_str) {
        out.drafts.push(Draft::new(AgentUser {
            text: text.to_owned(),
            source: None,
        }));
        return;
    }
    for block in content.and_then(Value::as_array).into_iter().flatten() {
        match str_of(block, "type").unwrap_or_default() {
            "tool_result" => {
                let id = str_of(block, "tool_use_id").unwrap_or_default().to_owned();
                let (summary, bytes, truncated) = summarize(block.get("content"));
                out.signals.push(Signal::ToolFinished { id: id.clone() });
                out.drafts.push(Draft::new(AgentToolResult {
                    tool_use_id: id,
                    is_error: block
                        .get("is_error")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    summary,
                    bytes: bytes as u64,
                    truncated,
                }));
            }
            "text" => out.drafts.push(Draft::new(AgentUser {
                text: string(block, "text").unwrap_or_default(),
                source: None,
            })),
            _ => out.drafts.push(unknown(block, None)),
        }
    }
}

fn result(event: &Value, retries: u32, out: &mut Mapped) {
    let is_error = event
        .get("is_error")
        .and_then(Value::as_bool)
        .unwrap_or(true)
        || str_of(event, "subtype").is_some_and(|s| s.starts_with("error"));
    out.signals.push(Signal::TurnEnded { success: !is_error });
    let denials = event
        .get("permission_denials")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let text = str_of(event, "result").map(|r| bounded(r, RAW_CHARS).0);
    let number = |key| event.get(key).and_then(Value::as_u64);
    out.drafts.push(Draft::new(AgentResult {
        subtype: string(event, "subtype"),
        is_error,
        duration_ms: number("duration_ms"),
        duration_api_ms: number("duration_api_ms"),
        num_turns: number("num_turns").and_then(|n| u32::try_from(n).ok()),
        cost_usd: event.get("total_cost_usd").and_then(Value::as_f64),
        result: text,
        errors: event.get("errors").cloned(),
        terminal_reason: string(event, "terminal_reason"),
        agent_session_id: string(event, "session_id"),
        permission_denials: u32::try_from(denials).unwrap_or(u32::MAX),
    }));
    if is_error {
        out.drafts.extend(turn_error(event, retries));
    }
}

fn control_request(event: &Value, out: &mut Mapped) {
    let request_id = str_of(event, "request_id").unwrap_or_default().to_owned();
    let request = event.get("request").cloned().unwrap_or(Value::Null);
    let subtype = str_of(&request, "subtype").unwrap_or_default().to_owned();
    if subtype != "can_use_tool" || request_id.is_empty() {
        out.drafts.push(unknown(event, None));
        out.signals.push(Signal::UnsupportedControl {
            request_id,
            subtype,
        });
        return;
    }
    let input = request
        .get("input")
        .cloned()
        .unwrap_or(Value::Object(Map::new()));
    let tool_name = str_of(&request, "tool_name").unwrap_or_default().to_owned();
    out.drafts.push(Draft::new(AgentPermissionRequest {
        request_id: request_id.clone(),
        tool_name: tool_name.clone(),
        tool_use_id: string(&request, "tool_use_id"),
        input: input.clone(),
        path: file_path(&input).or_else(|| string(&request, "blocked_path")),
        description: string(&request, "description"),
    }));
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
pub(crate) fn bounded(text: &str, max: usize) -> (String, bool) {
    match text.char_indices().nth(max) {
        Some((cut, _)) => (text[..cut].to_owned(), true),
        None => (text.to_owned(), false),
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn string(v: &Value, key: &str) -> Option<String> {
    str_of(v, key).map(str::to_owned)
}

/// An event kept as it came (bounded), for types nobody modelled; `parent` is the tool call
/// (a subagent) it came under.
fn unknown(event: &Value, parent: Option<String>) -> Draft {
    raw_event(
        string(event, "type"),
        string(event, "subtype"),
        event,
        parent,
    )
}

/// An `agent.event` keeping `event` (bounded) under the given type and subtype: what an agent's
/// protocol says that the entry vocabulary has no kind for.
pub(crate) fn raw_event(
    event_type: Option<String>,
    subtype: Option<String>,
    event: &Value,
    parent: Option<String>,
) -> Draft {
    let raw = event.to_string();
    let raw = if raw.len() > RAW_CHARS {
        Value::String(bounded(&raw, RAW_CHARS).0)
    } else {
        event.clone()
    };
    Draft::new(AgentEvent {
        event_type,
        subtype,
        raw,
        parent_tool_use_id: parent,
    })
}

/// An `agent.error` entry.
pub fn error(message: &str, line: Option<&str>) -> Draft {
    Draft::new(AgentError {
        message: message.to_owned(),
        line: line.map(|l| bounded(l, RAW_CHARS).0),
        ..AgentError::default()
    })
}

#[cfg(test)]
#[path = "map_tests.rs"]
mod tests;
