//! The `codex` adapter: the Codex CLI's `codex app-server`, JSON-RPC 2.0 over its stdio.
//!
//! [`map`] turns what the app-server says into the same typed entries as the `claude` and `acp`
//! adapters; the JSON-RPC codec is [`acp::rpc`](super::acp::rpc)'s, and what is not protocol
//! (the run loop, spooling, the watchdog, the prompt queue) is `rpc_agent`'s.
//! This module is the protocol: `initialize` and `initialized`, then `thread/start` (or
//! `thread/resume` to continue an earlier thread), prompts as `turn/start`, an interrupt as
//! `turn/interrupt`, and the app-server's approval requests answered only by a person's
//! decision (`accept` or `decline`, never "for the session", never by default).

pub mod map;

use std::collections::BTreeMap;
use std::path::Path;

use moor_protocol::payload::AgentSession;
use serde_json::{json, Value};

use self::map::{codex_event, Mapper};
use super::acp::map::Mapped;
use super::acp::rpc::{self, Incoming};
use super::claude::decide::{not_pending, Decision};
use super::claude::map::error;
use super::claude::process::{Out, Process};
use super::rpc_agent::{self, Calls, Core, Protocol, RpcAgent};
use super::{AdapterDone, AdapterError, AdapterIo, AdapterKind, AgentSpec};
use crate::spool::Draft;

/// The approval requests `moor` puts to a person.
const APPROVALS: [&str; 2] = [
    "item/commandExecution/requestApproval",
    "item/fileChange/requestApproval",
];

/// Whether `program` is the Codex CLI (`codex`, by any path).
pub fn is_codex(program: &str) -> bool {
    Path::new(program).file_name().is_some_and(|n| n == "codex")
}

/// Whether `command` runs the Codex CLI's app-server: `codex` (by any path) with no subcommand
/// (`moor` adds it) or with `app-server`; `codex exec …`, `codex login` or `codex "a prompt"`
/// are other programs.
pub fn runs_app_server(command: &[String]) -> bool {
    /// Codex's global options that take a value.
    const VALUED: [&str; 14] = [
        "-c",
        "--config",
        "--enable",
        "--disable",
        "-m",
        "--model",
        "-p",
        "--profile",
        "-s",
        "--sandbox",
        "-a",
        "--ask-for-approval",
        "-C",
        "--cd",
    ];
    let Some((program, args)) = command.split_first() else {
        return false;
    };
    let mut args = args.iter();
    let first_word = loop {
        match args.next() {
            Some(a) if VALUED.contains(&a.as_str()) => {
                args.next();
            }
            Some(a) if a.starts_with('-') => {}
            other => break other,
        }
    };
    is_codex(program) && first_word.is_none_or(|w| w == "app-server")
}

/// The command with `app-server` after the program when it is the Codex CLI and the command
/// does not name it already; other commands (an app-server of another name) run as given.
pub fn command_line(command: &[String]) -> Vec<String> {
    let mut argv = command.to_vec();
    let named = command.iter().skip(1).any(|a| a == "app-server");
    if command.first().is_some_and(|p| is_codex(p)) && !named {
        argv.insert(1, "app-server".into());
    }
    argv
}

/// Whether the command sets Codex's approval policy itself (`-c approval_policy=…`): then
/// `moor` does not ask for `untrusted` in `thread/start`.
fn sets_approval_policy(command: &[String]) -> bool {
    command.iter().any(|a| {
        a.trim_start_matches("--config=")
            .starts_with("approval_policy=")
    })
}

/// Starts `codex app-server` as `spec` describes.
pub fn start(spec: &AgentSpec) -> Result<RpcAgent, AdapterError> {
    RpcAgent::start(spec, command_line(&spec.command))
}

/// Runs the started app-server until it exits and `agent.exit` is spooled.
pub async fn run(agent: RpcAgent, io: AdapterIo) -> Result<AdapterDone, AdapterError> {
    agent
        .run(io, "Codex", |core| Run {
            ask_untrusted: !sets_approval_policy(&core.spec.command),
            core,
            mapper: Mapper::new(),
            pending: BTreeMap::new(),
            calls: Calls::default(),
            thread_id: None,
            turn_id: None,
            version: None,
            turn: false,
            interrupt_wanted: false,
        })
        .await
}

/// A request of ours waiting for its answer.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    Initialize,
    StartThread,
    ResumeThread(String),
    StartTurn,
    Interrupt,
}

#[derive(Debug)]
struct Run {
    core: Core,
    mapper: Mapper,
    /// Approval requests waiting for a person: the log's request id → the app-server's id.
    pending: BTreeMap<String, Value>,
    calls: Calls<Call>,
    thread_id: Option<String>,
    /// The running turn, once the app-server named it.
    turn_id: Option<String>,
    version: Option<String>,
    /// Ask for the `untrusted` approval policy (every command but known-safe ones is asked
    /// for), which Codex no longer takes from `config.toml`.
    ask_untrusted: bool,
    /// A turn was started and has not completed.
    turn: bool,
    /// An interrupt came before the app-server named the turn.
    interrupt_wanted: bool,
}

impl Protocol for Run {
    const ADAPTER: &'static str = "codex";

    fn core(&mut self) -> &mut Core {
        &mut self.core
    }

    async fn started(&mut self, process: &mut Process) -> Result<(), AdapterError> {
        self.core.started(process, AdapterKind::Codex).await?;
        let params = json!({
            "clientInfo": {"name": "moor", "title": "Mooring", "version": env!("CARGO_PKG_VERSION")},
            "capabilities": null,
        });
        if let Err(e) = self
            .calls
            .send(process, Call::Initialize, "initialize", params)
            .await
        {
            self.core.record(vec![error(&e, None)]).await?;
        }
        Ok(())
    }

    fn ready(&self) -> bool {
        self.thread_id.is_some()
    }

    async fn output(&mut self, process: &mut Process, out: Out, drafts: &mut Vec<Draft>) {
        let Some(line) = Core::stdout(out, drafts) else {
            return;
        };
        match rpc::parse(&line) {
            Incoming::Notification { method, params } => {
                if method == "turn/started" {
                    self.turn_named(process, params.get("turn"), drafts).await;
                }
                let mapped = self.mapper.notification(&method, &params);
                if method == "turn/completed" {
                    self.turn_ended(process, mapped, drafts).await;
                } else {
                    self.core.observe(mapped, drafts);
                }
            }
            Incoming::Request { id, method, params } if APPROVALS.contains(&method.as_str()) => {
                let (mapped, request) = self.mapper.approval(&id, &method, &params);
                self.pending.insert(request.request_id, id);
                self.core.observe(mapped, drafts);
            }
            Incoming::Request { id, method, params } => {
                drafts.push(codex_event(&method, &params));
                rpc_agent::refuse(process, &id, &method, drafts).await;
            }
            Incoming::Response { id, outcome } => {
                if let Some(call) = self.calls.answered(id, &line, drafts) {
                    self.answered(process, call, outcome, drafts).await;
                }
            }
            Incoming::Invalid(why) => drafts.push(error(
                &format!("the agent printed a line that is not JSON-RPC ({why})"),
                Some(&line),
            )),
        }
    }

    fn in_turn(&self) -> bool {
        self.turn
    }

    async fn prompt(&mut self, process: &mut Process, text: &str) -> Result<(), String> {
        let Some(thread) = self.thread_id.clone() else {
            return Err("the agent has no thread yet".into());
        };
        let params = json!({
            "threadId": thread,
            "input": [{"type": "text", "text": text, "text_elements": []}],
        });
        self.calls
            .send(process, Call::StartTurn, "turn/start", params)
            .await?;
        self.turn = true;
        self.turn_id = None;
        self.core.watchdog.turn_started(Core::now());
        Ok(())
    }

    /// Answers a pending approval with the person's decision (`accept` or `decline`) and
    /// records who decided.
    async fn decide(&mut self, process: &mut Process, decision: &Decision) -> Result<(), String> {
        let request_id = decision.request_id.as_str();
        let Some(rpc_id) = self.pending.get(request_id) else {
            return Err(not_pending(request_id));
        };
        let answer = if decision.allow { "accept" } else { "decline" };
        process
            .send(&rpc::result(rpc_id, json!({ "decision": answer })))
            .await?;
        self.pending.remove(request_id);
        self.core.decided(decision).await
    }

    /// `turn/interrupt` for the running turn (sent once the app-server names the turn, when it
    /// has not yet); pending approvals are answered `cancel` first.
    async fn interrupt(&mut self, process: &mut Process) -> Result<(), String> {
        let Some(thread) = self.thread_id.clone().filter(|_| self.turn) else {
            return Err("no turn is running".into());
        };
        let mut drafts = Vec::new();
        for (id, rpc_id) in std::mem::take(&mut self.pending) {
            process
                .send(&rpc::result(&rpc_id, json!({"decision": "cancel"})))
                .await?;
            drafts.push(self.core.interrupted(&id));
        }
        match self.turn_id.clone() {
            Some(turn) => self.send_interrupt(process, thread, turn).await?,
            None => self.interrupt_wanted = true,
        }
        self.core.record(drafts).await.map_err(|e| e.to_string())
    }

    fn pending(&self) -> Vec<String> {
        self.pending.keys().cloned().collect()
    }

    fn take_pending(&mut self) -> Vec<String> {
        std::mem::take(&mut self.pending).into_keys().collect()
    }
}

impl Run {
    fn thread_params(&self, resume: Option<&str>) -> Value {
        let mut params = json!({"cwd": self.core.spec.cwd.display().to_string()});
        if self.ask_untrusted {
            params["approvalPolicy"] = json!("untrusted");
        }
        if let Some(id) = resume {
            params["threadId"] = json!(id);
            // The history is in the log already, from the run that lived it.
            params["excludeTurns"] = json!(true);
        }
        params
    }

    async fn start_thread(&mut self, process: &mut Process, drafts: &mut Vec<Draft>) {
        let params = self.thread_params(None);
        self.calls
            .send_or_note(process, Call::StartThread, "thread/start", params, drafts)
            .await;
    }

    async fn answered(
        &mut self,
        process: &mut Process,
        call: Call,
        outcome: Result<Value, String>,
        drafts: &mut Vec<Draft>,
    ) {
        match (call, outcome) {
            (Call::Initialize, Ok(result)) => {
                // "moor/0.171.0 (Debian 12; x86_64) …": the app-server's version after our name.
                self.version = result
                    .get("userAgent")
                    .and_then(Value::as_str)
                    .and_then(|ua| ua.split_whitespace().next())
                    .and_then(|first| first.split_once('/'))
                    .map(|(_, v)| v.to_owned());
                drafts.push(codex_event("initialized", &result));
                if let Err(e) = process
                    .send(&rpc::notification("initialized", Value::Null))
                    .await
                {
                    drafts.push(error(&e, None));
                }
                let resume = self.core.continued_session();
                match resume {
                    Some(id) => {
                        let params = self.thread_params(Some(&id));
                        let call = Call::ResumeThread(id);
                        self.calls
                            .send_or_note(process, call, "thread/resume", params, drafts)
                            .await;
                    }
                    None => self.start_thread(process, drafts).await,
                }
            }
            (Call::Initialize | Call::StartThread, Err(e)) => {
                let why = format!("the agent refused to start: {e}; stopping it");
                self.core.give_up(process, &why, drafts);
            }
            (Call::StartThread | Call::ResumeThread(_), Ok(result)) => {
                self.thread_ready(process, &result, drafts).await;
            }
            (Call::ResumeThread(id), Err(e)) => {
                drafts.push(error(
                    &format!("the agent could not resume thread {id} ({e}); a new one starts"),
                    None,
                ));
                self.start_thread(process, drafts).await;
            }
            (Call::StartTurn, Ok(result)) => {
                self.turn_named(process, result.get("turn"), drafts).await;
            }
            (Call::StartTurn, Err(e)) => {
                // No turn runs: close it as the app-server would have.
                let failed = json!({"threadId": self.thread_id, "turn": {"status": "failed", "error": {"message": e}}});
                let mapped = self.mapper.turn_completed(&failed);
                self.turn_ended(process, mapped, drafts).await;
            }
            (Call::Interrupt, Ok(_)) => {}
            (Call::Interrupt, Err(e)) => {
                drafts.push(error(
                    &format!("the agent refused turn/interrupt: {e}"),
                    None,
                ));
            }
        }
    }

    async fn thread_ready(
        &mut self,
        process: &mut Process,
        result: &Value,
        drafts: &mut Vec<Draft>,
    ) {
        let thread = result.get("thread").unwrap_or(&Value::Null);
        let Some(id) = thread
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
        else {
            drafts.push(error("the agent started a thread without an id", None));
            return;
        };
        self.thread_id = Some(id.to_owned());
        let text = |k: &str| result.get(k).and_then(Value::as_str).map(str::to_owned);
        drafts.push(Draft::new(AgentSession {
            agent_session_id: Some(id.to_owned()),
            model: text("model"),
            cwd: text("cwd").or_else(|| Some(self.core.spec.cwd.display().to_string())),
            tools: None,
            permission_mode: result.get("approvalPolicy").map(|p| match p {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }),
            version: self.version.clone(),
        }));
        rpc_agent::send_brief(self, process, drafts).await;
    }

    /// The app-server named the running turn (`turn/started`, or the answer to `turn/start`):
    /// an interrupt asked for before is sent now.
    async fn turn_named(
        &mut self,
        process: &mut Process,
        turn: Option<&Value>,
        drafts: &mut Vec<Draft>,
    ) {
        let id = turn.and_then(|t| t.get("id")).and_then(Value::as_str);
        let (Some(id), None, Some(thread)) = (id, &self.turn_id, self.thread_id.clone()) else {
            return;
        };
        self.turn_id = Some(id.to_owned());
        if std::mem::take(&mut self.interrupt_wanted) {
            if let Err(e) = self.send_interrupt(process, thread, id.to_owned()).await {
                drafts.push(error(&e, None));
            }
        }
    }

    async fn send_interrupt(
        &mut self,
        process: &mut Process,
        thread: String,
        turn: String,
    ) -> Result<(), String> {
        let params = json!({"threadId": thread, "turnId": turn});
        self.calls
            .send(process, Call::Interrupt, "turn/interrupt", params)
            .await
    }

    /// The turn completed: its entries, pending questions withdrawn, the next queued prompt.
    async fn turn_ended(&mut self, process: &mut Process, mapped: Mapped, drafts: &mut Vec<Draft>) {
        self.turn = false;
        self.turn_id = None;
        self.interrupt_wanted = false;
        self.core.observe(mapped, drafts);
        rpc_agent::turn_over(self, process, drafts).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::argv;

    #[test]
    fn codex_gets_app_server_once_and_other_commands_run_as_given() {
        for (given, run) in [
            (
                r#"/x/codex -c model="o3""#,
                r#"/x/codex app-server -c model="o3""#,
            ),
            ("codex app-server", "codex app-server"),
            ("my-app-server", "my-app-server"),
        ] {
            assert_eq!(command_line(&argv(given)), argv(run), "{given}");
        }
        assert!(is_codex("/opt/bin/codex"));
        assert!(!is_codex("codex-acp"));
    }

    #[test]
    fn auto_mode_takes_codex_for_its_app_server_not_for_its_other_commands() {
        for (line, app_server) in [
            ("/x/codex", true),
            (r#"codex -c model="o3" --enable x"#, true),
            ("codex app-server --listen stdio://", true),
            ("codex exec fix-it", false),
            ("codex -m o3 a-prompt", false),
            ("codex-acp", false),
        ] {
            assert_eq!(runs_app_server(&argv(line)), app_server, "{line}");
        }
    }

    #[test]
    fn a_policy_given_on_the_command_line_is_left_alone() {
        assert!(sets_approval_policy(&argv(
            r#"codex -c approval_policy="never""#
        )));
        assert!(!sets_approval_policy(&argv(r#"codex -c model="o3""#)));
    }
}
