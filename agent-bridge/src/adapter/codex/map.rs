//! What `codex app-server` says, mapped to the typed entries every structured adapter writes,
//! plus the watchdog's signals.
//!
//! Pure: no I/O, no clock, so captured streams are replayed through it in tests and benches.
//! Items become entries when they complete (`agentMessage` → `agent.text`, `reasoning` →
//! `agent.thinking`) or when they start and complete (`commandExecution` → a `Bash` tool use and
//! its result, `fileChange` → `Edit`, MCP and dynamic tool calls, web searches); message deltas
//! stream as `agent.text.delta`; `turn/plan/updated` → `agent.todos`; `turn/completed` →
//! `agent.result` (with the turn's token usage after it as `agent.event` `token_usage`);
//! `error` → `agent.error`. What has no entry kind is kept as `agent.event` with type `codex`,
//! except what an entry already carries: deltas folded into their item, the token usage, the
//! echo of our own prompt, `serverRequest/resolved` (the decision is logged when it is made).

use std::collections::BTreeMap;

use moor_protocol::payload::{
    AgentError, AgentPermissionRequest, AgentResult, AgentText, AgentTextDelta, AgentThinking,
    AgentTodos, AgentToolUse, Todo,
};
use serde_json::{json, Value};

use crate::adapter::acp::map::{push_bounded, request_id, Mapped};
use crate::adapter::claude::map::{bounded, raw_event, PermissionRequest, Signal, RAW_CHARS};
use crate::spool::Draft;

/// Most tool calls tracked at once; beyond, the oldest is forgotten (its result still logs).
const MAX_TOOLS: usize = 1024;
/// Most plan steps kept.
const MAX_TODOS: usize = 256;

/// A tool call as the log named it when it started.
#[derive(Debug, Clone, PartialEq)]
struct Tool {
    name: String,
    input: Value,
    path: Option<String>,
}

/// Maps one thread's messages; keeps the text being streamed, the token usage of the running
/// turn and the tool calls that have started.
#[derive(Debug, Default)]
pub struct Mapper {
    /// Text streamed per message item, until the item completes.
    text: BTreeMap<String, String>,
    /// Reasoning streamed per item.
    thought: BTreeMap<String, String>,
    /// Tool calls started and not finished, by item id.
    tools: BTreeMap<String, Tool>,
    /// The last `thread/tokenUsage/updated` of the turn.
    usage: Option<Value>,
}

impl Mapper {
    /// A mapper before the first turn.
    pub fn new() -> Self {
        Self::default()
    }

    /// A notification from the app-server.
    pub fn notification(&mut self, method: &str, params: &Value) -> Mapped {
        let mut out = Mapped::default();
        match method {
            "item/agentMessage/delta" => {
                out.signals.push(Signal::Model);
                let item = str_of(params, "itemId").unwrap_or_default().to_owned();
                let delta = str_of(params, "delta").unwrap_or_default();
                push_bounded(self.text.entry(item.clone()).or_default(), delta);
                out.drafts.push(Draft::new(AgentTextDelta {
                    message_id: Some(item),
                    index: None,
                    text: delta.to_owned(),
                }));
            }
            "item/reasoning/summaryTextDelta" | "item/reasoning/textDelta" => {
                out.signals.push(Signal::Model);
                let item = str_of(params, "itemId").unwrap_or_default().to_owned();
                let delta = str_of(params, "delta").unwrap_or_default();
                push_bounded(self.thought.entry(item).or_default(), delta);
            }
            "item/commandExecution/outputDelta" | "item/fileChange/outputDelta" => {
                // The output is in the item's completion; this says the tool is alive.
                out.signals.push(Signal::Alive);
            }
            "item/started" => {
                self.item_started(params.get("item").unwrap_or(&Value::Null), &mut out)
            }
            "item/completed" => {
                self.item_completed(params.get("item").unwrap_or(&Value::Null), &mut out)
            }
            "thread/tokenUsage/updated" => {
                out.signals.push(Signal::Alive);
                self.usage = params.get("tokenUsage").cloned();
            }
            "turn/plan/updated" => {
                out.signals.push(Signal::Model);
                let todos = params
                    .get("plan")
                    .and_then(Value::as_array)
                    .map(|steps| steps.iter().take(MAX_TODOS).map(todo).collect())
                    .unwrap_or_default();
                out.drafts.push(Draft::new(AgentTodos { todos }));
            }
            "turn/completed" => return self.turn_completed(params),
            "error" => {
                out.signals.push(Signal::Alive);
                let err = params.get("error").unwrap_or(&Value::Null);
                let retry = params.get("willRetry").and_then(Value::as_bool) == Some(true);
                let message = str_of(err, "message").unwrap_or("the agent reported an error");
                out.drafts.push(Draft::new(AgentError {
                    message: bounded(message, RAW_CHARS).0,
                    reason: retry.then(|| "api_retry".to_owned()),
                    ..AgentError::default()
                }));
            }
            "turn/started" | "serverRequest/resolved" => out.signals.push(Signal::Alive),
            other => {
                out.signals.push(Signal::Alive);
                out.drafts.push(codex_event(other, params));
            }
        }
        out
    }

    fn item_started(&mut self, item: &Value, out: &mut Mapped) {
        match str_of(item, "type") {
            Some("agentMessage" | "reasoning") => out.signals.push(Signal::Model),
            Some("userMessage") => out.signals.push(Signal::Alive),
            _ => {
                if let Some(tool) = describe(item) {
                    out.signals.push(Signal::Model);
                    self.tool_started(id_of(item), tool, out);
                } else {
                    out.signals.push(Signal::Alive);
                }
            }
        }
    }

    fn item_completed(&mut self, item: &Value, out: &mut Mapped) {
        let id = id_of(item);
        match str_of(item, "type") {
            Some("agentMessage") => {
                out.signals.push(Signal::Model);
                let streamed = self.text.remove(&id).unwrap_or_default();
                let text = str_of(item, "text")
                    .map(|t| bounded(t, RAW_CHARS * 4).0)
                    .unwrap_or(streamed);
                if !text.is_empty() {
                    out.drafts.push(Draft::new(AgentText {
                        message_id: Some(id),
                        text,
                        parent_tool_use_id: None,
                    }));
                }
            }
            Some("reasoning") => {
                out.signals.push(Signal::Model);
                let streamed = self.thought.remove(&id).unwrap_or_default();
                let given = ["summary", "content"]
                    .iter()
                    .filter_map(|k| item.get(*k).and_then(Value::as_array))
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("\n");
                let text = if given.is_empty() {
                    streamed
                } else {
                    bounded(&given, RAW_CHARS * 4).0
                };
                if !text.is_empty() {
                    out.drafts.push(Draft::new(AgentThinking {
                        message_id: Some(id),
                        text,
                        parent_tool_use_id: None,
                    }));
                }
            }
            // The echo of the prompt, which the log has as the input that started the turn.
            Some("userMessage") => out.signals.push(Signal::Alive),
            _ => match describe(item) {
                Some(tool) => {
                    out.signals.push(Signal::Model);
                    if !self.tools.contains_key(&id) {
                        // A completion never announced: announce it so the result has its call.
                        self.tool_started(id.clone(), tool, out);
                    }
                    self.tool_finished(id, item, out);
                }
                None => {
                    out.signals.push(Signal::Alive);
                    out.drafts.push(codex_event("item/completed", item));
                }
            },
        }
    }

    fn tool_started(&mut self, id: String, tool: Tool, out: &mut Mapped) {
        if self.tools.contains_key(&id) {
            return;
        }
        if self.tools.len() >= MAX_TOOLS {
            self.tools.pop_first();
        }
        out.signals.push(Signal::ToolStarted {
            id: id.clone(),
            name: tool.name.clone(),
        });
        out.drafts.push(Draft::new(AgentToolUse {
            id: id.clone(),
            name: tool.name.clone(),
            path: tool.path.clone(),
            input: tool.input.clone(),
            parent_tool_use_id: None,
        }));
        self.tools.insert(id, tool);
    }

    fn tool_finished(&mut self, id: String, item: &Value, out: &mut Mapped) {
        self.tools.remove(&id);
        let status = str_of(item, "status").unwrap_or("completed");
        let exit = item.get("exitCode").and_then(Value::as_i64);
        let is_error = status != "completed" || exit.is_some_and(|c| c != 0);
        let text = tool_output(item, status);
        out.tool_result(id, is_error, &text);
    }

    /// An approval request (`item/commandExecution/requestApproval`,
    /// `item/fileChange/requestApproval`): its entry (after the tool call's, when the call was
    /// not announced yet), and what the watchdog and the adapter keep to answer it.
    pub fn approval(
        &mut self,
        rpc_id: &Value,
        method: &str,
        params: &Value,
    ) -> (Mapped, PermissionRequest) {
        let mut out = Mapped::default();
        let item_id = str_of(params, "itemId").map(str::to_owned);
        let known = item_id.as_ref().and_then(|id| self.tools.get(id).cloned());
        let tool = match (known, method) {
            (Some(tool), _) => tool,
            (None, "item/commandExecution/requestApproval") => command_tool(params),
            (None, _) => Tool {
                name: "Edit".into(),
                input: json!({"grant_root": params.get("grantRoot")}),
                path: None,
            },
        };
        if let Some(id) = &item_id {
            self.tool_started(id.clone(), tool.clone(), &mut out);
        }
        let request_id = request_id(rpc_id);
        out.drafts.push(Draft::new(AgentPermissionRequest {
            request_id: request_id.clone(),
            tool_name: tool.name.clone(),
            tool_use_id: item_id,
            input: tool.input.clone(),
            path: tool.path,
            description: str_of(params, "reason").map(str::to_owned),
        }));
        let request = PermissionRequest {
            request_id,
            tool_name: tool.name,
            input: tool.input,
        };
        out.signals.push(Signal::Permission(request.clone()));
        (out, request)
    }

    /// `turn/completed`: a result for every tool call started in the turn and never finished
    /// (so none stays open in the log), the turn's result, then its token usage and, for a
    /// failed turn, its error.
    pub fn turn_completed(&mut self, params: &Value) -> Mapped {
        let mut out = Mapped::default();
        let turn = params.get("turn").unwrap_or(&Value::Null);
        let status = str_of(turn, "status").unwrap_or("completed");
        let had_tools = !self.tools.is_empty();
        for (id, _) in std::mem::take(&mut self.tools) {
            let why = format!("the turn ended ({status}) without this call's result");
            out.tool_result(id, true, &why);
        }
        // Text of items that never completed.
        for (id, text) in std::mem::take(&mut self.text) {
            if !text.is_empty() {
                out.drafts.push(Draft::new(AgentText {
                    message_id: Some(id),
                    text,
                    parent_tool_use_id: None,
                }));
            }
        }
        self.thought.clear();
        let (subtype, is_error, terminal) = match status {
            "completed" => ("success", false, "completed"),
            // The words the fold and the renderer already read as "a person stopped it".
            "interrupted" if had_tools => ("cancelled", true, "aborted_tools"),
            "interrupted" => ("cancelled", true, "aborted_streaming"),
            _ => ("error_during_execution", true, "failed"),
        };
        out.signals.push(Signal::TurnEnded { success: !is_error });
        let error_text = turn
            .get("error")
            .and_then(|e| str_of(e, "message"))
            .map(|m| bounded(m, RAW_CHARS).0);
        out.drafts.push(Draft::new(AgentResult {
            subtype: Some(subtype.to_owned()),
            is_error,
            duration_ms: turn.get("durationMs").and_then(Value::as_u64),
            terminal_reason: Some(terminal.to_owned()),
            agent_session_id: str_of(params, "threadId").map(str::to_owned),
            errors: error_text.clone().map(|e| json!([e])),
            ..AgentResult::default()
        }));
        if let Some(usage) = self.usage.take() {
            // Token usage as Codex reports it: no entry kind has its shape.
            out.drafts.push(codex_event("token_usage", &usage));
        }
        if terminal == "failed" {
            let why = error_text.unwrap_or_else(|| format!("the turn ended {status}"));
            out.drafts.push(Draft::new(AgentError {
                message: format!("the agent's turn failed: {why}"),
                reason: Some("error_during_execution".into()),
                ..AgentError::default()
            }));
        }
        out
    }
}

/// An `agent.event` of type `codex`.
pub fn codex_event(subtype: &str, raw: &Value) -> Draft {
    raw_event(Some("codex".into()), Some(subtype.to_owned()), raw, None)
}

fn todo(step: &Value) -> Todo {
    let status = match str_of(step, "status") {
        Some("inProgress") => "in_progress",
        Some("completed") => "completed",
        _ => "pending",
    };
    Todo {
        content: str_of(step, "step").unwrap_or_default().to_owned(),
        status: status.to_owned(),
        active_form: None,
    }
}

/// A tool item's name in the entry vocabulary, its input and its file; `None` for items that
/// are not tool calls.
fn describe(item: &Value) -> Option<Tool> {
    let tool = match str_of(item, "type")? {
        "commandExecution" => command_tool(item),
        "fileChange" => {
            let changes = item.get("changes").and_then(Value::as_array);
            let path = changes
                .and_then(|c| c.first())
                .and_then(|c| str_of(c, "path"))
                .map(str::to_owned);
            let files: Vec<Value> = changes
                .into_iter()
                .flatten()
                .take(64)
                .map(|c| json!({"path": c.get("path"), "kind": c.get("kind").and_then(|k| k.get("type"))}))
                .collect();
            Tool {
                name: "Edit".into(),
                input: json!({"file_path": path, "changes": files}),
                path,
            }
        }
        "mcpToolCall" => Tool {
            name: format!(
                "mcp__{}__{}",
                str_of(item, "server").unwrap_or_default(),
                str_of(item, "tool").unwrap_or_default()
            ),
            input: object(item.get("arguments")),
            path: None,
        },
        "dynamicToolCall" => Tool {
            name: str_of(item, "tool").unwrap_or("tool").to_owned(),
            input: object(item.get("arguments")),
            path: None,
        },
        "webSearch" => Tool {
            name: "WebSearch".into(),
            input: json!({"query": item.get("query")}),
            path: None,
        },
        _ => return None,
    };
    let input = match tool.input.to_string().len() > RAW_CHARS {
        true => json!({"file_path": tool.path, "truncated": true}),
        false => tool.input,
    };
    Some(Tool { input, ..tool })
}

/// A command item or approval request as a `Bash` call: `command` is the command line the model
/// asked for (Codex runs it as `/bin/bash -lc '<command>'`, kept as `shell_command`).
fn command_tool(v: &Value) -> Tool {
    let full = str_of(v, "command").unwrap_or_default();
    let command = unwrap_shell(full).unwrap_or_else(|| full.to_owned());
    let mut input = json!({"command": command, "cwd": v.get("cwd")});
    if command != full {
        input["shell_command"] = json!(full);
    }
    Tool {
        name: "Bash".into(),
        input,
        path: None,
    }
}

/// `<shell> -lc '<script>'` (or `-c`) → the script, unquoted; `None` for anything else.
fn unwrap_shell(command: &str) -> Option<String> {
    let (shell, rest) = command.split_once(' ')?;
    let shell_name = shell.rsplit('/').next()?;
    if !matches!(shell_name, "bash" | "sh" | "zsh") {
        return None;
    }
    let rest = rest
        .strip_prefix("-lc ")
        .or_else(|| rest.strip_prefix("-c "))?;
    unquote(rest)
}

/// One POSIX-shell word made of single-quoted parts, plain characters and `\'`.
fn unquote(word: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = word.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => loop {
                match chars.next()? {
                    '\'' => break,
                    c => out.push(c),
                }
            },
            '\\' => out.push(chars.next()?),
            c if c.is_whitespace() || "\"$`;&|<>()".contains(c) => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// A tool item's output as text: a command's output, a file change's diffs, an MCP result.
fn tool_output(item: &Value, status: &str) -> String {
    let text = match str_of(item, "type") {
        Some("commandExecution") => str_of(item, "aggregatedOutput")
            .unwrap_or_default()
            .to_owned(),
        Some("fileChange") => item
            .get("changes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .take(64)
            .filter_map(|c| str_of(c, "diff"))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => ["result", "error", "contentItems"]
            .iter()
            .filter_map(|k| item.get(*k).filter(|v| !v.is_null()))
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
    };
    match (text.is_empty(), status) {
        (true, "declined") => "declined by the person asked".to_owned(),
        (true, "completed") => String::new(),
        (true, other) => format!("[{other}]"),
        (false, _) => text,
    }
}

fn object(v: Option<&Value>) -> Value {
    match v {
        Some(Value::Object(map)) => Value::Object(map.clone()),
        Some(other) if !other.is_null() => json!({ "value": other }),
        _ => json!({}),
    }
}

fn id_of(item: &Value) -> String {
    str_of(item, "id").unwrap_or_default().to_owned()
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

#[cfg(test)]
#[path = "map_tests.rs"]
mod tests;
