//! Well-known entry kinds and authors. Kinds are an open set (an adapter may keep an event type
//! nobody knew about); these constants name the ones the server and the bridge rely on.

/// A line (or chunk) the agent wrote. Payload: `{"stream": "stdout"|"stderr", "text": ...}`.
pub const AGENT_OUTPUT: &str = "agent.output";
/// The agent process ended. Payload: `{"code": i32|null, "signal": i32|null}`.
pub const AGENT_EXIT: &str = "agent.exit";
/// The agent process started. Payload: `{"command": [...], "cwd": ..., "pid": ...}`.
pub const AGENT_START: &str = "agent.start";

/// Bytes the agent wrote to its pseudo-terminal (`pty` adapter), batched: one entry holds
/// whatever was read since the last one (at most [`PTY_OUTPUT_MAX_BYTES`]). Payload:
/// `{"data": <base64 of the raw bytes>}`; invalid UTF-8 and escape sequences are kept as they are.
pub const AGENT_PTY_OUTPUT: &str = "agent.pty.output";
/// Most raw bytes in one [`AGENT_PTY_OUTPUT`] entry.
pub const PTY_OUTPUT_MAX_BYTES: usize = 128 * 1024;
/// The agent's terminal changed size. Payload: `{"cols": u16, "rows": u16, "source":
/// "local"|"remote"|"start"}`.
pub const AGENT_PTY_RESIZE: &str = "agent.pty.resize";
/// Who holds a shell agent's terminal changed (`pty`, when the agent is a shell). Payload:
/// `{"waiting": bool, "foreground": <command name>, "pid": n}`: `waiting` when the shell itself
/// is in the foreground, at its prompt; else the foreground job's first process.
pub const AGENT_TERMINAL: &str = "agent.terminal";

/// The structured agent (Claude Code) announced its session. Payload: `{"agent_session_id": ...,
/// "model": ..., "cwd": ..., "tools": [...], "permission_mode": ..., "version": ...}`.
pub const AGENT_SESSION: &str = "agent.session";
/// A piece of assistant text as it streams. Payload: `{"message_id": ..., "index": n, "text": ...}`.
pub const AGENT_TEXT_DELTA: &str = "agent.text.delta";
/// A complete assistant text block. Payload: `{"message_id": ..., "text": ...}`.
pub const AGENT_TEXT: &str = "agent.text";
/// A complete assistant thinking block. Payload: `{"message_id": ..., "text": ...}`.
pub const AGENT_THINKING: &str = "agent.thinking";
/// Text of a user turn as the agent reports it (e.g. "[Request interrupted by user]").
/// Payload: `{"text": ...}`.
pub const AGENT_USER: &str = "agent.user";
/// The agent called a tool. Payload: `{"id": ..., "name": ..., "input": {...}, "path": ...|null}`
/// (`path` for file tools: Write, Edit, MultiEdit, Read, NotebookEdit).
pub const AGENT_TOOL_USE: &str = "agent.tool_use";
/// A tool finished. Payload: `{"tool_use_id": ..., "is_error": bool, "summary": <at most
/// [`TOOL_RESULT_SUMMARY_CHARS`] characters>, "bytes": <size of the full content>, "truncated":
/// bool}`.
pub const AGENT_TOOL_RESULT: &str = "agent.tool_result";
/// Largest entry a bridge spools and sends, as its `NewEntry` JSON: a larger one has its
/// longest strings cut short, each ending with a note of the bytes cut (terminal output: a line
/// saying so); `moor` also cuts an entry to a server's smaller frame limit when it sends it.
pub const ENTRY_MAX_BYTES: usize = 1 << 20;
/// Most characters of a tool result kept in [`AGENT_TOOL_RESULT`].
pub const TOOL_RESULT_SUMMARY_CHARS: usize = 2000;
/// The agent's todo list changed. Payload: `{"todos": [{"content": ..., "status": ...,
/// "activeForm": ...}, ...]}`.
pub const AGENT_TODOS: &str = "agent.todos";
/// A turn ended. Payload: `{"subtype": "success"|"error_…", "is_error": bool, "duration_ms": n,
/// "duration_api_ms": n, "num_turns": n, "cost_usd": f64, "result": <bounded text>,
/// "errors": [...], "terminal_reason": ..., "agent_session_id": ..., "permission_denials": n}`.
pub const AGENT_RESULT: &str = "agent.result";
/// Something went wrong on the agent side that is not a turn result: an unparseable output
/// line, a failed control request, a crash. Payload: `{"message": ..., "line": <bounded raw
/// text>|null}`.
pub const AGENT_ERROR: &str = "agent.error";
/// An agent event of a type the adapter does not model, kept as it came. Payload: `{"type":
/// ..., "subtype": ...|null, "raw": <the event, bounded>}`.
pub const AGENT_EVENT: &str = "agent.event";
/// The agent asks whether it may run a tool; pending until an [`AGENT_PERMISSION_RESOLVED`] with
/// the same `request_id`. Payload: `{"request_id": ..., "tool_name": ..., "tool_use_id": ...,
/// "input": {...}, "path": ...|null, "description": ...|null}`. Nothing resolves it by default.
pub const AGENT_PERMISSION_REQUEST: &str = "agent.permission.request";
/// A permission request was decided or withdrawn. Payload: `{"request_id": ..., "decision":
/// "allow"|"deny"|"cancelled", "by": <author>|null, "input_seq": n|null, "reason": ...|null}`.
pub const AGENT_PERMISSION_RESOLVED: &str = "agent.permission.resolved";
/// The agent has been silent too long while it should be working. Payload: `{"phase":
/// "streaming"|"tool", "silent_ms": n, "timeout_ms": n, "tool": {"id": ..., "name": ...}|null}`.
pub const AGENT_STALLED: &str = "agent.stalled";
/// A stalled agent produced output again. Payload: `{"after": "stall"}`.
pub const AGENT_ACTIVE: &str = "agent.active";
/// The bridge stopped and restarted the agent on the same agent session. Payload:
/// `{"reason": "stalled"|"crashed", "agent_session_id": ..., "attempt": n, "prompt": <the
/// recovery prompt sent first>, "previous_exit": {"code": ..., "signal": ...}|null}`.
pub const AGENT_RESTART: &str = "agent.restart";

/// Remote text for the agent's input. Payload: `{"text": ...}`; a newline is added if missing
/// (`lines`), Enter is pressed after it (`pty`), it is the next user prompt (`claude`).
pub const INPUT_TEXT: &str = "input.text";
/// Remote keystrokes for a terminal agent. Payload: `{"text": ...}` (UTF-8, sent as is, so
/// Enter is `"\r"`) or `{"data": <base64 bytes>}`.
pub const INPUT_KEYS: &str = "input.keys";
/// Resize the agent's terminal. Payload: `{"cols": u16, "rows": u16}`.
pub const INPUT_RESIZE: &str = "input.resize";
/// Stop the agent's current turn (Claude Code: an `interrupt` control request; a terminal
/// agent: Ctrl-C). Payload: `{}`.
pub const INPUT_INTERRUPT: &str = "input.interrupt";
/// Decide a pending [`AGENT_PERMISSION_REQUEST`]. Payload: `{"request_id": ..., "decision":
/// "allow"|"deny", "message": ...}` (`message` optional, told to the agent on deny).
pub const INPUT_PERMISSION: &str = "input.permission";
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
/// This session continues an ended one (`moor resume`). Payload: `{"session": <id>, "name":
/// ...}`, the ended session. Written by the server in the new session's first commit.
pub const SESSION_CONTINUED_FROM: &str = "session.continued_from";
/// This ended session was continued in another (`moor resume`). Payload: `{"session": <id>,
/// "name": ...}`, the new session. Written by the server once that one has started.
pub const SESSION_CONTINUED_IN: &str = "session.continued_in";

/// Kind of the server-written entry that records an interruption. Payload: `{"cause":
/// "link"|"agent", "phase": Phase, "open_tools": [OpenTool], "pending_permissions": [...],
/// "partial_text": ...}`.
pub const SESSION_INTERRUPTED: &str = "session.interrupted";
/// Kind of the bridge entry that records a file mutation's intent before the tool runs.
/// Payload: `{"tool_use_id": ..., "path": ..., "before": <sha256 hex>|null}`; the outcome,
/// once known, as `{"tool_use_id": ..., "path": ..., "after": ..., "verdict":
/// "applied"|"not_applied"|"changed_elsewhere"}` under [`TOOL_INTENT_CHECKED`].
pub const TOOL_INTENT: &str = "agent.tool.intent";
/// Kind of the bridge entry that reports the intent check of a file mutation.
pub const TOOL_INTENT_CHECKED: &str = "agent.tool.intent_checked";
/// Kind of a checkpoint entry (see the checkpoints work); the fold keeps the last one.
pub const CHECKPOINT_CREATED: &str = "checkpoint.created";

/// An action a machine running `moor host` is asked to apply (payload
/// [`crate::host::HostAction`]), in the machine's own log. Written only through the
/// `/api/v1/machines` routes, never through `POST …/inputs`.
pub const INPUT_HOST: &str = "input.host";
/// A machine started a session's `moor run` (payload [`crate::host::HostSessionStarted`]).
pub const HOST_SESSION_STARTED: &str = "host.session.started";
/// A session's `moor run` on a machine ended (payload [`crate::host::HostSessionExited`]).
pub const HOST_SESSION_EXITED: &str = "host.session.exited";
/// A machine restored a session's checkpoint into a new branch of its project (payload
/// [`crate::host::HostCheckpointRestored`]).
pub const HOST_CHECKPOINT_RESTORED: &str = "host.checkpoint.restored";

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
        for kind in [INPUT_KEYS, INPUT_RESIZE, INPUT_INTERRUPT, INPUT_PERMISSION] {
            assert!(is_input(kind) && is_valid(kind), "{kind}");
        }
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
