//! Well-known entry kinds and authors. Kinds are an open set (an adapter may keep an event type
//! nobody knew about); these constants name the ones the server and the bridge rely on.

/// A line (or chunk) the agent wrote. Payload: `{"stream": "stdout"|"stderr", "text": ...}`.
pub const AGENT_OUTPUT: &str = "agent.output";
/// The agent process ended. Payload: `{"code": i32|null, "signal": i32|null}`.
pub const AGENT_EXIT: &str = "agent.exit";
/// The agent process started. Payload: `{"command": [...], "cwd": ..., "pid": ...}`.
pub const AGENT_START: &str = "agent.start";

/// Remote text for the agent's input. Payload: `{"text": ...}`; a newline is added if missing.
pub const INPUT_TEXT: &str = "input.text";
/// The bridge received an input. Payload: `{"input_seq": N}`. Written by the server.
pub const INPUT_DELIVERED: &str = "input.delivered";
/// The bridge applied an input to the agent. Payload: `{"input_seq": N}`. Written by the server.
pub const INPUT_APPLIED: &str = "input.applied";
/// The bridge could not apply an input. Payload: `{"input_seq": N, "reason": ...}`.
pub const INPUT_FAILED: &str = "input.failed";
/// The bridge crashed while applying an input: it may or may not have reached the agent, and it
/// will not be replayed. Payload: `{"input_seq": N}`.
pub const INPUT_UNCERTAIN: &str = "input.uncertain";

/// A bridge connection was established. Payload: `{"producer": ..., "connection": ...}`.
pub const BRIDGE_CONNECTED: &str = "bridge.connected";
/// A bridge connection ended. Payload: `{"reason": ..., "close_code": u16|null}`.
pub const BRIDGE_DISCONNECTED: &str = "bridge.disconnected";

/// The session ended: the agent is gone and everything it produced is stored.
pub const SESSION_ENDED: &str = "session.ended";

/// Receipt kinds: entries about an input, keyed by the input's seq (at most one of each kind
/// per input).
pub const RECEIPTS: [&str; 4] = [
    INPUT_DELIVERED,
    INPUT_APPLIED,
    INPUT_FAILED,
    INPUT_UNCERTAIN,
];

/// Author of entries the bridge produced.
pub const AUTHOR_BRIDGE: &str = "bridge";
/// Author of entries the server wrote itself.
pub const AUTHOR_SERVER: &str = "server";

/// Whether `kind` names a remote input (something to deliver to the bridge) rather than a
/// receipt or any other entry.
pub fn is_input(kind: &str) -> bool {
    kind.starts_with("input.") && !RECEIPTS.contains(&kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_are_not_inputs() {
        assert!(is_input(INPUT_TEXT));
        assert!(is_input("input.keys"));
        for r in RECEIPTS {
            assert!(!is_input(r));
        }
        assert!(!is_input(AGENT_OUTPUT));
    }
}

/// Whether `kind` is well-formed: 1–64 characters of `a-z 0-9 . _ -`, starting with a letter
/// (so it is safe as an SSE `event:` name).
pub fn is_valid(kind: &str) -> bool {
    (1..=64).contains(&kind.len())
        && kind.starts_with(|c: char| c.is_ascii_lowercase())
        && kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

#[cfg(test)]
mod validity {
    #[test]
    fn kinds_must_be_safe_event_names() {
        assert!(super::is_valid("agent.output"));
        assert!(!super::is_valid("agent\noutput"));
        assert!(!super::is_valid(""));
        assert!(!super::is_valid("Agent"));
    }
}
