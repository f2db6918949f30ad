//! The `acp` adapter: any Agent Client Protocol agent (Gemini CLI's `--acp`, opencode, Goose,
//! the ACP adapters of Claude Code and Codex), JSON-RPC 2.0 over its stdio.
//!
//! [`rpc`] is the codec, [`map`] turns what the agent says into the same typed entries as the
//! `claude` adapter (so the fold, the watchdog, the recovery brief and the web client work
//! unchanged), `rpc_agent` runs the loop, and this module is the protocol:
//! `initialize`, then `session/new` (or
//! `session/load` to continue an earlier conversation), remote prompts as `session/prompt`
//! (queued while a turn runs: an ACP session takes one prompt at a time), an interrupt as
//! `session/cancel`, and `session/request_permission` answered only by a person's decision —
//! never by default, and never with an "always" option.

pub mod map;
pub mod rpc;

use std::collections::BTreeMap;
use std::path::Path;

use moor_protocol::payload::AgentSession;
use serde_json::{json, Value};

use self::map::{Mapper, Pending};
use self::rpc::Incoming;
use super::claude::decide::{not_pending, Decision};
use super::claude::map::error;
use super::claude::process::{Out, Process};
use super::rpc_agent::{self, Calls, Core, Protocol, RpcAgent};
use super::{AdapterDone, AdapterError, AdapterIo, AdapterKind, AgentSpec};
use crate::spool::Draft;

/// Whether `program` is an agent this adapter runs by default (`gemini`, or `codex-acp`, the
/// ACP adapter of Codex; by any path).
pub fn is_acp_agent(program: &str) -> bool {
    Path::new(program)
        .file_name()
        .is_some_and(|n| n == "gemini" || n == "codex-acp")
}

/// The command with what puts a known agent in ACP mode: `gemini` gets `--acp` unless it has
/// it (or the older `--experimental-acp`). Other commands are taken as given.
pub fn command_line(command: &[String]) -> Vec<String> {
    let mut argv = command.to_vec();
    let is_gemini = command
        .first()
        .is_some_and(|p| Path::new(p).file_name().is_some_and(|n| n == "gemini"));
    let has_flag = command[1.min(command.len())..]
        .iter()
        .any(|a| a == "--acp" || a == "--experimental-acp");
    if is_gemini && !has_flag {
        argv.push("--acp".into());
    }
    argv
}

/// Starts the ACP agent `spec` describes.
pub fn start(spec: &AgentSpec) -> Result<RpcAgent, AdapterError> {
    RpcAgent::start(spec, command_line(&spec.command))
}

/// Runs the started agent until it exits and `agent.exit` is spooled.
pub async fn run(agent: RpcAgent, io: AdapterIo) -> Result<AdapterDone, AdapterError> {
    agent
        .run(io, "ACP agent", |core| Run {
            core,
            mapper: Mapper::new(),
            pending: BTreeMap::new(),
            calls: Calls::default(),
            session_id: None,
            version: None,
            load_session: false,
            turn: false,
        })
        .await
}

/// A request of ours waiting for its answer.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    Initialize,
    NewSession,
    LoadSession(String),
    Prompt,
}

#[derive(Debug)]
struct Run {
    core: Core,
    mapper: Mapper,
    /// Permission requests waiting for a person, by the log's request id.
    pending: BTreeMap<String, Pending>,
    calls: Calls<Call>,
    session_id: Option<String>,
    version: Option<String>,
    load_session: bool,
    /// A `session/prompt` is unanswered.
    turn: bool,
}

impl Protocol for Run {
    const ADAPTER: &'static str = "acp";

    fn core(&mut self) -> &mut Core {
        &mut self.core
    }

    async fn started(&mut self, process: &mut Process) -> Result<(), AdapterError> {
        self.core.started(process, AdapterKind::Acp).await?;
        if let Err(e) = self
            .calls
            .send(
                process,
                Call::Initialize,
                "initialize",
                rpc::initialize_params(),
            )
            .await
        {
            self.core.record(vec![error(&e, None)]).await?;
        }
        Ok(())
    }

    fn ready(&self) -> bool {
        self.session_id.is_some()
    }

    async fn output(&mut self, process: &mut Process, out: Out, drafts: &mut Vec<Draft>) {
        let Some(line) = Core::stdout(out, drafts) else {
            return;
        };
        match rpc::parse(&line) {
            Incoming::Notification { method, params } if method == "session/update" => {
                let mapped = self.mapper.update(&params);
                self.core.observe(mapped, drafts);
            }
            Incoming::Notification { method, params } => {
                drafts.push(map::acp_event(&method, &params));
            }
            Incoming::Request { id, method, params } if method == "session/request_permission" => {
                let (mapped, request, pending) = self.mapper.permission(&id, &params);
                self.pending.insert(request.request_id, pending);
                self.core.observe(mapped, drafts);
            }
            Incoming::Request { id, method, params } => {
                drafts.push(map::acp_event(&method, &params));
                rpc_agent::refuse(process, &id, &method, drafts).await;
            }
            Incoming::Response { id, outcome } => {
                if let Some(call) = self.calls.answered(id, &line, drafts) {
                    self.answered(process, call, outcome, drafts).await;
                }
            }
            Incoming::Invalid(why) => drafts.push(error(
                &format!("the agent printed a line that is not ACP ({why})"),
                Some(&line),
            )),
        }
    }

    fn in_turn(&self) -> bool {
        self.turn
    }

    async fn prompt(&mut self, process: &mut Process, text: &str) -> Result<(), String> {
        let Some(session) = self.session_id.clone() else {
            return Err("the agent has no session yet".into());
        };
        self.calls
            .send(
                process,
                Call::Prompt,
                "session/prompt",
                rpc::prompt_params(&session, text),
            )
            .await?;
        self.turn = true;
        self.mapper.turn_started();
        self.core.watchdog.turn_started(Core::now());
        Ok(())
    }

    /// Answer a pending permission request with the person's decision and record who decided.
    async fn decide(&mut self, process: &mut Process, decision: &Decision) -> Result<(), String> {
        let request_id = decision.request_id.as_str();
        let Some(pending) = self.pending.get(request_id) else {
            return Err(not_pending(request_id));
        };
        let option = pending.option_for(decision.allow);
        if decision.allow && option.is_none() {
            return Err("the agent offered no option to allow this call once".into());
        }
        let answer = rpc::result(&pending.rpc_id, rpc::permission_outcome(option));
        process.send(&answer).await?;
        self.pending.remove(request_id);
        self.core.decided(decision).await
    }

    /// `session/cancel` for the running turn; pending permission requests are answered
    /// "cancelled", as the protocol asks.
    async fn interrupt(&mut self, process: &mut Process) -> Result<(), String> {
        let Some(session) = self.session_id.clone().filter(|_| self.turn) else {
            return Err("no turn is running".into());
        };
        process
            .send(&rpc::notification(
                "session/cancel",
                json!({"sessionId": session}),
            ))
            .await?;
        let mut drafts = Vec::new();
        for (id, pending) in std::mem::take(&mut self.pending) {
            process
                .send(&rpc::result(&pending.rpc_id, rpc::permission_outcome(None)))
                .await?;
            drafts.push(self.core.interrupted(&id));
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
    /// Asks for a new session in the agent's working directory.
    async fn new_session(&mut self, process: &mut Process, drafts: &mut Vec<Draft>) {
        let cwd = self.core.spec.cwd.display().to_string();
        let params = rpc::session_params(&cwd, None);
        self.calls
            .send_or_note(process, Call::NewSession, "session/new", params, drafts)
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
                let caps = result.get("agentCapabilities");
                self.load_session = caps
                    .and_then(|c| c.get("loadSession"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                self.version = result
                    .get("agentInfo")
                    .and_then(|i| i.get("version"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let name = result.get("agentInfo").and_then(|i| i.get("name"));
                self.mapper.replay_ends_with_commands = name == Some(&json!("gemini-cli"));
                drafts.push(map::acp_event("initialized", &result));
                let resume = self.core.continued_session();
                match resume {
                    Some(id) if self.load_session => {
                        self.mapper.replaying = true;
                        let cwd = self.core.spec.cwd.display().to_string();
                        let params = rpc::session_params(&cwd, Some(&id));
                        let call = Call::LoadSession(id);
                        self.calls
                            .send_or_note(process, call, "session/load", params, drafts)
                            .await;
                    }
                    Some(id) => {
                        drafts.push(error(&format!("the agent cannot load sessions; conversation {id} is not continued, a new one starts"), None));
                        self.new_session(process, drafts).await;
                    }
                    None => self.new_session(process, drafts).await,
                }
            }
            (Call::Initialize, Err(e)) => {
                let why = format!("the agent refused initialize: {e}; stopping it");
                self.core.give_up(process, &why, drafts);
            }
            (Call::NewSession, Ok(result)) => {
                let id = result
                    .get("sessionId")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                self.session_ready(process, id, &result, drafts).await;
            }
            (Call::LoadSession(id), Ok(result)) => {
                drafts.extend(self.mapper.replay_done());
                self.session_ready(process, Some(id), &result, drafts).await;
            }
            (Call::LoadSession(id), Err(e)) => {
                self.mapper.replay_ends_with_commands = false;
                drafts.extend(self.mapper.replay_done());
                drafts.push(error(
                    &format!("the agent could not load conversation {id} ({e}); a new one starts"),
                    None,
                ));
                self.new_session(process, drafts).await;
            }
            (Call::NewSession, Err(e)) => {
                let why = format!("the agent refused session/new: {e}; stopping it");
                self.core.give_up(process, &why, drafts);
            }
            (Call::Prompt, outcome) => {
                self.turn = false;
                let mapped = self.mapper.turn_ended(&outcome, self.session_id.as_deref());
                self.core.observe(mapped, drafts);
                rpc_agent::turn_over(self, process, drafts).await;
            }
        }
    }

    async fn session_ready(
        &mut self,
        process: &mut Process,
        id: Option<String>,
        result: &Value,
        drafts: &mut Vec<Draft>,
    ) {
        let Some(id) = id.filter(|id| !id.is_empty()) else {
            drafts.push(error(
                "the agent answered session/new without a session id",
                None,
            ));
            return;
        };
        self.session_id = Some(id.clone());
        let model = result
            .get("models")
            .and_then(|m| m.get("currentModelId"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        drafts.push(Draft::new(AgentSession {
            agent_session_id: Some(id),
            model,
            cwd: Some(self.core.spec.cwd.display().to_string()),
            tools: None,
            permission_mode: result
                .get("modes")
                .and_then(|m| m.get("currentModeId"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            version: self.version.clone(),
        }));
        rpc_agent::send_brief(self, process, drafts).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::argv;

    #[test]
    fn gemini_gets_its_acp_flag_once_and_other_agents_run_as_given() {
        for (given, run) in [
            ("/x/gemini -m m", "/x/gemini -m m --acp"),
            ("gemini --experimental-acp", "gemini --experimental-acp"),
            ("/x/codex-acp", "/x/codex-acp"),
            ("opencode acp", "opencode acp"),
        ] {
            assert_eq!(command_line(&argv(given)), argv(run), "{given}");
        }
    }
}
