//! `codex exec --json` events, mapped to the typed entries every structured adapter writes.
//!
//! Pure: no I/O, no clock. `codex exec` prints the app-server's items in snake case
//! (`command_execution`, `aggregated_output`, …); they are renamed to the app-server's shapes and
//! mapped by the `codex` adapter's [`Mapper`], so both Codex adapters log a command, a file
//! change or a message the same way. `thread.started` → `agent.session` (when the thread is
//! new), `turn.completed` / `turn.failed` → `agent.result` (after it the usage as `agent.event`
//! `token_usage`), `error` → `agent.error`, a `todo_list` item → `agent.todos`; other events are
//! kept as `agent.event` with type `codex`.

use moor_protocol::payload::{AgentSession, AgentTodos, Todo};
use serde_json::{json, Map, Value};

use super::Dialect;
use crate::adapter::acp::map::Mapped;
use crate::adapter::claude::map::Signal;
use crate::adapter::codex::map::{codex_event, Mapper};
use crate::spool::Draft;

/// Most todo items kept.
const MAX_TODOS: usize = 256;

/// Maps the events of one thread, turn after turn.
#[derive(Debug, Default)]
pub struct CodexExecMapper {
    mapper: Mapper,
    thread_id: Option<String>,
    over: bool,
}

impl Dialect for CodexExecMapper {
    const ADAPTER: &'static str = "codex-exec";
    const AGENT: &'static str = "Codex";

    /// `codex exec [OPTIONS] [resume ID] --json PROMPT` (`exec` added after the program when the
    /// command does not name it).
    fn argv(command: &[String], prompt: &str, resume: Option<&str>) -> Vec<String> {
        let mut argv = command.to_vec();
        if !argv.iter().skip(1).any(|a| a == "exec") && !argv.is_empty() {
            argv.insert(1, "exec".into());
        }
        if let Some(id) = resume {
            argv.extend(["resume".to_owned(), id.to_owned()]);
        }
        // `--` so a prompt starting with `-` is not taken for an option.
        argv.extend(["--json".to_owned(), "--".to_owned(), prompt.to_owned()]);
        argv
    }

    fn session_id(&self) -> Option<&str> {
        self.thread_id.as_deref()
    }

    fn turn_started(&mut self) {
        self.over = false;
    }

    fn turn_over(&self) -> bool {
        self.over
    }

    fn cut_short(&mut self, interrupted: bool, why: &str) -> Mapped {
        self.over = true;
        let status = if interrupted { "interrupted" } else { "failed" };
        self.mapper.turn_completed(&json!({
            "threadId": self.thread_id,
            "turn": {"status": status, "error": (!interrupted).then(|| json!({"message": why}))},
        }))
    }

    fn event(&mut self, event: &Value) -> Mapped {
        let item = event.get("item").map(app_server_item);
        match (str_of(event, "type"), item) {
            (Some("thread.started"), _) => {
                let mut out = Mapped::default();
                out.signals.push(Signal::Alive);
                let id = str_of(event, "thread_id").map(str::to_owned);
                if id.is_some() && id != self.thread_id {
                    self.thread_id.clone_from(&id);
                    out.drafts.push(Draft::new(AgentSession {
                        agent_session_id: id,
                        ..AgentSession::default()
                    }));
                }
                out
            }
            (Some("turn.started"), _) => self.notify("turn/started", json!({})),
            (Some("item.started" | "item.updated" | "item.completed"), Some(item))
                if str_of(&item, "type") == Some("todoList") =>
            {
                let mut out = Mapped::default();
                out.signals.push(Signal::Model);
                out.drafts.push(Draft::new(AgentTodos {
                    todos: todos(&item),
                }));
                out
            }
            (Some("item.started"), Some(item)) => {
                self.notify("item/started", json!({"item": item}))
            }
            (Some("item.completed"), Some(item)) => {
                self.notify("item/completed", json!({"item": item}))
            }
            (Some("item.updated"), Some(_)) => {
                let mut out = Mapped::default();
                out.signals.push(Signal::Alive);
                out
            }
            (Some("turn.completed"), _) => {
                if let Some(usage) = event.get("usage") {
                    self.notify("thread/tokenUsage/updated", json!({"tokenUsage": usage}));
                }
                self.over = true;
                let params = json!({"threadId": self.thread_id, "turn": {"status": "completed"}});
                self.mapper.turn_completed(&params)
            }
            (Some("turn.failed"), _) => {
                self.over = true;
                let error = event.get("error").cloned().unwrap_or(Value::Null);
                let params = json!({"threadId": self.thread_id, "turn": {"status": "failed", "error": error}});
                self.mapper.turn_completed(&params)
            }
            (Some("error"), _) => {
                // "Reconnecting... 2/5": Codex retries the request itself.
                let message = str_of(event, "message").unwrap_or_default();
                let retry = message.starts_with("Reconnecting");
                self.notify(
                    "error",
                    json!({"error": {"message": message}, "willRetry": retry}),
                )
            }
            (other, _) => {
                let mut out = Mapped::default();
                out.signals.push(Signal::Alive);
                out.drafts
                    .push(codex_event(other.unwrap_or("unknown"), event));
                out
            }
        }
    }
}

impl CodexExecMapper {
    fn notify(&mut self, method: &str, params: Value) -> Mapped {
        self.mapper.notification(method, &params)
    }
}

/// An item of `codex exec --json` in the app-server's shape: camel-case type and keys, a file
/// change's `kind` as `{type}`, a reasoning item's `text` as its summary.
fn app_server_item(item: &Value) -> Value {
    let Value::Object(fields) = item else {
        return item.clone();
    };
    let mut out = Map::new();
    for (k, v) in fields {
        let v = match (k.as_str(), v) {
            ("type", Value::String(t)) => Value::String(camel(t)),
            ("changes", Value::Array(changes)) => Value::Array(
                changes
                    .iter()
                    .map(|c| {
                        let mut c = c.clone();
                        if let Some(kind) = c.get("kind").filter(|k| k.is_string()).cloned() {
                            c["kind"] = json!({ "type": kind });
                        }
                        c
                    })
                    .collect(),
            ),
            _ => v.clone(),
        };
        out.insert(camel(k), v);
    }
    if out.get("type").and_then(Value::as_str) == Some("reasoning") {
        if let Some(text) = out.remove("text") {
            out.insert("summary".into(), json!([text]));
        }
    }
    Value::Object(out)
}

/// `snake_case` → `camelCase`.
fn camel(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut upper = false;
    for c in s.chars() {
        match (c, upper) {
            ('_', _) => upper = true,
            (c, true) => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            (c, false) => out.push(c),
        }
    }
    out
}

fn todos(item: &Value) -> Vec<Todo> {
    item.get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .take(MAX_TODOS)
        .map(|t| Todo {
            content: str_of(t, "text").unwrap_or_default().to_owned(),
            status: match t.get("completed").and_then(Value::as_bool) {
                Some(true) => "completed",
                _ => "pending",
            }
            .to_owned(),
            active_form: None,
        })
        .collect()
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}
