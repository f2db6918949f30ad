//! The recovery brief: what a person or a resumed agent needs to know after an interruption,
//! derived from the [`SessionState`] alone: the goal, what completed, what is uncertain (with
//! advice per tool class), the partial answer, the todo list, the files changed since the last
//! checkpoint, and a ready-to-send resume prompt that says to inspect before repeating anything.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::payload::Todo;
use crate::state::{PendingPermission, Phase, SessionState, ToolClass};

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
    /// The prompts whose turns did not finish, oldest first (at most the last 3).
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
    /// Permission requests still pending (asked by the agent that runs now).
    pub pending_permissions: Vec<String>,
    /// Permission requests that expired undecided when their agent exited, restarted or was
    /// cut off.
    #[serde(default)]
    pub expired_permissions: Vec<String>,
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

/// A permission request in one line: the tool and its path.
fn request_line(p: &PendingPermission) -> String {
    format!("{} {}", p.tool_name, p.path.as_deref().unwrap_or_default())
        .trim()
        .to_owned()
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
        .chain(&state.interrupted.tools)
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
        goal: state.open_prompts.clone(),
        completed,
        uncertain,
        partial_answer,
        todos: state.todos.clone(),
        files_changed: state.files_since_checkpoint.iter().cloned().collect(),
        pending_permissions: state.pending_permissions.iter().map(request_line).collect(),
        expired_permissions: state
            .interrupted
            .permissions
            .iter()
            .map(request_line)
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
    if !b.expired_permissions.is_empty() {
        p.push_str(&format!(
            "\nThese permission requests were never decided and have expired; ask again if the \
             action is still needed: {}\n",
            b.expired_permissions.join(", ")
        ));
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
        push_list(&mut md, "Goal", self.goal.iter().cloned());
        let completed = self.completed.iter().map(|t| {
            let target = t.target.as_deref().unwrap_or("");
            format!("{} {target} — {}", t.tool, t.note)
        });
        push_list(&mut md, "Completed", completed);
        let uncertain = self.uncertain.iter().map(|t| {
            let target = t.target.as_deref().unwrap_or("");
            format!("**{}** {target} — {}; **{}**", t.tool, t.note, t.advice)
        });
        push_list(&mut md, "Uncertain", uncertain);
        if let Some(p) = &self.partial_answer {
            md.push_str(&format!("\n## Partial answer\n\n{p}\n"));
        }
        let todos = Vec::<Todo>::deserialize(&self.todos).unwrap_or_default();
        if !todos.is_empty() {
            let items = todos
                .iter()
                .map(|t| format!("[{}] {}", t.status, t.content));
            push_list(&mut md, "Todo list", items);
        }
        if !self.pending_permissions.is_empty() {
            let title = "Pending permission requests";
            push_list(&mut md, title, self.pending_permissions.iter().cloned());
        }
        if !self.expired_permissions.is_empty() {
            let title = "Expired permission requests (never decided)";
            push_list(&mut md, title, self.expired_permissions.iter().cloned());
        }
        if !self.files_changed.is_empty() {
            let title = "Files changed since the last checkpoint";
            push_list(&mut md, title, self.files_changed.iter().cloned());
        }
        md.push_str(&format!(
            "\n## Resume prompt\n\n```\n{}\n```\n",
            self.resume_prompt
        ));
        md
    }
}

/// Appends a `## title` section with one `- item` line per item.
fn push_list(md: &mut String, title: &str, items: impl IntoIterator<Item = String>) {
    md.push_str(&format!("\n## {title}\n\n"));
    for item in items {
        md.push_str(&format!("- {item}\n"));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(tool: &str, target: Option<&str>, note: &str, advice: &str) -> BriefTool {
        BriefTool {
            id: format!("{tool}-1"),
            tool: tool.into(),
            target: target.map(Into::into),
            class: ToolClass::Command,
            note: note.into(),
            advice: advice.into(),
            auto_retry: false,
            input: Value::Null,
            intent_before: None,
        }
    }

    #[test]
    fn the_markdown_brief_lists_each_section_and_leaves_out_empty_optional_ones() {
        // arrange
        let brief = RecoveryBrief {
            phase: Phase::ToolRunning,
            goal: vec!["fix the build".into()],
            completed: vec![tool("Read", Some("a.rs"), "12 lines", "")],
            uncertain: vec![tool("Bash", None, "no result", "ask first")],
            partial_answer: None,
            todos: json!([{"content": "run tests", "status": "pending"}]),
            files_changed: vec![],
            pending_permissions: vec![],
            expired_permissions: vec![],
            agent_session_id: None,
            resume_prompt: "go on".into(),
        };
        // act
        let md = brief.to_markdown();
        // assert
        assert_eq!(
            md,
            "# Recovery brief\n\nPhase when read: ToolRunning\n\
             \n## Goal\n\n- fix the build\n\
             \n## Completed\n\n- Read a.rs — 12 lines\n\
             \n## Uncertain\n\n- **Bash**  — no result; **ask first**\n\
             \n## Todo list\n\n- [pending] run tests\n\
             \n## Resume prompt\n\n```\ngo on\n```\n"
        );
    }
}
