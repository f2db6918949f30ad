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

/// Kind of the server-written entry that records an interruption. Payload: `{"cause":
/// "link"|"agent", "phase": Phase, "open_tools": [OpenTool], "pending_permissions": [...],
/// "partial_text": ...}`.
pub const SESSION_INTERRUPTED: &str = "session.interrupted";
/// Kind of the bridge entry that records a file mutation's intent before the tool runs.
/// Payload: `{"tool_use_id": ..., "path": ..., "before": <sha256 hex>|null}`; the outcome,
/// once known, as `{"tool_use_id": ..., "path": ..., "after": ..., "verdict":
/// "applied"|"not_applied"|"changed_elsewhere"}` under [`TOOL_INTENT_CHECKED`].
pub const TOOL_INTENT: &str = "agent.tool.intent";
/// Kind of the bridge entry that reports the intent check of a file mutation.
pub const TOOL_INTENT_CHECKED: &str = "agent.tool.intent_checked";
/// Kind of a checkpoint entry (see the checkpoints work); the fold keeps the last one.
pub const CHECKPOINT_CREATED: &str = "checkpoint.created";

/// Most characters of partial assistant text kept in the state.
pub const PARTIAL_TEXT_CHARS: usize = 4000;
/// Most recent prompts kept.
pub const PROMPTS_KEPT: usize = 3;
/// Most recent completed tool calls kept.
pub const COMPLETED_KEPT: usize = 20;
/// Most recent inputs kept once settled (unsettled ones are always kept).
pub const SETTLED_INPUTS_KEPT: usize = 20;

/// What the session is doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Waiting for a prompt.
    #[default]
    Idle,
    /// The model is producing a response.
    ModelStreaming,
    /// A tool call is running.
    ToolRunning,
    /// A tool call waits for a permission decision.
    AwaitingPermission,
    /// The link or the agent died mid-work; see the interruption record.
    Interrupted,
    /// The session has ended.
    Ended,
}

/// What a tool call may have changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ToolClass {
    /// Reads only; safe to repeat.
    ReadOnly,
    /// Writes one file; the intent check tells whether it landed.
    FileMutation,
    /// Runs something with unknown side effects; never repeat without asking.
    Command,
}

impl ToolClass {
    /// Classifies a tool by name (Claude Code's tool names; anything unknown is a command).
    pub fn of(tool: &str) -> Self {
        match tool {
            "Read"
            | "Glob"
            | "Grep"
            | "LS"
            | "WebFetch"
            | "WebSearch"
            | "TodoWrite"
            | "TodoRead"
            | "NotebookRead"
            | "BashOutput"
            | "ListMcpResourcesTool"
            | "ReadMcpResourceTool" => ToolClass::ReadOnly,
            "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => ToolClass::FileMutation,
            _ => ToolClass::Command,
        }
    }
}

/// A tool call that started and has no result yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OpenTool {
    /// The agent's tool_use id.
    pub id: String,
    /// Tool name.
    pub tool: String,
    /// The file it targets, or the command it runs.
    pub target: Option<String>,
    /// What it may change.
    pub class: ToolClass,
    /// When it started (ms).
    pub started_at: i64,
    /// Seq of its `agent.tool_use` entry.
    pub seq: Seq,
    /// The tool's input as the agent gave it.
    pub input: Value,
    /// Content hash of the target file before the call, when the bridge recorded one.
    pub intent_before: Option<String>,
    /// Outcome of the intent check, when known (`applied`, `not_applied`, `changed_elsewhere`).
    pub intent_verdict: Option<String>,
}

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

/// A permission request nobody has decided yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PendingPermission {
    /// The agent's request id.
    pub request_id: String,
    /// Tool asking.
    pub tool_name: String,
    /// Its tool_use id, if given.
    pub tool_use_id: Option<String>,
    /// File it targets, if any.
    pub path: Option<String>,
    /// Seq of the request entry.
    pub seq: Seq,
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
    /// Tool calls without a result, in start order.
    pub open_tools: Vec<OpenTool>,
    /// The last completed tool calls, oldest first.
    pub completed_tools: Vec<CompletedTool>,
    /// Permission requests nobody has decided.
    pub pending_permissions: Vec<PendingPermission>,
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
}

fn str_field(p: &Value, key: &str) -> Option<String> {
    p.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn push_bounded<T>(v: &mut Vec<T>, item: T, max: usize) {
    v.push(item);
    if v.len() > max {
        let excess = v.len() - max;
        v.drain(..excess);
    }
}

/// The tool's target: the file for file tools, the command for shell tools.
fn tool_target(payload: &Value) -> Option<String> {
    str_field(payload, "path").or_else(|| {
        let input = payload.get("input")?;
        str_field(input, "file_path")
            .or_else(|| str_field(input, "notebook_path"))
            .or_else(|| str_field(input, "command"))
            .or_else(|| str_field(input, "pattern"))
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
        let p = &e.payload;
        let ok = match e.kind.as_str() {
            k::AGENT_START => {
                self.agent.running = true;
                self.agent.cwd = str_field(p, "cwd").or(self.agent.cwd.take());
                self.agent.adapter = str_field(p, "adapter").or(self.agent.adapter.take());
                if self.phase == Phase::Ended || self.phase == Phase::Interrupted {
                    self.phase = Phase::Idle;
                }
                true
            }
            k::AGENT_EXIT => {
                self.agent.running = false;
                self.agent.exit_code = p.get("code").and_then(Value::as_i64);
                self.agent.exit_signal = p.get("signal").and_then(Value::as_i64);
                true
            }
            k::AGENT_RESTART => {
                self.agent.restarts += 1;
                self.agent.stalled = false;
                true
            }
            k::AGENT_SESSION => {
                self.agent.agent_session_id = str_field(p, "agent_session_id");
                self.agent.model = str_field(p, "model");
                self.agent.cwd = str_field(p, "cwd").or(self.agent.cwd.take());
                true
            }
            k::AGENT_TEXT_DELTA => self.on_text(p, true),
            k::AGENT_TEXT => self.on_text(p, false),
            k::AGENT_THINKING => {
                self.set_working();
                true
            }
            k::AGENT_TOOL_USE => self.on_tool_use(e),
            k::AGENT_TOOL_RESULT => self.on_tool_result(p),
            TOOL_INTENT | TOOL_INTENT_CHECKED => self.on_intent(p),
            k::AGENT_TODOS => match p.get("todos") {
                Some(t) => {
                    self.todos = t.clone();
                    true
                }
                None => false,
            },
            k::AGENT_RESULT => {
                self.turn.finished = true;
                self.counts.turns += 1;
                // Results end the turn; anything still open will never get a result.
                self.open_tools.clear();
                self.pending_permissions.clear();
                self.phase = Phase::Idle;
                true
            }
            k::AGENT_ERROR => {
                self.counts.errors += 1;
                true
            }
            k::AGENT_PERMISSION_REQUEST => match str_field(p, "request_id") {
                Some(request_id) => {
                    self.pending_permissions.push(PendingPermission {
                        request_id,
                        tool_name: str_field(p, "tool_name").unwrap_or_default(),
                        tool_use_id: str_field(p, "tool_use_id"),
                        path: str_field(p, "path"),
                        seq: e.seq,
                    });
                    self.phase = Phase::AwaitingPermission;
                    true
                }
                None => false,
            },
            k::AGENT_PERMISSION_RESOLVED => match str_field(p, "request_id") {
                Some(id) => {
                    self.pending_permissions.retain(|r| r.request_id != id);
                    if self.phase == Phase::AwaitingPermission
                        && self.pending_permissions.is_empty()
                    {
                        self.phase = self.working_phase();
                    }
                    true
                }
                None => false,
            },
            k::AGENT_STALLED => {
                self.agent.stalled = true;
                true
            }
            k::AGENT_ACTIVE => {
                self.agent.stalled = false;
                true
            }
            k::AGENT_OUTPUT
            | k::AGENT_PTY_OUTPUT
            | k::AGENT_PTY_RESIZE
            | k::AGENT_USER
            | k::AGENT_EVENT => true,
            k::BRIDGE_CONNECTED => {
                self.link = LinkState {
                    up: true,
                    since: Some(e.ts),
                    reason: None,
                    close_code: None,
                };
                true
            }
            k::BRIDGE_DISCONNECTED => {
                self.link = LinkState {
                    up: false,
                    since: Some(e.ts),
                    reason: str_field(p, "reason"),
                    close_code: p
                        .get("close_code")
                        .and_then(Value::as_u64)
                        .map(|c| c as u16),
                };
                true
            }
            SESSION_INTERRUPTED => {
                self.counts.interruptions += 1;
                self.phase = Phase::Interrupted;
                true
            }
            CHECKPOINT_CREATED => {
                self.last_checkpoint = Some(p.clone());
                self.files_since_checkpoint.clear();
                true
            }
            k::SESSION_ENDED => {
                self.phase = Phase::Ended;
                true
            }
            kind if k::is_input(kind) => self.on_input(e),
            kind if k::RECEIPTS.contains(&kind) => self.on_receipt(kind, p),
            _ => {
                self.counts.unknown_kinds += 1;
                true
            }
        };
        if !ok {
            self.counts.malformed += 1;
        }
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

    fn on_text(&mut self, p: &Value, delta: bool) -> bool {
        let Some(text) = p.get("text").and_then(Value::as_str) else {
            return false;
        };
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
        true
    }

    fn on_tool_use(&mut self, e: &Entry) -> bool {
        let p = &e.payload;
        let (Some(id), Some(tool)) = (str_field(p, "id"), str_field(p, "name")) else {
            return false;
        };
        let class = ToolClass::of(&tool);
        let target = tool_target(p);
        if class == ToolClass::FileMutation {
            if let Some(path) = &target {
                self.files_touched.insert(path.clone());
                self.files_since_checkpoint.insert(path.clone());
            }
        }
        self.counts.tool_calls += 1;
        self.open_tools.push(OpenTool {
            id,
            tool,
            target,
            class,
            started_at: e.ts,
            seq: e.seq,
            input: p.get("input").cloned().unwrap_or(Value::Null),
            intent_before: None,
            intent_verdict: None,
        });
        if self.phase != Phase::AwaitingPermission {
            self.phase = Phase::ToolRunning;
        }
        true
    }

    fn on_tool_result(&mut self, p: &Value) -> bool {
        let Some(id) = str_field(p, "tool_use_id") else {
            return false;
        };
        let Some(pos) = self.open_tools.iter().position(|t| t.id == id) else {
            // A result for a call we never saw (e.g. before a snapshot boundary bug): count it.
            return false;
        };
        let call = self.open_tools.remove(pos);
        let done = CompletedTool {
            call,
            is_error: p.get("is_error").and_then(Value::as_bool).unwrap_or(false),
            summary: str_field(p, "summary").unwrap_or_default(),
        };
        push_bounded(&mut self.completed_tools, done, COMPLETED_KEPT);
        // A result after an interruption means the agent is alive and working again.
        if matches!(self.phase, Phase::ToolRunning | Phase::Interrupted) {
            self.phase = self.working_phase();
        }
        true
    }

    fn on_intent(&mut self, p: &Value) -> bool {
        let Some(id) = str_field(p, "tool_use_id") else {
            return false;
        };
        let tool = self
            .open_tools
            .iter_mut()
            .chain(self.completed_tools.iter_mut().map(|c| &mut c.call))
            .find(|t| t.id == id);
        match tool {
            Some(t) => {
                if let Some(before) = str_field(p, "before") {
                    t.intent_before = Some(before);
                }
                if let Some(verdict) = str_field(p, "verdict") {
                    t.intent_verdict = Some(verdict);
                }
                true
            }
            None => false,
        }
    }

    fn on_input(&mut self, e: &Entry) -> bool {
        if e.kind == k::INPUT_TEXT {
            match str_field(&e.payload, "text") {
                Some(text) => {
                    push_bounded(&mut self.prompts, text.clone(), PROMPTS_KEPT);
                    self.turn = TurnState {
                        prompt: Some(text),
                        partial_text: String::new(),
                        finished: false,
                    };
                }
                None => return false,
            }
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

    fn on_receipt(&mut self, kind: &str, p: &Value) -> bool {
        let Some(seq) = p.get("input_seq").and_then(Value::as_u64).map(Seq) else {
            return false;
        };
        let status = match kind {
            k::INPUT_DELIVERED => InputStatus::Delivered,
            k::INPUT_APPLIED => InputStatus::Applied,
            k::INPUT_FAILED => InputStatus::Failed,
            _ => InputStatus::Uncertain,
        };
        let Some(input) = self.inputs.iter_mut().find(|i| i.seq == seq) else {
            return true;
        };
        // A late `delivered` never downgrades a settled input.
        if !(status == InputStatus::Delivered && input.status != InputStatus::Queued) {
            input.status = status;
        }
        // A prompt applied to a turn-based agent starts a model turn; a shell or a line agent
        // that read a line is not "answering" (nothing would ever end that phase).
        let turn_based = !matches!(self.agent.adapter.as_deref(), Some("pty" | "lines"));
        if status == InputStatus::Applied
            && input.kind == k::INPUT_TEXT
            && turn_based
            && matches!(self.phase, Phase::Idle | Phase::Interrupted)
        {
            self.phase = Phase::ModelStreaming;
        }
        self.trim_inputs();
        true
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
    pub fn interruption(&self, cause: &str) -> Value {
        serde_json::json!({
            "cause": cause,
            "phase": self.phase,
            "open_tools": self.open_tools,
            "pending_permissions": self.pending_permissions,
            "partial_text": self.turn.partial_text,
        })
    }
}
