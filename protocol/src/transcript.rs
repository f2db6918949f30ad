//! The repaired transcript: a session's conversation in Anthropic Messages API shape, valid by
//! construction. Every `tool_use` gets its `tool_result` in the next user message (a synthetic
//! "interrupted" error for calls whose result never came), roles alternate starting with the
//! user, and no message is empty. The log itself is never rewritten; this is a view of it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::entry::Entry;
use crate::payload::EntryBody;

/// The text of a synthetic result for a tool call that never returned.
pub const INTERRUPTED_RESULT: &str =
    "interrupted: the session was cut off before this tool returned; its effects are unknown, inspect before repeating it";

/// A conversation role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = TranscriptRole))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The person (and tool results).
    User,
    /// The model.
    Assistant,
}

/// A content block, as the Messages API spells it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call.
    ToolUse {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Tool input.
        input: Value,
    },
    /// A tool's answer.
    ToolResult {
        /// The call it answers.
        tool_use_id: String,
        /// Result text.
        content: String,
        /// Whether it is an error.
        is_error: bool,
    },
}

/// One message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// What they say.
    pub content: Vec<Block>,
}

#[derive(Default)]
struct Builder {
    messages: Vec<Message>,
    /// Tool calls of the last assistant message that have no result yet.
    open: Vec<String>,
    /// Every call id seen, so a result for an unknown or already answered call is dropped.
    seen: BTreeSet<String>,
    /// Streamed text per message id whose final block has not arrived.
    partial: BTreeMap<String, String>,
}

impl Builder {
    fn push(&mut self, role: Role, block: Block) {
        if let Block::Text { text } = &block {
            if text.trim().is_empty() {
                return;
            }
        }
        if role == Role::Assistant {
            // Anything the previous assistant turn left open is answered before the model
            // speaks again.
            self.close_open();
        }
        match self.messages.last_mut() {
            Some(m) if m.role == role => m.content.push(block),
            _ => self.messages.push(Message {
                role,
                content: vec![block],
            }),
        }
        // Tool results go first in a user message.
        if let Some(m) = self.messages.last_mut() {
            if m.role == Role::User {
                m.content
                    .sort_by_key(|b| !matches!(b, Block::ToolResult { .. }));
            }
        }
    }

    /// Answers every open call with a synthetic error result.
    fn close_open(&mut self) {
        for id in std::mem::take(&mut self.open) {
            let block = Block::ToolResult {
                tool_use_id: id,
                content: INTERRUPTED_RESULT.into(),
                is_error: true,
            };
            match self.messages.last_mut() {
                Some(m) if m.role == Role::User => m.content.insert(0, block),
                _ => self.messages.push(Message {
                    role: Role::User,
                    content: vec![block],
                }),
            }
        }
    }

    /// Flushes streamed text that never got its final block.
    fn flush_partial(&mut self) {
        for (_, text) in std::mem::take(&mut self.partial) {
            let block = Block::Text {
                text: format!("{} [interrupted]", text.trim_end()),
            };
            match self.messages.last_mut() {
                // The text belongs to the assistant turn in progress, whatever it called since.
                Some(m) if m.role == Role::Assistant => m.content.push(block),
                _ => self.push(Role::Assistant, block),
            }
        }
    }

    fn finish(mut self) -> Vec<Message> {
        self.flush_partial();
        self.close_open();
        if self
            .messages
            .first()
            .is_some_and(|m| m.role == Role::Assistant)
        {
            self.messages.insert(
                0,
                Message {
                    role: Role::User,
                    content: vec![Block::Text {
                        text: "(conversation continued)".into(),
                    }],
                },
            );
        }
        self.messages
    }
}

/// Builds the repaired conversation from a session's entries (other kinds, and entries whose
/// payload does not decode, are skipped).
pub fn repaired(entries: &[Entry]) -> Vec<Message> {
    let mut b = Builder::default();
    for e in entries {
        let Ok(body) = e.body() else { continue };
        match body {
            EntryBody::InputText(p) => {
                b.flush_partial();
                b.close_open();
                b.push(Role::User, Block::Text { text: p.text });
            }
            EntryBody::AgentTextDelta(p) => {
                if let Some(id) = p.message_id {
                    b.partial.entry(id).or_default().push_str(&p.text);
                }
            }
            EntryBody::AgentText(p) => {
                if let Some(id) = &p.message_id {
                    b.partial.remove(id);
                }
                b.push(Role::Assistant, Block::Text { text: p.text });
            }
            // A call id seen before is a repeat: skipped.
            EntryBody::AgentToolUse(p) if b.seen.insert(p.id.clone()) => {
                let input = Some(p.input)
                    .filter(Value::is_object)
                    .unwrap_or(Value::Object(Default::default()));
                b.push(
                    Role::Assistant,
                    Block::ToolUse {
                        id: p.id.clone(),
                        name: p.name,
                        input,
                    },
                );
                b.open.push(p.id);
            }
            EntryBody::AgentToolResult(p) => {
                // Only a call of the latest assistant message can still be answered.
                if let Some(pos) = b.open.iter().position(|o| *o == p.tool_use_id) {
                    b.open.remove(pos);
                    b.push(
                        Role::User,
                        Block::ToolResult {
                            tool_use_id: p.tool_use_id,
                            content: p.summary,
                            is_error: p.is_error,
                        },
                    );
                }
            }
            EntryBody::SessionInterrupted(_)
            | EntryBody::AgentRestart(_)
            | EntryBody::AgentExit(_)
            | EntryBody::AgentResult(_) => {
                b.flush_partial();
                b.close_open();
            }
            _ => {}
        }
    }
    b.finish()
}

/// Checks the Messages API's rules; the error says which one broke where.
pub fn validate(messages: &[Message]) -> Result<(), String> {
    let mut expected_results: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if m.content.is_empty() {
            return Err(format!("message {i} is empty"));
        }
        if i == 0 && m.role != Role::User {
            return Err("the first message is not from the user".into());
        }
        if i > 0 && messages[i - 1].role == m.role {
            return Err(format!("messages {} and {i} have the same role", i - 1));
        }
        let results: Vec<&str> = m
            .content
            .iter()
            .filter_map(|b| match b {
                Block::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
                _ => None,
            })
            .collect();
        let mut want: Vec<&str> = expected_results.iter().map(String::as_str).collect();
        let mut got = results.clone();
        want.sort_unstable();
        got.sort_unstable();
        if want != got {
            return Err(format!(
                "message {i}: tool results {got:?} do not answer the calls {want:?}"
            ));
        }
        if m.role == Role::Assistant && !results.is_empty() {
            return Err(format!("message {i}: tool results in an assistant message"));
        }
        if m.role == Role::User {
            let first_other = m
                .content
                .iter()
                .position(|b| !matches!(b, Block::ToolResult { .. }));
            let last_result = m
                .content
                .iter()
                .rposition(|b| matches!(b, Block::ToolResult { .. }));
            if let (Some(o), Some(r)) = (first_other, last_result) {
                if r > o {
                    return Err(format!("message {i}: tool results after text"));
                }
            }
        }
        expected_results = m
            .content
            .iter()
            .filter_map(|b| match b {
                Block::ToolUse { id, .. } if m.role == Role::Assistant => Some(id.clone()),
                _ => None,
            })
            .collect();
    }
    if !expected_results.is_empty() {
        return Err(format!("tool calls {expected_results:?} have no results"));
    }
    Ok(())
}

/// The conversation for people.
pub fn markdown(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        out.push_str(match m.role {
            Role::User => "### User\n\n",
            Role::Assistant => "### Assistant\n\n",
        });
        for b in &m.content {
            match b {
                Block::Text { text } => out.push_str(&format!("{text}\n\n")),
                Block::ToolUse { name, input, .. } => {
                    out.push_str(&format!("**{name}** `{input}`\n\n"))
                }
                Block::ToolResult {
                    content, is_error, ..
                } => {
                    let mark = if *is_error { "error" } else { "result" };
                    out.push_str(&format!("> {mark}: {}\n\n", content.replace('\n', "\n> ")));
                }
            }
        }
    }
    out
}
