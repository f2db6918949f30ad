//! What a restarted Claude Code is told first. The hook where the full recovery brief (what was
//! in flight, which edits landed, a repaired transcript) plugs in later: implement
//! [`RecoveryBrief`] and hand it to the adapter; until then [`ShortBrief`] is used.

use std::fmt;
use std::time::Duration;

/// Why the agent is being restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartReason {
    /// Silent past its limit.
    Stalled,
    /// The process ended on its own in the middle of the session.
    Crashed,
}

impl RestartReason {
    /// As written in `agent.restart`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Stalled => "stalled",
            Self::Crashed => "crashed",
        }
    }
}

/// What is known about the interruption when the agent is restarted.
#[derive(Debug, Clone)]
pub struct Interruption {
    /// Why.
    pub reason: RestartReason,
    /// The agent session being resumed.
    pub agent_session_id: String,
    /// Restarts in a row, this one included.
    pub attempt: u32,
    /// The tool that was running, if one was (id, name).
    pub open_tool: Option<(String, String)>,
    /// How long the agent had been silent.
    pub silent: Duration,
}

/// Writes the first prompt a resumed agent gets.
pub trait RecoveryBrief: Send + Sync + fmt::Debug {
    /// The prompt for `interruption`.
    fn prompt(&self, interruption: &Interruption) -> String;
}

/// The short built-in prompt: you were interrupted, look before you repeat anything.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShortBrief;

impl RecoveryBrief for ShortBrief {
    fn prompt(&self, i: &Interruption) -> String {
        let what = match i.reason {
            RestartReason::Stalled => format!(
                "Your previous response stalled (no output for {} s) and you were restarted.",
                i.silent.as_secs()
            ),
            RestartReason::Crashed => {
                "Your previous process ended unexpectedly and you were restarted.".to_owned()
            }
        };
        let tool = match &i.open_tool {
            Some((id, name)) => format!(
                " The {name} tool call {id} was still running; it may or may not have completed."
            ),
            None => String::new(),
        };
        format!(
            "[moor] {what}{tool} Before repeating anything, inspect the current state (files, \
             command results, git status) to find out what already happened, then continue the \
             task from where it really stands."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_short_brief_says_interrupted_and_inspect_first() {
        let prompt = ShortBrief.prompt(&Interruption {
            reason: RestartReason::Stalled,
            agent_session_id: "s".into(),
            attempt: 1,
            open_tool: Some(("t1".into(), "Bash".into())),
            silent: Duration::from_secs(61),
        });
        assert!(prompt.contains("stalled"));
        assert!(prompt.contains("Bash tool call t1"));
        assert!(prompt.contains("inspect"));
    }
}
