//! A plain-text rendering of the typed entries for the person at `moor`'s terminal: streamed
//! text as it comes, one line per tool call and result, permission requests with how to answer.

use moor_protocol::kinds;
use serde_json::Value;

use crate::spool::Draft;

/// Turns entries into terminal text; remembers whether a message's text was already streamed.
#[derive(Debug, Default)]
pub(super) struct Renderer {
    streamed: Option<Value>,
}

impl Renderer {
    /// The text to print for `draft`, if any.
    pub(super) fn render(&mut self, draft: &Draft) -> Option<String> {
        let p = &draft.payload;
        let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default();
        match draft.kind.as_str() {
            kinds::AGENT_SESSION => Some(format!(
                "● Claude Code {} ({}), session {}\n",
                s("version"),
                s("model"),
                s("agent_session_id")
            )),
            kinds::AGENT_TEXT_DELTA => {
                self.streamed = p.get("message_id").cloned();
                Some(s("text").to_owned())
            }
            kinds::AGENT_TEXT => {
                if self.streamed.is_some() && self.streamed.as_ref() == p.get("message_id") {
                    self.streamed = None;
                    Some("\n".into())
                } else {
                    Some(format!("{}\n", s("text")))
                }
            }
            kinds::AGENT_TOOL_USE => Some(format!("⏺ {}({})\n", s("name"), brief(&p["input"]))),
            kinds::AGENT_TOOL_RESULT => {
                let first = s("summary").lines().next().unwrap_or_default().to_owned();
                let mark = if p["is_error"] == true { "✗" } else { "⎿" };
                Some(format!("  {mark} {}\n", clip(&first, 160)))
            }
            kinds::AGENT_PERMISSION_REQUEST => Some(format!(
                "? {} wants to run {}({}). Type y or n here, or decide from a viewer (request {}).\n",
                "Claude",
                s("tool_name"),
                brief(&p["input"]),
                s("request_id")
            )),
            kinds::AGENT_PERMISSION_RESOLVED => Some(format!(
                "  permission {}: {}\n",
                s("request_id"),
                s("decision")
            )),
            kinds::AGENT_RESULT => Some(match p["is_error"] == true {
                false => format!(
                    "✓ turn done in {:.1} s, ${}\n",
                    p["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0,
                    p["cost_usd"]
                ),
                true => format!("✗ turn ended: {} {}\n", s("subtype"), p["errors"]),
            }),
            kinds::AGENT_ERROR => Some(format!("! {}\n", s("message"))),
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
