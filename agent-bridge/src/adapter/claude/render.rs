//! A plain-text rendering of the typed entries for the person at `moor`'s terminal: streamed
//! text as it comes, one line per tool call and result, permission requests with how to answer.

use moor_protocol::payload::Resolution;
use moor_protocol::EntryBody;
use serde_json::Value;
use tokio::sync::mpsc;

use super::map::{failure_reason, interrupted};
use crate::spool::Draft;

/// Turns entries into terminal text; remembers whether a message's text was already streamed.
#[derive(Debug, Default)]
pub(crate) struct Renderer {
    streamed: Option<Option<String>>,
    /// The agent's name, when it is not Claude Code.
    agent: Option<String>,
}

impl Renderer {
    /// A renderer for another agent than Claude Code, named `agent`.
    pub(crate) fn for_agent(agent: &str) -> Self {
        Self {
            agent: Some(agent.to_owned()),
            ..Self::default()
        }
    }

    /// Shows `drafts` on the terminal `screen`, without waiting for it: the terminal is
    /// informational, and one nobody reads must not hold up the log.
    pub(crate) fn show(&mut self, drafts: &[Draft], screen: &mpsc::Sender<Vec<u8>>) {
        let text: String = drafts.iter().filter_map(|d| self.render(d)).collect();
        if !text.is_empty() {
            let _ = screen.try_send(text.into_bytes());
        }
    }

    /// The text to print for `draft`, if any.
    pub(crate) fn render(&mut self, draft: &Draft) -> Option<String> {
        let or_empty = |s: &Option<String>| s.clone().unwrap_or_default();
        match draft.body().ok()? {
            EntryBody::AgentSession(p) => Some(format!(
                "● {} {} ({}), session {}\n",
                self.agent.as_deref().unwrap_or("Claude Code"),
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
            EntryBody::AgentPermissionRequest(p) => Some(match &self.agent {
                None => format!(
                    "? Claude wants to run {}({}). Type y or n here, or decide from a viewer (request {}).\n",
                    p.tool_name,
                    brief(&p.input),
                    p.request_id
                ),
                // Only Claude Code's adapter reads this terminal.
                Some(agent) => format!(
                    "? {agent} wants to run {}({}). Decide from a viewer (request {}).\n",
                    p.tool_name,
                    brief(&p.input),
                    p.request_id
                ),
            }),
            EntryBody::AgentPermissionResolved(p) => {
                let decision = match p.decision {
                    Resolution::Allow => "allow",
                    Resolution::Deny => "deny",
                    Resolution::Cancelled => "cancelled",
                };
                Some(format!("  permission {}: {decision}\n", p.request_id))
            }
            EntryBody::AgentResult(p) => {
                let took = format!("{:.1} s", p.duration_ms.unwrap_or(0) as f64 / 1000.0);
                let cost = p.cost_usd.map_or(String::new(), |c| format!(", {}", dollars(c)));
                let terminal = p.terminal_reason.as_deref();
                Some(match (p.is_error, interrupted(terminal)) {
                    (false, _) => format!("✓ turn done in {took}{cost}\n"),
                    (true, true) => format!("✗ turn interrupted after {took}{cost}\n"),
                    (true, false) => format!(
                        "✗ turn failed ({}) after {took}{cost}\n",
                        failure_reason(terminal, p.subtype.as_deref())
                    ),
                })
            }
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

/// US dollars to a hundredth of a cent, without float noise: `$0.0032`, `$1.50`, `$0.00`.
fn dollars(amount: f64) -> String {
    if !amount.is_finite() {
        return "$?".into();
    }
    let mut text = format!("{amount:.4}");
    while text.ends_with('0') && text.len() - text.find('.').unwrap_or(0) > 3 {
        text.pop();
    }
    format!("${text}")
}

fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use moor_protocol::payload::AgentResult;

    fn render(result: AgentResult) -> String {
        Renderer::default()
            .render(&Draft::new(result))
            .unwrap_or_default()
    }

    #[test]
    fn costs_are_rounded_to_a_hundredth_of_a_cent() {
        assert_eq!(dollars(0.003_240_000_000_000_000_3), "$0.0032");
        assert_eq!(dollars(1.5), "$1.50");
        assert_eq!(dollars(0.0), "$0.00");
        assert_eq!(dollars(0.012_25), "$0.0123");
        let done = AgentResult {
            duration_ms: Some(1200),
            cost_usd: Some(0.003_240_000_000_000_000_3),
            ..AgentResult::default()
        };
        assert_eq!(render(done), "✓ turn done in 1.2 s, $0.0032\n");
    }

    #[test]
    fn a_failed_turn_says_why_and_an_interrupted_one_says_so() {
        let failed = AgentResult {
            subtype: Some("success".into()),
            is_error: true,
            terminal_reason: Some("api_error".into()),
            duration_ms: Some(3000),
            ..AgentResult::default()
        };
        assert_eq!(render(failed), "✗ turn failed (api_error) after 3.0 s\n");
        let resume = AgentResult {
            subtype: Some("error_during_execution".into()),
            is_error: true,
            ..AgentResult::default()
        };
        assert!(render(resume).contains("failed (error_during_execution)"));
        let stopped = AgentResult {
            is_error: true,
            terminal_reason: Some("aborted_streaming".into()),
            ..AgentResult::default()
        };
        assert!(render(stopped).starts_with("✗ turn interrupted"));
    }
}
