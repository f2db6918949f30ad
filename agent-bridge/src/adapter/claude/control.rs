//! What the adapter writes to Claude Code's stdin (stream-json user messages and control
//! messages) and the command line that puts it in that mode.
//!
//! Pure builders: every function returns one JSON line, newline included.

use serde_json::{json, Value};

/// Flags the adapter needs, added when the user did not give them: structured output with
/// partial messages, structured input, permission prompts delegated to us over stdio.
const REQUIRED_FLAGS: [(&str, Option<&str>); 6] = [
    ("--print", None),
    ("--input-format", Some("stream-json")),
    ("--output-format", Some("stream-json")),
    ("--verbose", None),
    ("--include-partial-messages", None),
    ("--permission-prompt-tool", Some("stdio")),
];

/// Flags that pick a conversation; replaced by `--resume <id>` on a restart.
const SESSION_FLAGS: [(&str, bool); 5] = [
    ("--resume", true),
    ("-r", true),
    ("--continue", false),
    ("-c", false),
    ("--session-id", true),
];

/// The full command: `command` (program and the user's arguments) plus the structured-mode flags,
/// plus `--resume <id>` when restarting.
pub fn command_line(command: &[String], resume: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(command.len() + 12);
    let mut args = command.iter();
    out.extend(args.next().cloned());
    while let Some(arg) = args.next() {
        if resume.is_some() {
            if let Some((_, takes_value)) = SESSION_FLAGS.iter().find(|(f, _)| f == arg) {
                if *takes_value {
                    args.next();
                }
                continue;
            }
        }
        if REQUIRED_FLAGS.iter().any(|(f, v)| f == arg && v.is_some()) {
            // Ours wins: the adapter cannot work with another format.
            args.next();
            continue;
        }
        out.push(arg.clone());
    }
    for (flag, value) in REQUIRED_FLAGS {
        let present = out
            .iter()
            .any(|a| a == flag || (flag == "--print" && a == "-p"));
        if value.is_some() || !present {
            out.push(flag.to_owned());
            out.extend(value.map(str::to_owned));
        }
    }
    if let Some(id) = resume {
        out.push("--resume".into());
        out.push(id.to_owned());
    }
    out
}

fn line(value: Value) -> String {
    let mut s = value.to_string();
    s.push('\n');
    s
}

/// A user prompt.
pub fn user_message(text: &str) -> String {
    line(json!({
        "type": "user",
        "message": {"role": "user", "content": text},
        "parent_tool_use_id": null,
        "session_id": "",
    }))
}

/// The `initialize` handshake the SDKs send first.
pub fn initialize(request_id: &str) -> String {
    line(json!({
        "type": "control_request",
        "request_id": request_id,
        "request": {"subtype": "initialize", "hooks": null},
    }))
}

/// Stop the current turn.
pub fn interrupt(request_id: &str) -> String {
    line(json!({
        "type": "control_request",
        "request_id": request_id,
        "request": {"subtype": "interrupt"},
    }))
}

/// Allow a tool call with its input unchanged.
pub fn allow(request_id: &str, input: &Value) -> String {
    success(
        request_id,
        json!({"behavior": "allow", "updatedInput": input}),
    )
}

/// Deny a tool call, telling the model why.
pub fn deny(request_id: &str, message: &str) -> String {
    success(request_id, json!({"behavior": "deny", "message": message}))
}

/// Refuse a control request the adapter does not serve, so the agent does not wait for it.
pub fn unsupported(request_id: &str, subtype: &str) -> String {
    line(json!({
        "type": "control_response",
        "response": {
            "subtype": "error",
            "request_id": request_id,
            "error": format!("moor does not handle {subtype} control requests"),
        },
    }))
}

fn success(request_id: &str, response: Value) -> String {
    line(json!({
        "type": "control_response",
        "response": {"subtype": "success", "request_id": request_id, "response": response},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::argv;

    #[test]
    fn structured_flags_are_added_once_and_override_the_users_formats() {
        let full = command_line(&argv("claude -p --output-format text --model x"), None);
        assert_eq!(
            full,
            argv(
                "claude -p --model x --input-format stream-json --output-format stream-json \
                 --verbose --include-partial-messages --permission-prompt-tool stdio"
            )
        );
    }

    #[test]
    fn a_restart_resumes_the_agent_session_instead_of_the_users_choice() {
        let cmd = argv("claude --continue --resume old --model x");
        let full = command_line(&cmd, Some("new-id"));
        assert!(!full.contains(&"old".to_owned()));
        assert!(!full.contains(&"--continue".to_owned()));
        assert_eq!(full[full.len() - 2..], argv("--resume new-id"));
        assert!(full.contains(&"--print".to_owned()));
    }

    #[test]
    fn messages_are_single_json_lines() {
        for msg in [
            user_message("hi\nthere"),
            interrupt("r1"),
            allow("r2", &json!({"command": "ls"})),
            deny("r3", "no"),
            unsupported("r4", "hook_callback"),
            initialize("r5"),
        ] {
            assert!(msg.ends_with('\n'));
            assert_eq!(msg.matches('\n').count(), 1, "{msg}");
            let v: Value = serde_json::from_str(&msg).unwrap();
            assert!(v["type"].is_string());
        }
        let allow: Value = serde_json::from_str(&allow("r2", &json!({"a": 1}))).unwrap();
        assert_eq!(allow["response"]["response"]["updatedInput"]["a"], 1);
        assert_eq!(allow["response"]["request_id"], "r2");
    }
}
