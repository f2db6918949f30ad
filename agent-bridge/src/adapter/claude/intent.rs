//! Mutation intents: before a file-mutating tool call runs, record the target file's content
//! hash; once it returns (or at recovery time), tell "applied", "not applied" or "changed by
//! something else" by looking at the file again.
//!
//! What the call meant to do comes from its input: `Write` carries the whole new content, `Edit`
//! and `MultiEdit` the strings to replace. A file that matches neither the state before nor the
//! intended result was changed by someone else.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use moor_protocol::payload::{AgentToolUse, ToolIntent, ToolIntentChecked};
use moor_protocol::state::ToolClass;
use moor_protocol::{kinds, EntryBody};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::spool::Draft;

/// The outcome of an intent check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The file holds what the call meant to write.
    Applied,
    /// The file is as it was before the call.
    NotApplied,
    /// The file changed, but not as the call would have changed it.
    ChangedElsewhere,
}

impl Verdict {
    /// As written in entries and briefs.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Applied => "applied",
            Verdict::NotApplied => "not_applied",
            Verdict::ChangedElsewhere => "changed_elsewhere",
        }
    }
}

/// What a call recorded before it ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Intent {
    /// The file.
    pub path: PathBuf,
    /// Content hash before the call (`None`: the file did not exist).
    pub before: Option<String>,
    /// The tool's input, which says what it meant to do.
    pub tool: String,
    /// The tool's input.
    pub input: Value,
}

/// SHA-256 of a file's content, hex; `None` if it cannot be read (e.g. does not exist).
pub fn file_hash(path: &Path) -> Option<String> {
    std::fs::read(path)
        .ok()
        .map(|bytes| hex(&Sha256::digest(&bytes)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Intent {
    /// Checks the file now.
    pub fn check(&self) -> (Option<String>, Verdict) {
        let after = file_hash(&self.path);
        if after == self.before {
            return (after, Verdict::NotApplied);
        }
        let content = std::fs::read_to_string(&self.path).ok();
        let applied = match (self.tool.as_str(), &content) {
            ("Write", Some(c)) => {
                self.input.get("content").and_then(Value::as_str) == Some(c.as_str())
            }
            ("Edit", Some(c)) => edit_applied(c, &self.input),
            ("MultiEdit", Some(c)) => self
                .input
                .get("edits")
                .and_then(Value::as_array)
                .is_some_and(|edits| edits.iter().all(|e| edit_applied(c, e))),
            // No way to know what it meant: a change is most likely its own.
            _ => true,
        };
        (
            after,
            if applied {
                Verdict::Applied
            } else {
                Verdict::ChangedElsewhere
            },
        )
    }
}

/// An edit landed when its new text is there (and, if it replaced something else, the old
/// text is gone, unless it was to be replaced only once and occurs elsewhere too).
fn edit_applied(content: &str, edit: &Value) -> bool {
    let new = edit
        .get("new_string")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let old = edit
        .get("old_string")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let replace_all = edit
        .get("replace_all")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    content.contains(new)
        && (old.is_empty() || new.contains(old) || !replace_all || !content.contains(old))
}

/// Intents of the calls still running, by tool_use id.
#[derive(Debug, Default)]
pub struct Intents {
    open: HashMap<String, Intent>,
}

impl Intents {
    /// Looks at drafts about to be spooled: records an intent for each file-mutating tool call
    /// and checks it when its result comes; appends the resulting entries to `drafts`.
    pub fn observe(&mut self, drafts: &mut Vec<Draft>, cwd: &Path) {
        let mut extra = Vec::new();
        // Only tool calls and results matter; other drafts are not decoded.
        let tools = [kinds::AGENT_TOOL_USE, kinds::AGENT_TOOL_RESULT];
        for d in drafts.iter().filter(|d| tools.contains(&d.kind.as_str())) {
            match d.body() {
                Ok(EntryBody::AgentToolUse(call)) => {
                    if let Some((id, intent)) = intent_for(&call, cwd) {
                        extra.push(Draft::new(ToolIntent {
                            tool_use_id: id.clone(),
                            path: intent.path.display().to_string(),
                            before: intent.before.clone(),
                        }));
                        self.open.insert(id, intent);
                    }
                }
                Ok(EntryBody::AgentToolResult(result)) => {
                    if let Some(intent) = self.open.remove(&result.tool_use_id) {
                        let (after, verdict) = intent.check();
                        extra.push(Draft::new(ToolIntentChecked {
                            tool_use_id: result.tool_use_id,
                            path: intent.path.display().to_string(),
                            after,
                            verdict: Some(verdict.name().into()),
                        }));
                    }
                }
                _ => {}
            }
        }
        drafts.extend(extra);
    }
}

/// The intent of a tool_use payload, if it mutates a file.
fn intent_for(call: &AgentToolUse, cwd: &Path) -> Option<(String, Intent)> {
    if ToolClass::of(&call.name) != ToolClass::FileMutation {
        return None;
    }
    // The tool's input is Claude Code's own object; `path` is the bridge's reading of it.
    let path = call.path.as_deref().or_else(|| {
        ["file_path", "notebook_path"]
            .into_iter()
            .find_map(|key| call.input.get(key).and_then(Value::as_str))
    })?;
    let path = cwd.join(path);
    let before = file_hash(&path);
    Some((
        call.id.clone(),
        Intent {
            path,
            before,
            tool: call.name.clone(),
            input: call.input.clone(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    use moor_protocol::payload::AgentToolResult;
    use moor_protocol::state::{TOOL_INTENT, TOOL_INTENT_CHECKED};
    use serde_json::json;

    fn call(id: &str, name: &str, input: Value) -> AgentToolUse {
        AgentToolUse {
            id: id.into(),
            name: name.into(),
            path: None,
            input,
            parent_tool_use_id: None,
        }
    }

    fn write_call(dir: &Path, content: &str) -> AgentToolUse {
        call(
            "t1",
            "Write",
            json!({"file_path": dir.join("a.txt"), "content": content}),
        )
    }

    /// `intent` is not applied while `file` is untouched, applied once it holds `applied`, and
    /// changed elsewhere once it holds `other`.
    fn assert_verdicts(intent: &Intent, file: &Path, applied: &str, other: &str) {
        assert_eq!(intent.check().1, Verdict::NotApplied);
        std::fs::write(file, applied).unwrap();
        assert_eq!(intent.check().1, Verdict::Applied);
        std::fs::write(file, other).unwrap();
        assert_eq!(intent.check().1, Verdict::ChangedElsewhere);
    }

    #[test]
    fn a_write_is_applied_not_applied_or_changed_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "old").unwrap();
        let (_, intent) = intent_for(&write_call(dir.path(), "new"), dir.path()).unwrap();
        assert_verdicts(&intent, &file, "new", "someone else");
    }

    #[test]
    fn an_edit_is_applied_when_the_new_text_replaced_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("b.rs");
        std::fs::write(&file, "fn a() {}\n").unwrap();
        let edit = call(
            "t2",
            "Edit",
            json!({"file_path": file, "old_string": "fn a", "new_string": "fn b"}),
        );
        let (_, intent) = intent_for(&edit, dir.path()).unwrap();
        assert_verdicts(&intent, &file, "fn b() {}\n", "fn c() {}\n");
    }

    #[test]
    fn drafts_get_intent_and_check_entries_and_reads_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut intents = Intents::default();
        let mut drafts = vec![
            Draft::new(write_call(dir.path(), "x")),
            Draft::new(call("r", "Read", json!({"file_path": "a"}))),
        ];
        intents.observe(&mut drafts, dir.path());
        assert_eq!(drafts.iter().filter(|d| d.kind == TOOL_INTENT).count(), 1);
        std::fs::write(dir.path().join("a.txt"), "x").unwrap();
        let result = AgentToolResult {
            tool_use_id: "t1".into(),
            is_error: false,
            summary: String::new(),
            bytes: 0,
            truncated: false,
        };
        let mut drafts = vec![Draft::new(result)];
        intents.observe(&mut drafts, dir.path());
        let checked = drafts
            .iter()
            .find(|d| d.kind == TOOL_INTENT_CHECKED)
            .unwrap();
        let Ok(EntryBody::ToolIntentChecked(checked)) = checked.body() else {
            panic!("not an intent check: {checked:?}")
        };
        assert_eq!(checked.verdict.as_deref(), Some("applied"));
    }
}
