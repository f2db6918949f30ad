//! A plain-text rendering of the typed entries for the person at `moor`'s terminal: streamed
//! text as it comes, one line per tool call and result, permission requests with how to answer.

use moor_protocol::payload::Resolution;
use moor_protocol::EntryBody;
use serde_json::Value;

use crate::spool::Draft;

/// Turns entries into terminal text; remembers whether a message's text was already streamed.
#[derive(Debug, Default)]
pub(super) struct Renderer {
    streamed: Option<Option<String>>,
}

impl Renderer {
    /// The text to print for `draft`, if any.
    pub(super) fn render(&mut self, draft: &Draft) -> Option<String> {
        let or_empty = |s: &Option<String>| s.clone().unwrap_or_default();
        match draft.body().ok()? {
            EntryBody::AgentSession(p) => Some(format!(
                "● Claude Code {} ({}), session {}\n",
                or_empty(&p.version),
                or_empty(&p.model),
                or_empty(&p.agent_session_id)
            )),
            EntryBody::AgentTextDelta(p) => {
                self.streamed = Some(p.message_id);
                Some(p.text)
            }
            EntryBody::AgentText(p) => {
                if self.streamed.is_some() && self.streamed.as_ref() == Some(&p.message_id) {
                    self.streamed = None;
                    Some("\n".into())
                } else {
                    Some(format!("{}\n", p.text))
                }
            }
            EntryBody::AgentToolUse(p) => Some(format!("⏺ {}({})\n", p.name, brief(&p.input))),
            EntryBody::AgentToolResult(p) => {
                let first = p.summary.lines().next().unwrap_or_default().to_owned();
                let mark = if p.is_error { "✗" } else { "⎿" };
                Some(format!("  {mark} {}\n", clip(&first, 160)))
            }
            EntryBody::AgentPermissionRequest(p) => Some(format!(
                "? {} wants to run {}({}). Type y or n here, or decide from a viewer (request {}).\n",
                "Claude",
                p.tool_name,
                brief(&p.input),
                p.request_id
            )),
            EntryBody::AgentPermissionResolved(p) => {
                let decision = match p.decision {
                    Resolution::Allow => "allow",
                    Resolution::Deny => "deny",
                    Resolution::Cancelled => "cancelled",
                };
                Some(format!("  permission {}: {decision}\n", p.request_id))
            }
            EntryBody::AgentResult(p) => Some(match p.is_error {
                false => format!(
                    "✓ turn done in {:.1} s, ${}\n",
                    p.duration_ms.unwrap_or(0) as f64 / 1000.0,
                    p.cost_usd.map_or("null".into(), |c| c.to_string())
                ),
                true => format!(
                    "✗ turn ended: {} {}\n",
                    or_empty(&p.subtype),
                    p.errors.unwrap_or(Value::Null)
                ),
            }),
            EntryBody::AgentError(p) => Some(format!("! {}\n", p.message)),
            _ => None,
        }
    }
}

/// The interesting part of a tool input, on one line.
fn brief(input: &Value) -> String {
    let picked = [
        "command",
        "file_path",
        "notebook_path",
        "pattern",
        "url",
        "description",
    ]
    .iter()
    .find_map(|k| input.get(k).and_then(Value::as_str));
    let text = match picked {
        Some(t) => t.to_owned(),
        None => input.to_string(),
    };
    clip(&text.replace('\n', " "), 120)
}

fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
