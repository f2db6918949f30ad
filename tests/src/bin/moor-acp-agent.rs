//! `moor-acp-agent`: a small Agent Client Protocol agent for the end-to-end tests of the `acp`
//! adapter, the second ACP agent beside Gemini CLI (no second real ACP agent installs from npm
//! and runs offline here). It speaks ACP v1 over stdio, keeps each session's history in
//! `$MOOR_ACP_AGENT_DIR` (default `.moor-acp-agent` in its working directory) so `session/load`
//! continues a conversation in a new process, and follows a script that starts a prompt:
//!
//! - `[[tool:CMD]]` announces an `execute` tool call, asks `session/request_permission`
//!   (`proceed_once`, `proceed_always`, `cancel`), runs `sh -c CMD` only when allowed;
//! - `[[hang]]` streams a little, then says nothing until `session/cancel`;
//! - `[[crash-in-tool:CMD]]` starts a tool call and exits with code 3 before its result;
//! - anything else is answered `you said: TEXT`, plus the first prompt of the conversation when
//!   there was an earlier one (`earlier: FIRST`), which is how a test sees a continued session.

use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::mpsc;

use serde_json::{json, Value};

struct Agent {
    rx: mpsc::Receiver<Value>,
    /// Messages read while waiting for something else.
    backlog: VecDeque<Value>,
    dir: PathBuf,
    next_request: u64,
    next_call: u64,
}

fn main() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<Value>(&line) {
                Ok(v) => {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
                Err(_) => eprintln!("moor-acp-agent: ignoring a line that is not JSON"),
            }
        }
    });
    let dir = std::env::var_os("MOOR_ACP_AGENT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".moor-acp-agent"));
    let _ = std::fs::create_dir_all(&dir);
    let mut agent = Agent {
        rx,
        backlog: VecDeque::new(),
        dir,
        next_request: 0,
        next_call: 0,
    };
    while let Some(msg) = agent.next() {
        agent.handle(msg);
    }
}

fn send(value: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

fn respond(id: &Value, result: Value) {
    send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
}

fn update(session: &str, update: Value) {
    send(json!({"jsonrpc": "2.0", "method": "session/update",
        "params": {"sessionId": session, "update": update}}));
}

fn chunk(session: &str, kind: &str, text: &str) {
    update(
        session,
        json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}}),
    );
}

/// What happened while the agent waited for its permission answer.
enum Answer {
    Option(String),
    Cancelled,
}

impl Agent {
    fn next(&mut self) -> Option<Value> {
        self.backlog.pop_front().or_else(|| self.rx.recv().ok())
    }

    fn history_file(&self, session: &str) -> PathBuf {
        let safe: String = session
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        self.dir.join(format!("{safe}.jsonl"))
    }

    fn history(&self, session: &str) -> Option<Vec<(String, String)>> {
        let text = std::fs::read_to_string(self.history_file(session)).ok()?;
        Some(
            text.lines()
                .filter_map(|l| serde_json::from_str::<(String, String)>(l).ok())
                .collect(),
        )
    }

    fn remember(&self, session: &str, role: &str, text: &str) {
        let line = serde_json::to_string(&(role, text)).unwrap_or_default();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.history_file(session))
            .expect("history file");
        let _ = writeln!(file, "{line}");
        let _ = file.sync_all();
    }

    fn handle(&mut self, msg: Value) {
        let method = msg["method"].as_str().unwrap_or_default().to_owned();
        let id = msg.get("id").cloned();
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let Some(id) = id else {
            return; // a notification outside a turn (a late session/cancel)
        };
        match method.as_str() {
            "initialize" => respond(
                &id,
                json!({
                    "protocolVersion": 1,
                    "agentCapabilities": {"loadSession": true},
                    "agentInfo": {"name": "moor-acp-agent", "version": "1.0.0"},
                    "authMethods": [],
                }),
            ),
            "session/new" => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                let session = format!("s-{}-{nanos}", std::process::id());
                self.remember(&session, "created", "");
                respond(&id, json!({"sessionId": session}));
            }
            "session/load" => {
                let session = params["sessionId"].as_str().unwrap_or_default().to_owned();
                match self.history(&session) {
                    Some(history) => {
                        for (role, text) in history {
                            match role.as_str() {
                                "user" => chunk(&session, "user_message_chunk", &text),
                                "agent" => chunk(&session, "agent_message_chunk", &text),
                                _ => {}
                            }
                        }
                        respond(&id, Value::Null);
                    }
                    None => send(json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32002, "message": format!("no session {session}")}})),
                }
            }
            "session/prompt" => {
                let session = params["sessionId"].as_str().unwrap_or_default().to_owned();
                let text = params["prompt"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let stop = self.prompt(&session, &text);
                respond(&id, json!({"stopReason": stop}));
            }
            other => send(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": format!("no method {other}")}})),
        }
    }

    /// Runs one turn; returns its stop reason.
    fn prompt(&mut self, session: &str, text: &str) -> &'static str {
        let earlier = self
            .history(session)
            .unwrap_or_default()
            .into_iter()
            .find(|(role, _)| role == "user")
            .map(|(_, t)| t);
        self.remember(session, "user", text);
        if let Some(cmd) = script(text, "[[tool:") {
            return self.tool(session, &cmd);
        }
        if let Some(cmd) = script(text, "[[crash-in-tool:") {
            let id = self.call_id();
            update(
                session,
                json!({"sessionUpdate": "tool_call", "toolCallId": id, "title": cmd,
                    "kind": "execute", "status": "in_progress", "rawInput": {"command": cmd}}),
            );
            std::process::exit(3);
        }
        if text.trim_start().starts_with("[[hang]]") {
            chunk(session, "agent_thought_chunk", "considering");
            chunk(session, "agent_message_chunk", "working on it");
            // Only session/cancel (or the end of stdin) ends this wait.
            self.wait(session, None);
            return "cancelled";
        }
        let mut reply = format!("you said: {text}");
        if let Some(first) = earlier {
            reply.push_str(&format!(" (earlier: {first})"));
        }
        let (a, b) = reply.split_at(reply.len() / 2);
        chunk(session, "agent_message_chunk", a);
        chunk(session, "agent_message_chunk", b);
        self.remember(session, "agent", &reply);
        "end_turn"
    }

    fn call_id(&mut self) -> String {
        self.next_call += 1;
        format!("call-{}-{}", std::process::id(), self.next_call)
    }

    fn tool(&mut self, session: &str, cmd: &str) -> &'static str {
        let id = self.call_id();
        let call = json!({"toolCallId": id, "title": cmd, "kind": "execute",
            "status": "pending", "rawInput": {"command": cmd}});
        let mut announce = call.clone();
        announce["sessionUpdate"] = json!("tool_call");
        update(session, announce);
        let request = self.next_request;
        self.next_request += 1;
        send(
            json!({"jsonrpc": "2.0", "id": request, "method": "session/request_permission",
            "params": {"sessionId": session, "toolCall": call, "options": [
                {"optionId": "proceed_once", "name": "Allow", "kind": "allow_once"},
                {"optionId": "proceed_always", "name": "Allow always", "kind": "allow_always"},
                {"optionId": "cancel", "name": "Reject", "kind": "reject_once"},
            ]}}),
        );
        let status = |status: &str, text: &str| {
            update(
                session,
                json!({"sessionUpdate": "tool_call_update", "toolCallId": id, "status": status,
                    "content": [{"type": "content", "content": {"type": "text", "text": text}}]}),
            );
        };
        match self.wait(session, Some(request)) {
            Answer::Option(o) if o == "proceed_once" || o == "proceed_always" => {
                update(
                    session,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": id,
                        "status": "in_progress"}),
                );
                let out = std::process::Command::new("sh").arg("-c").arg(cmd).output();
                let ok = out.as_ref().is_ok_and(|o| o.status.success());
                let text = out
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_else(|e| e.to_string());
                status(if ok { "completed" } else { "failed" }, &text);
                let reply = format!("ran {cmd}");
                chunk(session, "agent_message_chunk", &reply);
                self.remember(session, "agent", &reply);
                "end_turn"
            }
            Answer::Option(_) => {
                status("failed", "the user rejected this call");
                let reply = format!("not allowed to run {cmd}");
                chunk(session, "agent_message_chunk", &reply);
                self.remember(session, "agent", &reply);
                "end_turn"
            }
            Answer::Cancelled => "cancelled",
        }
    }

    /// Reads until the answer to `request` (or, without one, until `session/cancel`). Other
    /// messages wait in the backlog for the next turn.
    fn wait(&mut self, session: &str, request: Option<u64>) -> Answer {
        let mut cancelled = false;
        while let Ok(msg) = self.rx.recv() {
            let method = msg["method"].as_str();
            if method == Some("session/cancel") && msg["params"]["sessionId"] == session {
                cancelled = true;
                if request.is_none() {
                    return Answer::Cancelled;
                }
                continue;
            }
            if method.is_none() && request.is_some() && msg["id"].as_u64() == request {
                let outcome = &msg["result"]["outcome"];
                return match (outcome["outcome"].as_str(), cancelled) {
                    (Some("selected"), false) => {
                        Answer::Option(outcome["optionId"].as_str().unwrap_or_default().into())
                    }
                    _ => Answer::Cancelled,
                };
            }
            self.backlog.push_back(msg);
        }
        std::process::exit(0);
    }
}

/// The script of a prompt that starts with `open` (a prompt quoting one, like a recovery brief,
/// is not a script).
fn script(text: &str, open: &str) -> Option<String> {
    let start = text.trim_start().strip_prefix(open).map(|_| open.len())?;
    let text = text.trim_start();
    let end = text[start..].find("]]")? + start;
    Some(text[start..end].to_owned())
}
