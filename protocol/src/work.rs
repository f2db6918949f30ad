//! The vocabulary of work in flight, shared by the state fold and the payloads that record it
//! (`session.interrupted`): what a session is doing, which tool calls are open, which
//! permission requests wait. Pure data; it depends on nothing but ids.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::Seq;

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
