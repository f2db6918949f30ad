//! The state fold: a pure, deterministic function from log entries to a [`SessionState`].
//!
//! The server keeps it current for live sessions and stores snapshots of it; clients may run it
//! too. It never fails: an unknown kind or a malformed payload is counted, not fatal. Folding a
//! snapshot and then the rest of the log gives the same state as folding the whole log, because
//! the state holds everything the fold reads (the property tests check this).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::entry::Entry;
use crate::ids::Seq;
use crate::kinds as k;
use crate::payload::{
    AgentCapabilities, AgentTerminal, AgentToolResult, AgentToolUse, BodyError, EntryBody,
    SessionInterrupted, SessionLink,
};

pub use crate::kinds::{CHECKPOINT_CREATED, SESSION_INTERRUPTED, TOOL_INTENT, TOOL_INTENT_CHECKED};
pub use crate::work::{OpenTool, PendingPermission, Phase, ToolClass};

/// Most characters of partial assistant text kept in the state.
pub const PARTIAL_TEXT_CHARS: usize = 4000;
/// Most recent prompts kept.
pub const PROMPTS_KEPT: usize = 3;
/// Most recent completed tool calls kept.
pub const COMPLETED_KEPT: usize = 20;
/// Most recent inputs kept once settled (unsettled ones are always kept).
pub const SETTLED_INPUTS_KEPT: usize = 20;
/// How many interrupted tool calls and expired permission requests the state keeps.
pub const INTERRUPTED_KEPT: usize = 20;

/// A tool call that returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompletedTool {
    /// The call.
    #[serde(flatten)]
    pub call: OpenTool,
    /// Whether the tool reported an error.
    pub is_error: bool,
    /// Bounded summary of its result.
    pub summary: String,
}

/// Where a remote input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum InputStatus {
    /// Stored; the bridge has not confirmed it.
    Queued,
    /// The bridge has it.
    Delivered,
    /// Applied to the agent.
    Applied,
    /// The bridge could not apply it.
    Failed,
    /// The bridge crashed while applying it; it will not be replayed.
    Uncertain,
}

/// A remote input and its receipt state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputState {
    /// Its seq.
    pub seq: Seq,
    /// Its kind.
    pub kind: String,
    /// Who sent it.
    pub author: String,
    /// Where it is.
    pub status: InputStatus,
}

/// The bridge link as the log tells it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LinkState {
    /// A bridge connection is up.
    pub up: bool,
    /// Since when (ms).
    pub since: Option<i64>,
    /// Why the last connection ended.
    pub reason: Option<String>,
    /// Its close code.
    pub close_code: Option<u16>,
}

/// The agent process as the log tells it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentState {
    /// Started and not exited.
    pub running: bool,
    /// Exit code of the last exit.
    pub exit_code: Option<i64>,
    /// Signal of the last exit.
    pub exit_signal: Option<i64>,
    /// Times the bridge restarted it.
    pub restarts: u32,
    /// The agent's own session id (Claude Code), needed to resume it.
    pub agent_session_id: Option<String>,
    /// Model in use.
    pub model: Option<String>,
    /// Working directory.
    pub cwd: Option<String>,
    /// Reported stalled and not active again.
    pub stalled: bool,
    /// The bridge's adapter (`claude`, `pty`, `lines`) from `agent.start`. Only a turn-based
    /// agent (Claude Code) answers a prompt with a model turn.
    #[serde(default)]
    pub adapter: Option<String>,
    /// What the adapter can know (from `agent.start`), when it said.
    #[serde(default)]
    pub capabilities: Option<AgentCapabilities>,
    /// When the agent last wrote output (ms; `agent.output`, `agent.pty.output`), for "last
    /// output 3 s ago" where no turn phase can be known.
    #[serde(default)]
    pub last_output_at: Option<i64>,
    /// Who holds a shell agent's terminal (`agent.terminal`), while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub terminal: Option<AgentTerminal>,
}

impl AgentState {
    /// Whether the agent answers a prompt with a turn whose phases it reports (Claude Code):
    /// as its adapter declared, else by the adapter's name.
    pub fn has_turns(&self) -> bool {
        match self.capabilities {
            Some(c) => c.turns,
            None => !matches!(self.adapter.as_deref(), Some("pty" | "lines")),
        }
    }
}

/// The current turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TurnState {
    /// The prompt that started it.
    pub prompt: Option<String>,
    /// Assistant text streamed so far in this turn (bounded).
    pub partial_text: String,
    /// Whether the turn has a final result.
    pub finished: bool,
}

/// Counters, including what the fold could not understand.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Counts {
    /// Entries folded.
    pub entries: u64,
    /// Tool calls started.
    pub tool_calls: u64,
    /// Turns finished.
    pub turns: u64,
    /// Agent errors reported.
    pub errors: u64,
    /// Entries of kinds the fold does not know.
    pub unknown_kinds: u64,
    /// Entries whose payload lacked what the fold needed.
    pub malformed: u64,
    /// Interruptions recorded.
    pub interruptions: u64,
}

/// Everything the server knows about a session from its log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionState {
    /// Seq of the last entry folded.
    pub head: Seq,
    /// What the session is doing.
    pub phase: Phase,
    /// The bridge link.
    pub link: LinkState,
    /// The agent process.
    pub agent: AgentState,
    /// The current (or last) turn.
    pub turn: TurnState,
    /// The last prompts, oldest first.
    pub prompts: Vec<String>,
    /// The prompts since the last finished turn, oldest first: what is still to be done.
    #[serde(default)]
    pub open_prompts: Vec<String>,
    /// Tool calls without a result, in start order.
    pub open_tools: Vec<OpenTool>,
    /// The last completed tool calls, oldest first.
    pub completed_tools: Vec<CompletedTool>,
    /// Permission requests nobody has decided, asked by the agent that runs now.
    pub pending_permissions: Vec<PendingPermission>,
    /// What the agent left unsettled when it exited, restarted or was cut off; cleared when a
    /// turn completes.
    #[serde(default)]
    pub interrupted: Interrupted,
    /// Remote inputs: every unsettled one and the last settled ones.
    pub inputs: Vec<InputState>,
    /// The agent's todo list as last reported.
    pub todos: Value,
    /// Files that file-mutating tools targeted.
    pub files_touched: BTreeSet<String>,
    /// Files touched since the last checkpoint.
    pub files_since_checkpoint: BTreeSet<String>,
    /// The last checkpoint entry's payload.
    pub last_checkpoint: Option<Value>,
    /// Counters.
    pub counts: Counts,
    /// The ended session this one continues (`moor resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub continued_from: Option<SessionLink>,
    /// The session this ended one was continued in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub continued_in: Option<SessionLink>,
}

/// Work that will never finish: the tool calls and permission requests of an agent that
/// exited, restarted or was cut off. They are never pending again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Interrupted {
    /// Tool calls that never got a result: their effects are uncertain.
    pub tools: Vec<OpenTool>,
    /// Permission requests that expired undecided.
    pub permissions: Vec<PendingPermission>,
}

fn push_bounded<T>(v: &mut Vec<T>, item: T, max: usize) {
    v.push(item);
    if v.len() > max {
        let excess = v.len() - max;
        v.drain(..excess);
    }
}

/// The tool's target: the file for file tools, else what the tool's input (an agent-defined
/// object) names: a notebook, a command, a pattern.
fn tool_target(call: &AgentToolUse) -> Option<String> {
    call.path.clone().or_else(|| {
        ["file_path", "notebook_path", "command", "pattern"]
            .into_iter()
            .find_map(|key| call.input.get(key).and_then(Value::as_str))
            .map(str::to_owned)
    })
}

impl SessionState {
    /// Folds every entry of `entries` into a fresh state.
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Self {
        let mut s = Self::default();
        for e in entries {
            s.apply(e);
        }
        s
    }

    /// Folds one entry. Entries at or below `head` are ignored, so re-applying is harmless.
    pub fn apply(&mut self, e: &Entry) {
        if e.seq <= self.head && self.head != Seq::ZERO {
            return;
        }
        self.head = e.seq;
        self.counts.entries += 1;
        let ok = match e.body() {
            Ok(body) => self.apply_body(e, body),
            // An input kind nobody models yet is still an input with a receipt state.
            Err(BodyError::UnknownKind) if k::is_input(&e.kind) => self.on_input(e, None),
            Err(BodyError::UnknownKind) => {
                self.counts.unknown_kinds += 1;
                true
            }
            Err(BodyError::Malformed(_)) => false,
        };
        if !ok {
            self.counts.malformed += 1;
        }
    }

    /// Folds a decoded entry; false when it cannot be placed (a result for an unseen call).
    fn apply_body(&mut self, e: &Entry, body: EntryBody) -> bool {
        match body {
            EntryBody::AgentStart(p) => {
                // A new process: nothing the previous one had in flight is pending any more.
                self.settle();
                self.agent.running = true;
                self.agent.cwd = p.cwd.or(self.agent.cwd.take());
                self.agent.adapter = p.adapter.or(self.agent.adapter.take());
                self.agent.capabilities = p.capabilities;
                self.agent.terminal = None;
                self.phase = Phase::Idle;
            }
            EntryBody::AgentExit(p) => {
                self.settle_dead_agent();
                self.agent.running = false;
                self.agent.terminal = None;
                self.agent.exit_code = p.code.map(i64::from);
                self.agent.exit_signal = p.signal.map(i64::from);
            }
            EntryBody::AgentRestart(_) => {
                self.settle_dead_agent();
                self.agent.restarts += 1;
                self.agent.stalled = false;
            }
            EntryBody::AgentTerminal(p) => self.agent.terminal = Some(p),
            EntryBody::AgentSession(p) => {
                self.agent.agent_session_id = p.agent_session_id;
                self.agent.model = p.model;
                self.agent.cwd = p.cwd.or(self.agent.cwd.take());
            }
            EntryBody::AgentTextDelta(p) => self.on_text(&p.text, true),
            EntryBody::AgentText(p) => self.on_text(&p.text, false),
            EntryBody::AgentThinking(_) => self.set_working(),
            EntryBody::AgentToolUse(p) => self.on_tool_use(e, p),
            EntryBody::AgentToolResult(p) => return self.on_tool_result(p),
            EntryBody::ToolIntent(p) => return self.on_intent(&p.tool_use_id, p.before, None),
            EntryBody::ToolIntentChecked(p) => {
                return self.on_intent(&p.tool_use_id, None, p.verdict)
            }
            EntryBody::AgentTodos(p) => {
                self.todos = serde_json::to_value(p.todos).unwrap_or(Value::Null);
            }
            EntryBody::AgentResult(_) => {
                self.turn.finished = true;
                self.counts.turns += 1;
                // Results end the turn; anything still open will never get a result, and what
                // an earlier interruption left is behind a completed turn.
                self.open_tools.clear();
                self.pending_permissions.clear();
                self.interrupted = Interrupted::default();
                self.open_prompts.clear();
                self.phase = Phase::Idle;
            }
            EntryBody::AgentError(_) => self.counts.errors += 1,
            EntryBody::AgentPermissionRequest(p) => {
                self.pending_permissions.push(PendingPermission {
                    request_id: p.request_id,
                    tool_name: p.tool_name,
                    tool_use_id: p.tool_use_id,
                    path: p.path,
                    seq: e.seq,
                });
                self.phase = Phase::AwaitingPermission;
            }
            EntryBody::AgentPermissionResolved(p) => {
                self.pending_permissions
                    .retain(|r| r.request_id != p.request_id);
                if self.phase == Phase::AwaitingPermission && self.pending_permissions.is_empty() {
                    self.phase = self.working_phase();
                }
            }
            EntryBody::AgentStalled(_) => self.agent.stalled = true,
            EntryBody::AgentActive(_) => self.agent.stalled = false,
            EntryBody::AgentOutput(_) | EntryBody::AgentPtyOutput(_) => {
                self.agent.last_output_at = Some(e.ts);
            }
            EntryBody::AgentPtyResize(_) | EntryBody::AgentUser(_) | EntryBody::AgentEvent(_) => {}
            EntryBody::BridgeConnected(_) => {
                self.link = LinkState {
                    up: true,
                    since: Some(e.ts),
                    reason: None,
                    close_code: None,
                };
            }
            EntryBody::BridgeDisconnected(p) => {
                self.link = LinkState {
                    up: false,
                    since: Some(e.ts),
                    reason: p.reason,
                    close_code: p.close_code,
                };
            }
            EntryBody::SessionInterrupted(_) => {
                self.settle();
                self.counts.interruptions += 1;
                self.phase = Phase::Interrupted;
            }
            EntryBody::CheckpointCreated(_) => {
                // The stored payload as it came, so fields a newer bridge adds are kept.
                self.last_checkpoint = Some(e.payload.clone());
                self.files_since_checkpoint.clear();
            }
            // Work cut off stays visible as such: the session ended with it unfinished.
            EntryBody::SessionEnded(_) if self.phase == Phase::Interrupted => {}
            EntryBody::SessionEnded(_) => self.phase = Phase::Ended,
            EntryBody::SessionContinuedFrom(p) => self.continued_from = Some(p.from),
            EntryBody::SessionContinuedIn(p) => self.continued_in = Some(p.to),
            EntryBody::InputText(p) => return self.on_input(e, Some(p.text)),
            EntryBody::InputKeys(_)
            | EntryBody::InputResize(_)
            | EntryBody::InputInterrupt(_)
            | EntryBody::InputPermission(_) => return self.on_input(e, None),
            EntryBody::InputDelivered(p) => self.on_receipt(InputStatus::Delivered, p.input_seq),
            EntryBody::InputApplied(p) => self.on_receipt(InputStatus::Applied, p.input_seq),
            EntryBody::InputFailed(p) => self.on_receipt(InputStatus::Failed, p.input_seq),
            EntryBody::InputUncertain(p) => self.on_receipt(InputStatus::Uncertain, p.input_seq),
        }
        true
    }

    /// Moves every open tool call and pending permission request to [`Interrupted`]: the agent
    /// that started them is gone, so no result or decision can come for them.
    fn settle(&mut self) {
        for tool in std::mem::take(&mut self.open_tools) {
            push_bounded(&mut self.interrupted.tools, tool, INTERRUPTED_KEPT);
        }
        for request in std::mem::take(&mut self.pending_permissions) {
            push_bounded(&mut self.interrupted.permissions, request, INTERRUPTED_KEPT);
        }
    }

    /// [`Self::settle`] for an agent that exited or is being restarted: work it had in flight
    /// was interrupted.
    fn settle_dead_agent(&mut self) {
        if self.is_busy() {
            self.phase = Phase::Interrupted;
        }
        self.settle();
    }

    /// The phase while work goes on: a tool if one is open, else the model.
    fn working_phase(&self) -> Phase {
        if self.open_tools.is_empty() {
            Phase::ModelStreaming
        } else {
            Phase::ToolRunning
        }
    }

    fn set_working(&mut self) {
        if matches!(self.phase, Phase::Idle | Phase::Interrupted) {
            self.phase = self.working_phase();
        }
    }

    fn on_text(&mut self, text: &str, delta: bool) {
        self.set_working();
        if delta {
            self.turn.partial_text.push_str(text);
        } else {
            // A complete block replaces what its deltas built up.
            self.turn.partial_text = text.to_owned();
        }
        if self.turn.partial_text.chars().count() > PARTIAL_TEXT_CHARS {
            let skip = self.turn.partial_text.chars().count() - PARTIAL_TEXT_CHARS;
            self.turn.partial_text = self.turn.partial_text.chars().skip(skip).collect();
        }
    }

    fn on_tool_use(&mut self, e: &Entry, call: AgentToolUse) {
        let class = ToolClass::of(&call.name);
        let target = tool_target(&call);
        if class == ToolClass::FileMutation {
            if let Some(path) = &target {
                self.files_touched.insert(path.clone());
                self.files_since_checkpoint.insert(path.clone());
            }
        }
        self.counts.tool_calls += 1;
        self.open_tools.push(OpenTool {
            id: call.id,
            tool: call.name,
            target,
            class,
            started_at: e.ts,
            seq: e.seq,
            input: call.input,
            intent_before: None,
            intent_verdict: None,
        });
        if self.phase != Phase::AwaitingPermission {
            self.phase = Phase::ToolRunning;
        }
    }

    fn on_tool_result(&mut self, result: AgentToolResult) -> bool {
        let id = result.tool_use_id;
        let Some(pos) = self.open_tools.iter().position(|t| t.id == id) else {
            // A result for a call we never saw (e.g. before a snapshot boundary bug): count it.
            return false;
        };
        let call = self.open_tools.remove(pos);
        let done = CompletedTool {
            call,
            is_error: result.is_error,
            summary: result.summary,
        };
        push_bounded(&mut self.completed_tools, done, COMPLETED_KEPT);
        // A result after an interruption means the agent is alive and working again.
        if matches!(self.phase, Phase::ToolRunning | Phase::Interrupted) {
            self.phase = self.working_phase();
        }
        true
    }

    fn on_intent(&mut self, id: &str, before: Option<String>, verdict: Option<String>) -> bool {
        let tool = self
            .open_tools
            .iter_mut()
            .chain(self.completed_tools.iter_mut().map(|c| &mut c.call))
            .find(|t| t.id == id);
        match tool {
            Some(t) => {
                if before.is_some() {
                    t.intent_before = before;
                }
                if verdict.is_some() {
                    t.intent_verdict = verdict;
                }
                true
            }
            None => false,
        }
    }

    /// Records a remote input; `prompt` is the text of an `input.text`, which starts a turn.
    fn on_input(&mut self, e: &Entry, prompt: Option<String>) -> bool {
        if let Some(text) = prompt {
            push_bounded(&mut self.prompts, text.clone(), PROMPTS_KEPT);
            push_bounded(&mut self.open_prompts, text.clone(), PROMPTS_KEPT);
            self.turn = TurnState {
                prompt: Some(text),
                partial_text: String::new(),
                finished: false,
            };
        }
        self.inputs.push(InputState {
            seq: e.seq,
            kind: e.kind.clone(),
            author: e.author.clone(),
            status: InputStatus::Queued,
        });
        self.trim_inputs();
        true
    }

    fn on_receipt(&mut self, status: InputStatus, seq: Seq) {
        let Some(input) = self.inputs.iter_mut().find(|i| i.seq == seq) else {
            return;
        };
        // A late `delivered` never downgrades a settled input.
        if !(status == InputStatus::Delivered && input.status != InputStatus::Queued) {
            input.status = status;
        }
        // A prompt applied to a turn-based agent starts a model turn; a shell or a line agent
        // that read a line is not "answering" (nothing would ever end that phase).
        let turn_based = self.agent.has_turns();
        if status == InputStatus::Applied
            && input.kind == k::INPUT_TEXT
            && turn_based
            && matches!(self.phase, Phase::Idle | Phase::Interrupted)
        {
            self.phase = Phase::ModelStreaming;
        }
        self.trim_inputs();
    }

    fn trim_inputs(&mut self) {
        let settled =
            |i: &InputState| !matches!(i.status, InputStatus::Queued | InputStatus::Delivered);
        let n_settled = self.inputs.iter().filter(|i| settled(i)).count();
        if n_settled > SETTLED_INPUTS_KEPT {
            let mut drop = n_settled - SETTLED_INPUTS_KEPT;
            self.inputs.retain(|i| {
                if drop > 0 && settled(i) {
                    drop -= 1;
                    false
                } else {
                    true
                }
            });
        }
    }

    /// Whether work was going on: an interruption now would leave something in flight.
    pub fn is_busy(&self) -> bool {
        matches!(
            self.phase,
            Phase::ModelStreaming | Phase::ToolRunning | Phase::AwaitingPermission
        ) || !self.open_tools.is_empty()
    }

    /// The payload of a `session.interrupted` entry for an interruption happening now.
    pub fn interruption(&self, cause: &str) -> SessionInterrupted {
        SessionInterrupted {
            cause: cause.to_owned(),
            phase: self.phase,
            open_tools: self.open_tools.clone(),
            pending_permissions: self.pending_permissions.clone(),
            partial_text: self.turn.partial_text.clone(),
        }
    }
}
