//! One type per entry kind: the payloads producers write and readers decode.
//!
//! [`EntryBody`] pairs a kind with its payload (`{"kind": ..., "payload": ...}`, a discriminated
//! union in TypeScript). [`crate::Entry`] keeps its raw payload on the wire and in the store, so
//! a kind nobody here knows passes through unchanged; decoding ([`crate::Entry::body`]) is for
//! readers, and a kind's constant in [`crate::kinds`] is checked against its variant by the
//! tests below. Fields a reader can do without default when missing, so an older or sparser
//! producer still decodes; only what a reader cannot do without is required.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bridge::AgentInfo;
use crate::checkpoint::CheckpointSummary;
use crate::entry::{Entry, NewEntry};
use crate::ids::{ProducerId, Seq, SessionId};
use crate::kinds as k;
use crate::work::{OpenTool, PendingPermission, Phase};

/// Which of the agent's output streams a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// `agent.output`: a line (or chunk) the agent wrote. Sent by the `lines` adapter, and by the
/// `claude` adapter for Claude Code's stderr.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentOutput {
    /// The stream it came from.
    pub stream: OutputStream,
    /// The text, lossily decoded as UTF-8.
    pub text: String,
}

/// `agent.start`: the bridge started the agent process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentStart {
    /// The command and its arguments, as run (`claude`: with the adapter's flags, and
    /// `--resume <id>` when it continues a conversation).
    #[serde(default)]
    pub command: Vec<String>,
    /// Working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Process id.
    #[serde(default)]
    pub pid: Option<u32>,
    /// The bridge's adapter: `claude`, `pty` or `lines`.
    #[serde(default)]
    pub adapter: Option<String>,
    /// Terminal width (`pty` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub cols: Option<u16>,
    /// Terminal height (`pty` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub rows: Option<u16>,
    /// What the adapter can know about the agent; readers fall back on `adapter` without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub capabilities: Option<AgentCapabilities>,
}

/// What an adapter can know about its agent, declared in `agent.start`, so that readers show
/// only what can be proven: a `lines` or `pty` agent has no turns, only `running` / `exited`
/// and when it last wrote something.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentCapabilities {
    /// It reports turns and their phases (model streaming, tool running, awaiting permission,
    /// idle waiting for a prompt): Claude Code's structured mode.
    #[serde(default)]
    pub turns: bool,
    /// Its output is logged as it comes, so the time of the last output is known.
    #[serde(default)]
    pub output_activity: bool,
    /// It can tell whether the agent waits on its terminal for input.
    #[serde(default)]
    pub terminal_wait: bool,
}

/// `agent.terminal`: who holds a shell agent's terminal now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentTerminal {
    /// The shell itself is in the foreground: it waits at its prompt for input.
    pub waiting: bool,
    /// The foreground process group's leader's command name (at most 64 bytes).
    #[serde(default)]
    pub foreground: String,
    /// That process's id.
    #[serde(default)]
    pub pid: u32,
}

/// `agent.exit`: the agent process ended. Also the `previous_exit` of an [`AgentRestart`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentExit {
    /// Exit code, if it exited.
    #[serde(default)]
    pub code: Option<i32>,
    /// Signal number, if a signal killed it.
    #[serde(default)]
    pub signal: Option<i32>,
    /// Tool calls still running when it ended; their processes were stopped (`claude`).
    #[serde(default)]
    pub stopped_tools: Vec<StalledTool>,
    /// Processes it started that were still running when it ended, which the bridge stopped
    /// (at most 64 listed).
    #[serde(default)]
    pub stopped_processes: Vec<StoppedProcess>,
}

/// A process the agent left running when it ended, stopped by the bridge.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoppedProcess {
    /// Its process id.
    pub pid: u32,
    /// Its command line (at most 256 characters).
    #[serde(default)]
    pub command: String,
    /// It ignored SIGTERM for the grace period and was killed (SIGKILL).
    #[serde(default)]
    pub killed: bool,
}

/// `agent.pty.output`: bytes the agent wrote to its terminal (`pty` adapter), batched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentPtyOutput {
    /// Base64 of the raw bytes (at most [`k::PTY_OUTPUT_MAX_BYTES`] of them).
    pub data: String,
}

/// Who changed the terminal's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ResizeSource {
    /// The terminal `moor` runs in.
    Local,
    /// A remote `input.resize`.
    Remote,
    /// The size at start.
    Start,
}

/// `agent.pty.resize`: the agent's terminal changed size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentPtyResize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
    /// Who changed it.
    pub source: ResizeSource,
}

/// `agent.session`: Claude Code announced its session (logged when it changes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentSession {
    /// Claude Code's own session id, needed to resume it.
    #[serde(default)]
    pub agent_session_id: Option<String>,
    /// Model in use.
    #[serde(default)]
    pub model: Option<String>,
    /// Working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Tools offered to the model.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Permission mode (`default`, `acceptEdits`, ...).
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// Claude Code's version.
    #[serde(default)]
    pub version: Option<String>,
}

/// `agent.text.delta`: a piece of assistant text as it streams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentTextDelta {
    /// The API message it belongs to.
    #[serde(default)]
    pub message_id: Option<String>,
    /// Content block index within the message.
    #[serde(default)]
    pub index: Option<u32>,
    /// The new text.
    pub text: String,
}

/// `agent.text`: a complete assistant text block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentText {
    /// The API message it belongs to.
    #[serde(default)]
    pub message_id: Option<String>,
    /// The text.
    pub text: String,
    /// The tool call (a subagent) it was produced under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub parent_tool_use_id: Option<String>,
}

/// `agent.thinking`: a complete assistant thinking block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentThinking {
    /// The API message it belongs to.
    #[serde(default)]
    pub message_id: Option<String>,
    /// The thinking text.
    #[serde(default)]
    pub text: String,
    /// The tool call (a subagent) it was produced under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub parent_tool_use_id: Option<String>,
}

/// `agent.user`: text of a user turn as the agent reports it, or a prompt typed where `moor`
/// runs (`source: "local"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentUser {
    /// The text.
    #[serde(default)]
    pub text: String,
    /// `local` for a prompt typed at the bridge's terminal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub source: Option<String>,
}

/// `agent.tool_use`: the agent called a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentToolUse {
    /// The call's id; its result names it.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// The file a file tool works on.
    #[serde(default)]
    pub path: Option<String>,
    /// The tool's input as the agent gave it.
    #[serde(default)]
    pub input: Value,
    /// The tool call (a subagent) it was made under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub parent_tool_use_id: Option<String>,
}

/// `agent.tool_result`: a tool finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentToolResult {
    /// The call it answers.
    pub tool_use_id: String,
    /// Whether the tool reported an error.
    #[serde(default)]
    pub is_error: bool,
    /// At most [`k::TOOL_RESULT_SUMMARY_CHARS`] characters of the result.
    #[serde(default)]
    pub summary: String,
    /// Size of the full result, in bytes.
    #[serde(default)]
    pub bytes: u64,
    /// Whether `summary` is cut short.
    #[serde(default)]
    pub truncated: bool,
}

/// One item of the agent's todo list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Todo {
    /// What to do.
    #[serde(default)]
    pub content: String,
    /// `pending`, `in_progress` or `completed`.
    #[serde(default)]
    pub status: String,
    /// The item in the present continuous ("Running the tests").
    #[serde(
        rename = "activeForm",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub active_form: Option<String>,
}

/// `agent.todos`: the agent's todo list changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentTodos {
    /// The whole list.
    pub todos: Vec<Todo>,
}

/// `agent.result`: a turn ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentResult {
    /// `success` or `error_…`.
    #[serde(default)]
    pub subtype: Option<String>,
    /// Whether the turn failed.
    #[serde(default)]
    pub is_error: bool,
    /// Wall time of the turn.
    #[serde(default)]
    pub duration_ms: Option<u64>,
    /// Time spent in API calls.
    #[serde(default)]
    pub duration_api_ms: Option<u64>,
    /// Model turns it took.
    #[serde(default)]
    pub num_turns: Option<u32>,
    /// Cost in US dollars.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// The final text (bounded).
    #[serde(default)]
    pub result: Option<String>,
    /// Errors as Claude Code reported them.
    #[serde(default)]
    pub errors: Option<Value>,
    /// Why the turn stopped.
    #[serde(default)]
    pub terminal_reason: Option<String>,
    /// Claude Code's session id.
    #[serde(default)]
    pub agent_session_id: Option<String>,
    /// Tool calls the permission callback denied.
    #[serde(default)]
    pub permission_denials: u32,
}

/// `agent.error`: something went wrong on the agent side: a line the bridge could not read, a
/// model API error the agent retries (`reason` `api_retry`), a turn that failed (`reason` its
/// terminal reason or subtype, next to its `agent.result`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentError {
    /// What went wrong.
    #[serde(default)]
    pub message: String,
    /// The offending output line (bounded), if there was one.
    #[serde(default)]
    pub line: Option<String>,
    /// `api_retry`, or a failed turn's terminal reason (`api_error`, `error_during_execution`,
    /// `error_max_turns`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub reason: Option<String>,
    /// Model API retries in the turn so far (this one included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub retries: Option<u32>,
    /// The model API's HTTP status, when it answered with an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub status: Option<u16>,
}

/// `agent.event`: an agent event of a type the adapter does not model, kept as it came.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentEvent {
    /// The event's `type`.
    #[serde(rename = "type", default)]
    pub event_type: Option<String>,
    /// The event's `subtype`.
    #[serde(default)]
    pub subtype: Option<String>,
    /// The event, or its first characters as a string when it is too large.
    #[serde(default)]
    pub raw: Value,
    /// The tool call (a subagent) it came under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub parent_tool_use_id: Option<String>,
}

/// `agent.permission.request`: the agent asks whether it may run a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentPermissionRequest {
    /// The agent's request id, answered by `input.permission`.
    pub request_id: String,
    /// The tool asking.
    #[serde(default)]
    pub tool_name: String,
    /// Its tool call id, if given.
    #[serde(default)]
    pub tool_use_id: Option<String>,
    /// The tool's input.
    #[serde(default)]
    pub input: Value,
    /// The file it targets, if any.
    #[serde(default)]
    pub path: Option<String>,
    /// The agent's description of the request.
    #[serde(default)]
    pub description: Option<String>,
}

/// How a permission request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// The tool may run.
    Allow,
    /// The tool may not run.
    Deny,
    /// The agent withdrew the request.
    Cancelled,
}

/// `agent.permission.resolved`: a permission request was decided or withdrawn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentPermissionResolved {
    /// The request.
    pub request_id: String,
    /// The outcome.
    pub decision: Resolution,
    /// Who decided (an author, or `local`).
    #[serde(default)]
    pub by: Option<String>,
    /// The `input.permission` that decided it.
    #[serde(default)]
    pub input_seq: Option<Seq>,
    /// Why, when it was not a person's decision.
    #[serde(default)]
    pub reason: Option<String>,
}

/// A tool call by id and name: the one running when the agent went silent (`agent.stalled`), or
/// one still running when the agent ended (`agent.exit`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StalledTool {
    /// Tool call id.
    pub id: String,
    /// Tool name.
    pub name: String,
}

/// `agent.stalled`: the agent has been silent too long while it should be working.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentStalled {
    /// `streaming` or `tool`.
    #[serde(default)]
    pub phase: String,
    /// How long it has been silent.
    #[serde(default)]
    pub silent_ms: u64,
    /// The limit it passed.
    #[serde(default)]
    pub timeout_ms: u64,
    /// The running tool, when one runs.
    #[serde(default)]
    pub tool: Option<StalledTool>,
}

/// `agent.active`: a stalled agent produced output again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentActive {
    /// What it recovered from (`stall`).
    #[serde(default)]
    pub after: String,
}

/// `agent.restart`: the bridge stopped and restarted the agent on the same agent session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentRestart {
    /// `stalled` or `crashed` (an automatic restart), or `continued` (`moor run --session` again).
    #[serde(default)]
    pub reason: String,
    /// The agent session it resumed.
    #[serde(default)]
    pub agent_session_id: String,
    /// Restarts so far, this one included.
    #[serde(default)]
    pub attempt: u32,
    /// The recovery prompt sent first.
    #[serde(default)]
    pub prompt: String,
    /// How the previous process ended, if it did on its own.
    #[serde(default)]
    pub previous_exit: Option<AgentExit>,
}

/// `agent.tool.intent`: a file mutation's intent, recorded before the tool runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolIntent {
    /// The call.
    pub tool_use_id: String,
    /// The file.
    #[serde(default)]
    pub path: String,
    /// SHA-256 (hex) of the file before, `null` when it did not exist.
    #[serde(default)]
    pub before: Option<String>,
}

/// `agent.tool.intent_checked`: whether a file mutation landed, checked after its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolIntentChecked {
    /// The call.
    pub tool_use_id: String,
    /// The file.
    #[serde(default)]
    pub path: String,
    /// SHA-256 (hex) of the file after, `null` when it does not exist.
    #[serde(default)]
    pub after: Option<String>,
    /// `applied`, `not_applied` or `changed_elsewhere`.
    #[serde(default)]
    pub verdict: Option<String>,
}

/// `input.text`: remote text for the agent's input (a prompt, or a line).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputText {
    /// The text.
    pub text: String,
}

/// `input.keys`: remote keystrokes for a terminal agent, as text or as raw bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputKeys {
    /// UTF-8 keys, sent as they are (Enter is `"\r"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub text: Option<String>,
    /// Base64 of raw bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub data: Option<String>,
}

/// `input.resize`: resize the agent's terminal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputResize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

/// `input.interrupt`: stop the agent's current turn. No fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputInterrupt {}

/// A person's answer to a permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PermissionDecision {
    /// Let the tool run.
    Allow,
    /// Refuse it.
    Deny,
}

/// `input.permission`: decide a pending `agent.permission.request`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputPermission {
    /// The request; may be left out while exactly one request is pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub request_id: Option<String>,
    /// The answer.
    pub decision: PermissionDecision,
    /// Told to the agent on deny.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub message: Option<String>,
}

/// `input.delivered`: the bridge received an input. Written by the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputDelivered {
    /// The input's seq.
    pub input_seq: Seq,
}

/// `input.applied`: the bridge applied an input to the agent. Written by the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputApplied {
    /// The input's seq.
    pub input_seq: Seq,
    /// `handshake` when a reconnecting bridge reported it rather than a receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub reported: Option<String>,
}

/// `input.failed`: the bridge could not apply an input. Written by the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputFailed {
    /// The input's seq.
    pub input_seq: Seq,
    /// Why, in plain words.
    #[serde(default)]
    pub reason: String,
}

/// `input.uncertain`: the bridge crashed while applying an input. Written by the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputUncertain {
    /// The input's seq.
    pub input_seq: Seq,
}

/// `bridge.connected`: a bridge connection was established. Written by the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BridgeConnected {
    /// The server's id for the connection.
    #[serde(default)]
    pub connection: u64,
    /// The bridge's producer identity.
    #[serde(default)]
    pub producer: Option<ProducerId>,
    /// What the bridge runs.
    #[serde(default)]
    pub agent: Option<AgentInfo>,
}

/// `bridge.disconnected`: a bridge connection ended. Written by the server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BridgeDisconnected {
    /// The server's id for the connection.
    #[serde(default)]
    pub connection: u64,
    /// Why, in plain words.
    #[serde(default)]
    pub reason: Option<String>,
    /// The WebSocket close code sent, if any.
    #[serde(default)]
    pub close_code: Option<u16>,
}

/// `session.ended`: the agent is gone and everything it produced is stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionEnded {
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Another session, as a session's log points to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionLink {
    /// Its id.
    pub session: SessionId,
    /// Its name.
    #[serde(default)]
    pub name: String,
}

/// `session.continued_from`: this session continues an ended one (`moor resume`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionContinuedFrom {
    /// The ended session.
    #[serde(flatten)]
    pub from: SessionLink,
}

/// `session.continued_in`: this ended session was continued in another (`moor resume`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionContinuedIn {
    /// The session it continues in.
    #[serde(flatten)]
    pub to: SessionLink,
}

/// `session.interrupted`: work was cut off (the link or the agent died mid-work). Written by
/// the server from the state before the interruption.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionInterrupted {
    /// `link` or `agent`.
    #[serde(default)]
    pub cause: String,
    /// What the session was doing.
    #[serde(default)]
    pub phase: Phase,
    /// Tool calls without a result.
    #[serde(default)]
    pub open_tools: Vec<OpenTool>,
    /// Permission requests nobody had decided.
    #[serde(default)]
    pub pending_permissions: Vec<PendingPermission>,
    /// Assistant text streamed so far in the turn.
    #[serde(default)]
    pub partial_text: String,
}

/// Why a payload did not decode into an [`EntryBody`].
#[derive(Debug)]
pub enum BodyError {
    /// No variant has this kind (a newer producer's kind): keep the entry as it is.
    UnknownKind,
    /// The kind is known but its payload does not have the expected shape.
    Malformed(serde_json::Error),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownKind => f.write_str("unknown entry kind"),
            Self::Malformed(e) => write!(f, "malformed payload: {e}"),
        }
    }
}

impl std::error::Error for BodyError {}

/// Declares [`EntryBody`] from one list of `Variant(Type) = kinds::CONST => "wire name"`, so
/// the enum, its kind list, decoding and the `From` impls cannot disagree; the tests check that
/// each wire name equals its constant.
macro_rules! entry_bodies {
    ($( $variant:ident($ty:ty) = $kind:path => $name:literal, )*) => {
        /// A typed entry: its kind and the payload of that kind. Encodes as `{"kind": ...,
        /// "payload": ...}`, the same two fields as [`crate::Entry`], so an entry narrows into it.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(tag = "kind", content = "payload")]
        #[allow(missing_docs)]
        pub enum EntryBody {
            $( #[serde(rename = $name)] $variant($ty), )*
        }

        impl EntryBody {
            /// Every kind with a variant, in declaration order.
            pub const KINDS: &'static [&'static str] = &[$($kind),*];

            /// This body's kind, one of [`crate::kinds`]'s constants.
            pub fn kind(&self) -> &'static str {
                match self {
                    $( Self::$variant(_) => $kind, )*
                }
            }

            /// Decodes `payload` as the payload of `kind`.
            pub fn decode(kind: &str, payload: &Value) -> Result<Self, BodyError> {
                let decoded = match kind {
                    $( $kind => <$ty>::deserialize(payload).map(Self::$variant), )*
                    _ => return Err(BodyError::UnknownKind),
                };
                decoded.map_err(BodyError::Malformed)
            }

            /// The `(kind, payload)` pair of an entry with this body.
            pub fn to_parts(&self) -> (String, Value) {
                (self.kind().to_owned(), self.payload())
            }

            /// The payload as JSON, as it goes on the wire.
            pub fn payload(&self) -> Value {
                let encoded = match self {
                    $( Self::$variant(p) => serde_json::to_value(p), )*
                };
                // Payload types are plain structs with string keys: encoding cannot fail.
                encoded.unwrap_or(Value::Null)
            }
        }

        $(
            impl From<$ty> for EntryBody {
                fn from(p: $ty) -> Self {
                    Self::$variant(p)
                }
            }
        )*
    };
}

entry_bodies! {
    AgentOutput(AgentOutput) = k::AGENT_OUTPUT => "agent.output",
    AgentExit(AgentExit) = k::AGENT_EXIT => "agent.exit",
    AgentStart(AgentStart) = k::AGENT_START => "agent.start",
    AgentPtyOutput(AgentPtyOutput) = k::AGENT_PTY_OUTPUT => "agent.pty.output",
    AgentPtyResize(AgentPtyResize) = k::AGENT_PTY_RESIZE => "agent.pty.resize",
    AgentTerminal(AgentTerminal) = k::AGENT_TERMINAL => "agent.terminal",
    AgentSession(AgentSession) = k::AGENT_SESSION => "agent.session",
    AgentTextDelta(AgentTextDelta) = k::AGENT_TEXT_DELTA => "agent.text.delta",
    AgentText(AgentText) = k::AGENT_TEXT => "agent.text",
    AgentThinking(AgentThinking) = k::AGENT_THINKING => "agent.thinking",
    AgentUser(AgentUser) = k::AGENT_USER => "agent.user",
    AgentToolUse(AgentToolUse) = k::AGENT_TOOL_USE => "agent.tool_use",
    AgentToolResult(AgentToolResult) = k::AGENT_TOOL_RESULT => "agent.tool_result",
    AgentTodos(AgentTodos) = k::AGENT_TODOS => "agent.todos",
    AgentResult(AgentResult) = k::AGENT_RESULT => "agent.result",
    AgentError(AgentError) = k::AGENT_ERROR => "agent.error",
    AgentEvent(AgentEvent) = k::AGENT_EVENT => "agent.event",
    AgentPermissionRequest(AgentPermissionRequest) = k::AGENT_PERMISSION_REQUEST => "agent.permission.request",
    AgentPermissionResolved(AgentPermissionResolved) = k::AGENT_PERMISSION_RESOLVED => "agent.permission.resolved",
    AgentStalled(AgentStalled) = k::AGENT_STALLED => "agent.stalled",
    AgentActive(AgentActive) = k::AGENT_ACTIVE => "agent.active",
    AgentRestart(AgentRestart) = k::AGENT_RESTART => "agent.restart",
    ToolIntent(ToolIntent) = k::TOOL_INTENT => "agent.tool.intent",
    ToolIntentChecked(ToolIntentChecked) = k::TOOL_INTENT_CHECKED => "agent.tool.intent_checked",
    InputText(InputText) = k::INPUT_TEXT => "input.text",
    InputKeys(InputKeys) = k::INPUT_KEYS => "input.keys",
    InputResize(InputResize) = k::INPUT_RESIZE => "input.resize",
    InputInterrupt(InputInterrupt) = k::INPUT_INTERRUPT => "input.interrupt",
    InputPermission(InputPermission) = k::INPUT_PERMISSION => "input.permission",
    InputDelivered(InputDelivered) = k::INPUT_DELIVERED => "input.delivered",
    InputApplied(InputApplied) = k::INPUT_APPLIED => "input.applied",
    InputFailed(InputFailed) = k::INPUT_FAILED => "input.failed",
    InputUncertain(InputUncertain) = k::INPUT_UNCERTAIN => "input.uncertain",
    BridgeConnected(BridgeConnected) = k::BRIDGE_CONNECTED => "bridge.connected",
    BridgeDisconnected(BridgeDisconnected) = k::BRIDGE_DISCONNECTED => "bridge.disconnected",
    CheckpointCreated(CheckpointSummary) = k::CHECKPOINT_CREATED => "checkpoint.created",
    SessionInterrupted(SessionInterrupted) = k::SESSION_INTERRUPTED => "session.interrupted",
    SessionEnded(SessionEnded) = k::SESSION_ENDED => "session.ended",
    SessionContinuedFrom(SessionContinuedFrom) = k::SESSION_CONTINUED_FROM => "session.continued_from",
    SessionContinuedIn(SessionContinuedIn) = k::SESSION_CONTINUED_IN => "session.continued_in",
}

impl Entry {
    /// The typed body of this entry: [`BodyError::UnknownKind`] for a kind this crate does not
    /// model (kept and forwarded as it is), [`BodyError::Malformed`] for a known kind whose
    /// payload has the wrong shape.
    pub fn body(&self) -> Result<EntryBody, BodyError> {
        EntryBody::decode(&self.kind, &self.payload)
    }
}

impl NewEntry {
    /// An entry of `body`'s kind with its payload, as a producer writes it.
    pub fn typed(producer_seq: u64, ts: i64, body: impl Into<EntryBody>) -> Self {
        let (kind, payload) = body.into().to_parts();
        Self {
            producer_seq,
            ts,
            kind,
            payload,
        }
    }

    /// The typed body of this entry, as [`Entry::body`].
    pub fn body(&self) -> Result<EntryBody, BodyError> {
        EntryBody::decode(&self.kind, &self.payload)
    }
}

#[cfg(test)]
#[path = "payload_tests.rs"]
mod tests;
