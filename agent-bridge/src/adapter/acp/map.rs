//! What an ACP agent says, mapped to the typed entries Claude Code's output maps to, plus the
//! watchdog signals ([`Signal`], shared with the `claude` adapter).
//!
//! Pure: no I/O, no clock, so captured streams are replayed through it in tests and benches.
//! `session/update` notifications become text deltas (and the final text of each message),
//! thinking, tool calls and results, and todos; what has no entry kind (available commands,
//! mode changes, anything newer than this mapping) is kept as `agent.event` with type `acp`.

use std::collections::BTreeMap;

use moor_protocol::kinds;
use moor_protocol::payload::{
    AgentPermissionRequest, AgentResult, AgentText, AgentTextDelta, AgentThinking, AgentTodos,
    AgentToolResult, AgentToolUse, AgentUser, Todo,
};
use serde_json::{json, Value};

use crate::adapter::claude::map::{
    bounded, error, raw_event, PermissionRequest, Signal, RAW_CHARS,
};
use crate::spool::Draft;

/// Most tool calls tracked at once; beyond, the oldest is forgotten (its result still logs).
const MAX_TOOLS: usize = 1024;
/// Most plan entries kept.
const MAX_TODOS: usize = 256;

/// Entries and signals of one message.
#[derive(Debug, Default)]
pub struct Mapped {
    /// Entries to spool, in order.
    pub drafts: Vec<Draft>,
    /// What happened, for the watchdog.
    pub signals: Vec<Signal>,
}

impl Mapped {
    /// The tool call `id` ended with the output `text`: the watchdog's signal and the call's
    /// `agent.tool_result`, its summary bounded.
    pub(crate) fn tool_result(&mut self, id: String, is_error: bool, text: &str) {
        let (summary, truncated) = bounded(text, kinds::TOOL_RESULT_SUMMARY_CHARS);
        self.signals.push(Signal::ToolFinished { id: id.clone() });
        self.drafts.push(Draft::new(AgentToolResult {
            tool_use_id: id,
            is_error,
            summary,
            bytes: text.len() as u64,
            truncated,
        }));
    }
}

/// A permission request waiting for a decision: the agent's JSON-RPC id and its options.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    /// The JSON-RPC id to answer.
    pub rpc_id: Value,
    /// `(optionId, kind)` of each option offered.
    pub options: Vec<(String, String)>,
}

impl Pending {
    /// The option that answers `allow` (allow once, never "always": a person approved this one
    /// call), or `deny` (reject once, else reject always). `None`: answer "cancelled".
    pub fn option_for(&self, allow: bool) -> Option<&str> {
        let wanted: &[&str] = match allow {
            true => &["allow_once"],
            false => &["reject_once", "reject_always"],
        };
        wanted.iter().find_map(|kind| {
            self.options
                .iter()
                .find(|(_, k)| k == kind)
                .map(|(id, _)| id.as_str())
        })
    }
}

/// Maps one session's messages; keeps the text of the message being streamed and the tool
/// calls that have started.
#[derive(Debug, Default)]
pub struct Mapper {
    turn: u64,
    segment: u64,
    text: String,
    thought: String,
    /// Tool calls started and not finished: id → name.
    tools: BTreeMap<String, String>,
    /// Updates replayed by `session/load` (history already logged by the earlier run).
    replayed: u64,
    /// `session/load` is replaying history.
    pub replaying: bool,
    /// The agent replays history after answering `session/load` and ends it with
    /// `available_commands_update` (Gemini CLI 0.61) instead of before answering (the protocol).
    pub replay_ends_with_commands: bool,
}

impl Mapper {
    /// A mapper before the first turn.
    pub fn new() -> Self {
        Self::default()
    }

    fn message_id(&self) -> String {
        format!("acp-{}-{}", self.turn, self.segment)
    }

    /// A prompt was sent: a new turn starts.
    pub fn turn_started(&mut self) {
        self.turn += 1;
        self.segment = 0;
        self.text.clear();
        self.thought.clear();
    }

    /// The final text of the message streamed so far, and of the thinking, if any.
    fn flush(&mut self, out: &mut Mapped) {
        if !self.thought.is_empty() {
            let text = std::mem::take(&mut self.thought);
            out.drafts.push(Draft::new(AgentThinking {
                message_id: Some(self.message_id()),
                text,
                parent_tool_use_id: None,
            }));
        }
        if !self.text.is_empty() {
            let text = std::mem::take(&mut self.text);
            out.drafts.push(Draft::new(AgentText {
                message_id: Some(self.message_id()),
                text,
                parent_tool_use_id: None,
            }));
            self.segment += 1;
        }
    }

    /// A `session/update` notification's params.
    pub fn update(&mut self, params: &Value) -> Mapped {
        let mut out = Mapped::default();
        let update = params.get("update").unwrap_or(&Value::Null);
        let kind = str_of(update, "sessionUpdate").unwrap_or_default();
        if self.replaying {
            out.signals.push(Signal::Alive);
            if kind == "available_commands_update" && self.replay_ends_with_commands {
                self.replaying = false;
                out.drafts.extend(self.replay_summary());
                out.drafts.push(acp_event(kind, update));
            } else {
                self.replayed += 1;
            }
            return out;
        }
        match kind {
            "agent_message_chunk" => {
                out.signals.push(Signal::Model);
                if !self.thought.is_empty() {
                    self.flush(&mut out);
                }
                let text = content_text(update.get("content"));
                push_bounded(&mut self.text, &text);
                out.drafts.push(Draft::new(AgentTextDelta {
                    message_id: Some(self.message_id()),
                    index: None,
                    text,
                }));
            }
            "agent_thought_chunk" => {
                out.signals.push(Signal::Model);
                let text = content_text(update.get("content"));
                push_bounded(&mut self.thought, &text);
            }
            "user_message_chunk" => {
                out.signals.push(Signal::Alive);
                out.drafts.push(Draft::new(AgentUser {
                    text: content_text(update.get("content")),
                    source: Some("acp".into()),
                }));
            }
            "tool_call" => {
                out.signals.push(Signal::Model);
                self.flush(&mut out);
                self.tool_call(update, &mut out);
                self.tool_status(update, &mut out);
            }
            "tool_call_update" => {
                out.signals.push(Signal::Model);
                let id = str_of(update, "toolCallId").unwrap_or_default();
                if !self.tools.contains_key(id) && status_of(update) == Some("in_progress") {
                    self.flush(&mut out);
                    self.tool_call(update, &mut out);
                }
                self.tool_status(update, &mut out);
            }
            "plan" => {
                out.signals.push(Signal::Model);
                let todos = update
                    .get("entries")
                    .and_then(Value::as_array)
                    .map(|entries| {
                        entries
                            .iter()
                            .take(MAX_TODOS)
                            .map(|e| Todo {
                                content: str_of(e, "content").unwrap_or_default().to_owned(),
                                status: str_of(e, "status").unwrap_or("pending").to_owned(),
                                active_form: None,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                out.drafts.push(Draft::new(AgentTodos { todos }));
            }
            other => {
                out.signals.push(Signal::Alive);
                out.drafts.push(acp_event(other, update));
            }
        }
        out
    }

    /// `session/load` was answered: unless the agent replays after answering, the replay is
    /// over, logged as one entry saying how much history the agent replayed (the history itself
    /// is in the log already, from the run that lived it).
    pub fn replay_done(&mut self) -> Option<Draft> {
        if self.replay_ends_with_commands {
            return None;
        }
        self.replaying = false;
        self.replay_summary()
    }

    fn replay_summary(&mut self) -> Option<Draft> {
        let n = std::mem::take(&mut self.replayed);
        (n > 0).then(|| acp_event("history_replayed", &json!({"updates": n})))
    }

    /// Records the start of a tool call, once per id.
    fn tool_call(&mut self, call: &Value, out: &mut Mapped) {
        let id = str_of(call, "toolCallId").unwrap_or_default().to_owned();
        if self.tools.contains_key(&id) {
            return;
        }
        if self.tools.len() >= MAX_TOOLS {
            self.tools.pop_first();
        }
        let (name, input, path) = describe(call);
        self.tools.insert(id.clone(), name.clone());
        out.signals.push(Signal::ToolStarted {
            id: id.clone(),
            name: name.clone(),
        });
        out.drafts.push(Draft::new(AgentToolUse {
            id,
            name,
            path,
            input,
            parent_tool_use_id: None,
        }));
    }

    /// A finished tool call's result.
    fn tool_status(&mut self, call: &Value, out: &mut Mapped) {
        let is_error = match status_of(call) {
            Some("completed") => false,
            Some("failed") => true,
            _ => return,
        };
        let id = str_of(call, "toolCallId").unwrap_or_default().to_owned();
        if self.tools.remove(&id).is_none() {
            // A result for a call never announced: announce it so the result has its call.
            self.tool_call(call, out);
            self.tools.remove(&id);
        }
        let text = tool_output(call);
        out.tool_result(id, is_error, &text);
    }

    /// A `session/request_permission` request: its entry (after the tool call's, when the agent
    /// asks before announcing the call), and what the adapter keeps to answer it.
    pub fn permission(
        &mut self,
        rpc_id: &Value,
        params: &Value,
    ) -> (Mapped, PermissionRequest, Pending) {
        let mut out = Mapped::default();
        self.flush(&mut out);
        let call = params.get("toolCall").unwrap_or(&Value::Null);
        let tool_use_id = str_of(call, "toolCallId").map(str::to_owned);
        // Gemini CLI asks before it announces the call: announce it first, as Claude Code does.
        if tool_use_id.is_some() {
            self.tool_call(call, &mut out);
        }
        let known = tool_use_id
            .as_ref()
            .and_then(|id| self.tools.get(id).cloned());
        let (name, input, path) = describe(call);
        let tool_name = known.unwrap_or(name);
        let request_id = request_id(rpc_id);
        let options = params
            .get("options")
            .and_then(Value::as_array)
            .map(|o| {
                o.iter()
                    .take(16)
                    .map(|o| {
                        let s = |k| str_of(o, k).unwrap_or_default().to_owned();
                        (s("optionId"), s("kind"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.drafts.push(Draft::new(AgentPermissionRequest {
            request_id: request_id.clone(),
            tool_name: tool_name.clone(),
            tool_use_id,
            input: input.clone(),
            path,
            description: str_of(call, "title").map(str::to_owned),
        }));
        let request = PermissionRequest {
            request_id,
            tool_name,
            input,
        };
        out.signals.push(Signal::Permission(request.clone()));
        let pending = Pending {
            rpc_id: rpc_id.clone(),
            options,
        };
        (out, request, pending)
    }

    /// The answer to `session/prompt`: the turn's result, its final text, and a result for every
    /// tool call the agent started in it and never finished (so none stays open in the log).
    pub fn turn_ended(
        &mut self,
        outcome: &Result<Value, String>,
        session_id: Option<&str>,
    ) -> Mapped {
        let mut out = Mapped::default();
        let stop = match outcome {
            Ok(result) => str_of(result, "stopReason")
                .unwrap_or("end_turn")
                .to_owned(),
            Err(_) => "error".to_owned(),
        };
        let had_tools = !self.tools.is_empty();
        for (id, _) in std::mem::take(&mut self.tools) {
            let why = format!("the agent ended its turn ({stop}) without this call's result");
            out.tool_result(id, true, &why);
        }
        self.flush(&mut out);
        let (is_error, terminal) = match stop.as_str() {
            "end_turn" => (false, "completed"),
            // The words the fold and the renderer already read as "a person stopped it".
            "cancelled" if had_tools => (true, "aborted_tools"),
            "cancelled" => (true, "aborted_streaming"),
            other => (true, other),
        };
        out.signals.push(Signal::TurnEnded { success: !is_error });
        out.drafts.push(Draft::new(AgentResult {
            subtype: Some(stop.clone()),
            is_error,
            terminal_reason: Some(terminal.to_owned()),
            agent_session_id: session_id.map(str::to_owned),
            ..AgentResult::default()
        }));
        if let Ok(result) = outcome {
            if let Some(meta) = result.get("_meta").filter(|m| !m.is_null()) {
                // Usage and quota as the agent reports them: no entry kind has their shape.
                out.drafts.push(acp_event("prompt_result_meta", meta));
            }
        }
        if let Err(e) = outcome {
            out.drafts.push(error(
                &format!("the agent's turn failed: {}", bounded(e, RAW_CHARS).0),
                None,
            ));
        } else if is_error && !terminal.starts_with("aborted") {
            out.drafts
                .push(error(&format!("the agent stopped its turn: {stop}"), None));
        }
        out
    }
}

/// The log's name for an agent's JSON-RPC request id (`0`, `"abc"`).
pub fn request_id(rpc_id: &Value) -> String {
    match rpc_id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// An `agent.event` of type `acp`.
pub fn acp_event(subtype: &str, raw: &Value) -> Draft {
    raw_event(Some("acp".into()), Some(subtype.to_owned()), raw, None)
}

/// A tool call's name in the entry vocabulary (by its ACP kind, so the recovery brief knows
/// what it may have changed), its input and its file.
fn describe(call: &Value) -> (String, Value, Option<String>) {
    let kind = str_of(call, "kind").unwrap_or("other");
    let title = str_of(call, "title").unwrap_or_default();
    let name = match kind {
        "read" => "Read",
        "edit" => "Edit",
        "search" => "Grep",
        "execute" => "Bash",
        "fetch" => "WebFetch",
        _ if !title.is_empty() => title,
        other => other,
    };
    let mut input = match call.get("rawInput") {
        Some(Value::Object(map)) => Value::Object(map.clone()),
        Some(other) if !other.is_null() => json!({ "value": other }),
        _ => json!({}),
    };
    if !title.is_empty() && input.get("title").is_none() {
        input["title"] = json!(title);
    }
    // The command line as one string, as the brief and the terminal show it (Codex gives argv).
    if kind == "execute" && !title.is_empty() {
        match input.get("command") {
            Some(Value::String(_)) => {}
            Some(argv) => {
                input["argv"] = argv.clone();
                input["command"] = json!(title);
            }
            None => input["command"] = json!(title),
        }
    }
    let path = call
        .get("locations")
        .and_then(Value::as_array)
        .and_then(|l| l.first())
        .and_then(|l| str_of(l, "path"))
        .or_else(|| {
            ["file_path", "absolute_path", "path"]
                .iter()
                .find_map(|k| call.get("rawInput").and_then(|i| str_of(i, k)))
        })
        .map(str::to_owned);
    if let (Some(p), None) = (&path, input.get("file_path")) {
        input["file_path"] = json!(p);
    }
    let input = match input.to_string().len() > RAW_CHARS {
        true => json!({"title": title, "file_path": path, "truncated": true}),
        false => input,
    };
    (name.to_owned(), input, path)
}

fn status_of(call: &Value) -> Option<&str> {
    str_of(call, "status")
}

/// A tool call's output as text: its content blocks, else its raw output.
fn tool_output(call: &Value) -> String {
    let blocks = call.get("content").and_then(Value::as_array);
    let mut parts: Vec<String> = Vec::new();
    for block in blocks.into_iter().flatten().take(64) {
        match str_of(block, "type") {
            Some("content") => parts.push(content_text(block.get("content"))),
            Some("diff") => parts.push(format!(
                "[diff {}]",
                str_of(block, "path").unwrap_or_default()
            )),
            Some(other) => parts.push(format!("[{other}]")),
            None => {}
        }
    }
    if parts.is_empty() {
        return match call.get("rawOutput") {
            Some(Value::String(s)) => s.clone(),
            Some(v) if !v.is_null() => v.to_string(),
            _ => String::new(),
        };
    }
    parts.join("\n")
}

/// The text of a content block (`{"type": "text", "text": ...}`); other blocks by their type.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(c) if str_of(c, "type") == Some("text") => {
            str_of(c, "text").unwrap_or_default().to_owned()
        }
        Some(c) => format!("[{}]", str_of(c, "type").unwrap_or("content")),
        None => String::new(),
    }
}

/// Appends to a message's final text, which is bounded like every raw text.
pub(crate) fn push_bounded(into: &mut String, text: &str) {
    if into.len() < RAW_CHARS * 4 {
        into.push_str(text);
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

#[cfg(test)]
#[path = "map_tests.rs"]
mod tests;
