//! Gemini CLI's headless `stream-json` events (`gemini -p PROMPT --output-format stream-json`),
//! mapped to the typed entries every structured adapter writes.
//!
//! Pure: no I/O, no clock. `init` → `agent.session` (when the session id is new), assistant
//! `message` pieces → `agent.text.delta` (and one `agent.text` per message, when a tool call
//! starts or the turn ends), `tool_use` → `agent.tool_use` (`run_shell_command` → `Bash`, …),
//! `tool_result` → `agent.tool_result`, a `write_todos` call → `agent.todos` too, `error` →
//! `agent.error`, `result` → `agent.result` (its `stats` after it as `agent.event` `stats`).
//! The echo of the prompt is not logged again; other events are kept as `agent.event` with type
//! `gemini`.

use std::collections::BTreeSet;

use moor_protocol::payload::{
    AgentError, AgentResult, AgentSession, AgentText, AgentTextDelta, AgentTodos, AgentToolUse,
    Todo,
};
use serde_json::{json, Value};

use super::Dialect;
use crate::adapter::acp::map::{push_bounded, Mapped};
use crate::adapter::claude::map::{bounded, raw_event, Signal, RAW_CHARS};
use crate::spool::Draft;

/// Most todo items kept.
const MAX_TODOS: usize = 256;
/// Most tool calls tracked at once in a turn; beyond, the oldest is forgotten.
const MAX_TOOLS: usize = 1024;

/// What one turn has streamed so far.
#[derive(Debug, Default)]
struct Turn {
    number: u64,
    segment: u64,
    index: u32,
    text: String,
    /// Tool calls started and not finished.
    tools: BTreeSet<String>,
    /// The `result` event was mapped.
    over: bool,
}

impl Turn {
    fn message_id(&self) -> String {
        format!("gemini-{}-{}", self.number, self.segment)
    }

    fn text_piece(&mut self, text: &str, out: &mut Mapped) {
        out.signals.push(Signal::Model);
        if text.is_empty() {
            return;
        }
        push_bounded(&mut self.text, text);
        out.drafts.push(Draft::new(AgentTextDelta {
            message_id: Some(self.message_id()),
            index: Some(self.index),
            text: text.to_owned(),
        }));
        self.index += 1;
    }

    /// The message streamed so far as one `agent.text`.
    fn flush(&mut self, out: &mut Mapped) {
        if !self.text.is_empty() {
            out.drafts.push(Draft::new(AgentText {
                message_id: Some(self.message_id()),
                text: std::mem::take(&mut self.text),
                parent_tool_use_id: None,
            }));
            self.segment += 1;
            self.index = 0;
        }
    }

    fn tool_started(&mut self, tool: AgentToolUse, out: &mut Mapped) {
        self.flush(out);
        out.signals.push(Signal::Model);
        if !self.tools.insert(tool.id.clone()) {
            return;
        }
        if self.tools.len() > MAX_TOOLS {
            self.tools.pop_first();
        }
        out.signals.push(Signal::ToolStarted {
            id: tool.id.clone(),
            name: tool.name.clone(),
        });
        out.drafts.push(Draft::new(tool));
    }

    fn tool_finished(&mut self, id: String, is_error: bool, text: &str, out: &mut Mapped) {
        out.signals.push(Signal::Model);
        if !self.tools.remove(&id) {
            // A result for a call never announced (or forgotten) says only that it happened.
            out.signals.push(Signal::Alive);
        }
        out.tool_result(id, is_error, text);
    }

    /// The turn ended: a result for every call left open, the final text, `agent.result`, and
    /// for a failed turn its `agent.error`. `how` is `None` for success, else the subtype and
    /// the terminal reason.
    fn end(
        &mut self,
        failure: Option<(&str, String)>,
        duration_ms: Option<u64>,
        session: Option<String>,
        out: &mut Mapped,
    ) {
        self.over = true;
        let had_tools = !self.tools.is_empty();
        for id in std::mem::take(&mut self.tools) {
            let why = "the turn ended without this call's result";
            out.tool_result(id, true, why);
        }
        self.flush(out);
        let (subtype, terminal, error) = match failure {
            None => ("success", "completed".to_owned(), None),
            // The words the fold and the renderer already read as "a person stopped it".
            Some(("cancelled", _)) if had_tools => ("cancelled", "aborted_tools".into(), None),
            Some(("cancelled", _)) => ("cancelled", "aborted_streaming".into(), None),
            Some((_, why)) => ("error_during_execution", "failed".into(), Some(why)),
        };
        let is_error = subtype != "success";
        out.signals.push(Signal::TurnEnded { success: !is_error });
        out.drafts.push(Draft::new(AgentResult {
            subtype: Some(subtype.to_owned()),
            is_error,
            duration_ms,
            terminal_reason: Some(terminal),
            agent_session_id: session,
            errors: error.clone().map(|e| json!([e])),
            ..AgentResult::default()
        }));
        if let Some(why) = error {
            out.drafts.push(Draft::new(AgentError {
                message: format!("the agent's turn failed: {why}"),
                reason: Some("error_during_execution".into()),
                ..AgentError::default()
            }));
        }
    }
}

/// Maps the events of one session, turn after turn.
#[derive(Debug, Default)]
pub struct GeminiMapper {
    turn: Turn,
    session_id: Option<String>,
}

impl Dialect for GeminiMapper {
    const ADAPTER: &'static str = "gemini-headless";
    const AGENT: &'static str = "Gemini";

    fn argv(command: &[String], prompt: &str, resume: Option<&str>) -> Vec<String> {
        let mut argv = command.to_vec();
        if let Some(id) = resume {
            argv.extend(["--resume".to_owned(), id.to_owned()]);
        }
        // One argument each, so a prompt starting with `-` is not taken for an option.
        argv.push("--output-format=stream-json".into());
        argv.push(format!("--prompt={prompt}"));
        argv
    }

    fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    fn turn_started(&mut self) {
        self.turn = Turn {
            number: self.turn.number + 1,
            ..Turn::default()
        };
    }

    fn turn_over(&self) -> bool {
        self.turn.over
    }

    fn cut_short(&mut self, interrupted: bool, why: &str) -> Mapped {
        let mut out = Mapped::default();
        let failure = match interrupted {
            true => ("cancelled", why.to_owned()),
            false => ("failed", why.to_owned()),
        };
        let session = self.session_id.clone();
        self.turn.end(Some(failure), None, session, &mut out);
        out
    }

    fn event(&mut self, event: &Value) -> Mapped {
        let mut out = Mapped::default();
        match str_of(event, "type") {
            Some("init") => {
                out.signals.push(Signal::Alive);
                let id = str_of(event, "session_id").map(str::to_owned);
                if id.is_some() && id != self.session_id {
                    self.session_id.clone_from(&id);
                    out.drafts.push(Draft::new(AgentSession {
                        agent_session_id: id,
                        model: str_of(event, "model").map(str::to_owned),
                        ..AgentSession::default()
                    }));
                }
            }
            // The echo of the prompt, which the log has as the input that started the turn.
            Some("message") if str_of(event, "role") == Some("user") => {
                out.signals.push(Signal::Alive)
            }
            Some("message") => {
                let text = str_of(event, "content").unwrap_or_default();
                self.turn.text_piece(text, &mut out);
            }
            Some("tool_use") => {
                let name = str_of(event, "tool_name").unwrap_or("tool");
                let params = event.get("parameters").cloned().unwrap_or(json!({}));
                let id = str_of(event, "tool_id").unwrap_or_default().to_owned();
                let path = ["file_path", "absolute_path", "path"]
                    .iter()
                    .find_map(|k| str_of(&params, k))
                    .map(str::to_owned);
                if name == "write_todos" {
                    out.drafts.push(Draft::new(AgentTodos {
                        todos: todos(&params),
                    }));
                }
                let input = match params.to_string().len() > RAW_CHARS {
                    true => json!({"file_path": path, "truncated": true}),
                    false => params,
                };
                self.turn.tool_started(
                    AgentToolUse {
                        id,
                        name: tool_name(name).to_owned(),
                        input,
                        path,
                        parent_tool_use_id: None,
                    },
                    &mut out,
                );
            }
            Some("tool_result") => {
                let id = str_of(event, "tool_id").unwrap_or_default().to_owned();
                let is_error = str_of(event, "status") != Some("success");
                let text = match (str_of(event, "output"), event.get("error")) {
                    (Some(output), _) => output.to_owned(),
                    (None, Some(e)) => str_of(e, "message")
                        .map(str::to_owned)
                        .unwrap_or_else(|| e.to_string()),
                    (None, None) => String::new(),
                };
                self.turn.tool_finished(id, is_error, &text, &mut out);
            }
            Some("error") => {
                out.signals.push(Signal::Alive);
                let message = str_of(event, "message").unwrap_or("the agent reported an error");
                out.drafts.push(Draft::new(AgentError {
                    message: bounded(message, RAW_CHARS).0,
                    reason: str_of(event, "severity").map(str::to_owned),
                    ..AgentError::default()
                }));
            }
            Some("result") => {
                let status = str_of(event, "status").unwrap_or("error");
                let failure = (status != "success").then(|| {
                    let why = event.get("error").map_or_else(
                        || format!("status {status}"),
                        |e| str_of(e, "message").map_or_else(|| e.to_string(), str::to_owned),
                    );
                    ("failed", bounded(&why, RAW_CHARS).0)
                });
                let stats = event.get("stats");
                let duration = stats
                    .and_then(|s| s.get("duration_ms"))
                    .and_then(Value::as_u64);
                let session = self.session_id.clone();
                self.turn.end(failure, duration, session, &mut out);
                if let Some(stats) = stats {
                    out.drafts.push(gemini_event("stats", stats));
                }
            }
            _ => {
                out.signals.push(Signal::Alive);
                out.drafts.push(gemini_event(
                    str_of(event, "type").unwrap_or("unknown"),
                    event,
                ));
            }
        }
        out
    }
}

/// Gemini CLI's tool names in the entry vocabulary.
fn tool_name(name: &str) -> &str {
    match name {
        "run_shell_command" => "Bash",
        "replace" => "Edit",
        "write_file" => "Write",
        "read_file" => "Read",
        "read_many_files" => "ReadMany",
        "grep_search" | "search_file_content" => "Grep",
        "glob" => "Glob",
        "list_directory" => "LS",
        "web_fetch" => "WebFetch",
        "google_web_search" => "WebSearch",
        "write_todos" => "TodoWrite",
        other => other,
    }
}

fn todos(params: &Value) -> Vec<Todo> {
    params
        .get("todos")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .take(MAX_TODOS)
        .map(|t| Todo {
            content: str_of(t, "description").unwrap_or_default().to_owned(),
            status: match str_of(t, "status") {
                Some("in_progress") => "in_progress",
                Some("completed") => "completed",
                _ => "pending",
            }
            .to_owned(),
            active_form: None,
        })
        .collect()
}

/// An `agent.event` of type `gemini`.
fn gemini_event(subtype: &str, raw: &Value) -> Draft {
    raw_event(Some("gemini".into()), Some(subtype.to_owned()), raw, None)
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}
