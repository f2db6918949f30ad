//! The recovery brief: what a person or a resumed agent needs to know after an interruption,
//! derived from the [`SessionState`] alone: the goal, what completed, what is uncertain (with
//! advice per tool class), the partial answer, the todo list, the files changed since the last
//! checkpoint, and a ready-to-send resume prompt that says to inspect before repeating anything.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::payload::Todo;
use crate::state::{Phase, SessionState, ToolClass};

/// Most characters of a completed tool's result quoted in the brief.
const RESULT_QUOTE_CHARS: usize = 300;

/// One tool call in the brief.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BriefTool {
    /// Tool call id.
    pub id: String,
    /// Tool name.
    pub tool: String,
    /// File or command.
    pub target: Option<String>,
    /// What it may have changed.
    pub class: ToolClass,
    /// For completed calls: a short quote of the result; for open calls: what is known.
    pub note: String,
    /// What to do about it, in plain words.
    pub advice: String,
    /// May it be re-run without asking (the default retry policy)?
    pub auto_retry: bool,
    /// The call's input as the agent gave it.
    #[serde(default)]
    pub input: Value,
    /// For file mutations: the target's content hash before the call, when recorded.
    #[serde(default)]
    pub intent_before: Option<String>,
}

/// The brief, as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecoveryBrief {
    /// Whether the session was interrupted mid-work (or is idle, or ended).
    pub phase: Phase,
    /// The last prompts, oldest first.
    pub goal: Vec<String>,
    /// Tool calls that returned, oldest first.
    pub completed: Vec<BriefTool>,
    /// Tool calls with no result.
    pub uncertain: Vec<BriefTool>,
    /// Text the model had streamed when the turn was cut off.
    pub partial_answer: Option<String>,
    /// The todo list as last reported.
    pub todos: Value,
    /// Files changed since the last checkpoint.
    pub files_changed: Vec<String>,
    /// Permission requests still pending.
    pub pending_permissions: Vec<String>,
    /// The agent's own session id, to resume it.
    pub agent_session_id: Option<String>,
    /// A prompt to send to the resumed agent.
    pub resume_prompt: String,
}

fn quote(s: &str) -> String {
    let mut q: String = s.chars().take(RESULT_QUOTE_CHARS).collect();
    if s.chars().count() > RESULT_QUOTE_CHARS {
        q.push('…');
    }
    q
}

/// Retry policy for uncertain calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Read-only tools may be re-run automatically.
    pub auto_retry_readonly: bool,
    /// File mutations may be re-run automatically when the intent check says "not applied".
    pub auto_retry_mutations: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            auto_retry_readonly: true,
            auto_retry_mutations: true,
        }
    }
}

/// Builds the brief from a session's state.
pub fn brief(state: &SessionState, policy: RetryPolicy) -> RecoveryBrief {
    let completed = state
        .completed_tools
        .iter()
        .map(|c| BriefTool {
            id: c.call.id.clone(),
            tool: c.call.tool.clone(),
            target: c.call.target.clone(),
            class: c.call.class,
            note: format!(
                "{}: {}",
                if c.is_error { "failed" } else { "done" },
                quote(&c.summary)
            ),
            advice: "completed; do not repeat".into(),
            auto_retry: false,
            input: c.call.input.clone(),
            intent_before: c.call.intent_before.clone(),
        })
        .collect();
    let uncertain = state
        .open_tools
        .iter()
        .map(|t| {
            let (note, advice, auto_retry) = match t.class {
                ToolClass::ReadOnly => (
                    "no result came back".to_owned(),
                    "read-only: safe to run again".to_owned(),
                    policy.auto_retry_readonly,
                ),
                ToolClass::FileMutation => mutation_advice(t.intent_verdict.as_deref(), policy),
                ToolClass::Command => (
                    "its effects are unknown".into(),
                    "do not re-run without asking".into(),
                    false,
                ),
            };
            BriefTool {
                id: t.id.clone(),
                tool: t.tool.clone(),
                target: t.target.clone(),
                class: t.class,
                note,
                advice,
                auto_retry,
                input: t.input.clone(),
                intent_before: t.intent_before.clone(),
            }
        })
        .collect::<Vec<_>>();
    let partial_answer = (!state.turn.finished && !state.turn.partial_text.is_empty())
        .then(|| state.turn.partial_text.clone());
    let mut b = RecoveryBrief {
        phase: state.phase,
        goal: state.prompts.clone(),
        completed,
        uncertain,
        partial_answer,
        todos: state.todos.clone(),
        files_changed: state.files_since_checkpoint.iter().cloned().collect(),
        pending_permissions: state
            .pending_permissions
            .iter()
            .map(|p| {
                format!("{} {}", p.tool_name, p.path.clone().unwrap_or_default())
                    .trim()
                    .to_owned()
            })
            .collect(),
        agent_session_id: state.agent.agent_session_id.clone(),
        resume_prompt: String::new(),
    };
    b.resume_prompt = resume_prompt(&b);
    b
}

/// What to say about a file mutation with no result, given its intent check (`applied`,
/// `not_applied`, `changed_elsewhere`, or none): a note, advice, and whether it may be redone
/// automatically under `policy`.
pub fn mutation_advice(verdict: Option<&str>, policy: RetryPolicy) -> (String, String, bool) {
    match verdict {
        Some("applied") => (
            "the file already has the change".into(),
            "applied: do not repeat; read the file to confirm".into(),
            false,
        ),
        Some("not_applied") => (
            "the file is unchanged".into(),
            "not applied: safe to redo".into(),
            policy.auto_retry_mutations,
        ),
        Some("changed_elsewhere") => (
            "the file changed, but not as this call would have changed it".into(),
            "changed by something else: read the file and ask before editing".into(),
            false,
        ),
        _ => (
            "unknown whether the write landed".into(),
            "read the file before editing it again".into(),
            false,
        ),
    }
}

/// The prompt that tells a resumed agent what happened and to inspect before repeating.
pub fn resume_prompt(b: &RecoveryBrief) -> String {
    let mut p = String::from(
        "You were interrupted (the connection or the process died mid-work). Before doing anything \
         else, inspect the current state of the files and the repository; do not assume that work \
         you started has finished, and do not repeat an action before checking whether it already \
         happened.\n",
    );
    if let Some(goal) = b.goal.last() {
        p.push_str(&format!("\nThe last request was: {goal}\n"));
    }
    if !b.uncertain.is_empty() {
        p.push_str("\nThese tool calls had not returned:\n");
        for t in &b.uncertain {
            let target = t.target.as_deref().unwrap_or("");
            p.push_str(&format!(
                "- {} {target}: {} ({})\n",
                t.tool, t.note, t.advice
            ));
        }
    }
    if let Some(partial) = &b.partial_answer {
        p.push_str(&format!("\nYour answer so far was:\n{}\n", quote(partial)));
    }
    if !b.files_changed.is_empty() {
        p.push_str(&format!(
            "\nFiles changed since the last checkpoint: {}\n",
            b.files_changed.join(", ")
        ));
    }
    p.push_str("\nThen continue the task from where it stopped.");
    p
}

impl RecoveryBrief {
    /// The brief for people.
    pub fn to_markdown(&self) -> String {
        let mut md = format!("# Recovery brief\n\nPhase when read: {:?}\n", self.phase);
        md.push_str("\n## Goal\n\n");
        for g in &self.goal {
            md.push_str(&format!("- {g}\n"));
        }
        md.push_str("\n## Completed\n\n");
        for t in &self.completed {
            md.push_str(&format!(
                "- {} {} — {}\n",
                t.tool,
                t.target.as_deref().unwrap_or(""),
                t.note
            ));
        }
        md.push_str("\n## Uncertain\n\n");
        for t in &self.uncertain {
            md.push_str(&format!(
                "- **{}** {} — {}; **{}**\n",
                t.tool,
                t.target.as_deref().unwrap_or(""),
                t.note,
                t.advice
            ));
        }
        if let Some(p) = &self.partial_answer {
            md.push_str(&format!("\n## Partial answer\n\n{p}\n"));
        }
        let todos = Vec::<Todo>::deserialize(&self.todos).unwrap_or_default();
        if !todos.is_empty() {
            md.push_str("\n## Todo list\n\n");
            for t in todos {
                md.push_str(&format!("- [{}] {}\n", t.status, t.content));
            }
        }
        if !self.files_changed.is_empty() {
            md.push_str("\n## Files changed since the last checkpoint\n\n");
            for f in &self.files_changed {
                md.push_str(&format!("- {f}\n"));
            }
        }
        md.push_str(&format!(
            "\n## Resume prompt\n\n```\n{}\n```\n",
            self.resume_prompt
        ));
        md
    }
}
