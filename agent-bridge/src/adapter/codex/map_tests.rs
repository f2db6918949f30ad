use std::collections::BTreeMap;

use moor_protocol::payload::Resolution;
use serde_json::{json, Value};

use super::*;
use crate::adapter::acp::rpc::{self, Incoming};
use crate::adapter::capture_tests::{
    answer_allowed_denied_then, answered, as_log, assert_every_prefix_folds, fixture, kinds_of,
    of_kind, turn_kinds,
};

/// A capture run through the mapper as the adapter runs it: `IN` says how each approval
/// request was answered.
fn replay(name: &str) -> Vec<Draft> {
    let answers: BTreeMap<String, Value> = fixture(&format!("codex/{name}.IN.jsonl"))
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r.get("method").is_none())
        .map(|r| (request_id(&r["id"]), r["result"].clone()))
        .collect();
    let mut mapper = Mapper::new();
    let mut drafts = Vec::new();
    for line in fixture(&format!("codex/{name}.OUT.jsonl")).lines() {
        match rpc::parse(line) {
            Incoming::Notification { method, params } => {
                drafts.extend(mapper.notification(&method, &params).drafts)
            }
            Incoming::Request { id, method, params } => {
                let (mapped, request) = mapper.approval(&id, &method, &params);
                drafts.extend(mapped.drafts);
                let decision = match answers[&request.request_id]["decision"].as_str() {
                    Some("accept") => Resolution::Allow,
                    Some("decline") => Resolution::Deny,
                    _ => Resolution::Cancelled,
                };
                drafts.push(answered(&request.request_id, decision));
            }
            Incoming::Response { .. } => {}
            Incoming::Invalid(why) => panic!("{name}: {why}: {line}"),
        }
    }
    drafts
}

const CAPTURES: [&str; 3] = [
    "01_allow_deny_interrupt",
    "02_resume_then_prompt",
    "03_file_change_allow_deny",
];

/// Every prefix of every captured app-server stream folds to a valid state: an API-valid
/// repaired transcript, and a fold that resumes from any snapshot to the same state.
#[test]
fn every_prefix_of_every_codex_capture_gives_a_valid_transcript_and_a_consistent_fold() {
    for name in CAPTURES {
        assert_every_prefix_folds(name, &as_log(replay(name)));
    }
}

#[test]
fn an_approved_and_a_declined_command_are_bash_calls_with_their_results() {
    let drafts = replay("01_allow_deny_interrupt");
    // The declined call ends declined and the model goes on; then a turn is interrupted while
    // the model stream was silent, and one more is answered.
    assert_eq!(
        turn_kinds(&drafts),
        answer_allowed_denied_then(&["agent.result", "agent.text", "agent.result"])
    );
    let uses = of_kind(&drafts, "agent.tool_use");
    assert_eq!(uses[0].payload["name"], "Bash");
    assert_eq!(
        uses[0].payload["input"]["command"],
        "touch /tmp/cx/proj/allowed.txt"
    );
    assert_eq!(
        uses[0].payload["input"]["shell_command"],
        "/bin/bash -lc 'touch /tmp/cx/proj/allowed.txt'"
    );
    let request = drafts
        .iter()
        .find(|d| d.kind == "agent.permission.request")
        .unwrap();
    assert_eq!(request.payload["tool_use_id"], uses[0].payload["id"]);
    assert_eq!(
        request.payload["input"]["command"],
        "touch /tmp/cx/proj/allowed.txt"
    );
    let results = of_kind(&drafts, "agent.tool_result");
    assert_eq!(results[0].payload["is_error"], false);
    assert_eq!(results[1].payload["is_error"], true);
    let turns = of_kind(&drafts, "agent.result");
    assert_eq!(turns[2].payload["subtype"], "success");
    assert_eq!(turns[3].payload["subtype"], "cancelled");
    assert_eq!(turns[3].payload["terminal_reason"], "aborted_streaming");
    assert!(drafts
        .iter()
        .any(|d| d.kind == "agent.event" && d.payload["subtype"] == "token_usage"));
}

#[test]
fn an_approved_and_a_declined_patch_are_edit_calls_on_their_files() {
    let drafts = replay("03_file_change_allow_deny");
    let uses = of_kind(&drafts, "agent.tool_use");
    assert_eq!(uses.len(), 2);
    assert_eq!(uses[0].payload["name"], "Edit");
    assert_eq!(uses[0].payload["path"], "/tmp/cx/proj/hello.txt");
    assert_eq!(uses[0].payload["input"]["changes"][0]["kind"], "add");
    let asked = of_kind(&drafts, "agent.permission.request");
    assert_eq!(asked[1].payload["tool_name"], "Edit");
    assert_eq!(asked[1].payload["path"], "/tmp/cx/proj/denied.txt");
    let results = of_kind(&drafts, "agent.tool_result");
    assert_eq!(results[0].payload["is_error"], false);
    assert_eq!(results[1].payload["is_error"], true);
}

#[test]
fn reasoning_plans_file_changes_and_failures_map_to_their_kinds() {
    let mut mapper = Mapper::new();
    let reasoning = json!({"type": "reasoning", "id": "r1", "summary": [], "content": []});
    mapper.notification("item/started", &json!({"item": reasoning}));
    mapper.notification(
        "item/reasoning/summaryTextDelta",
        &json!({"itemId": "r1", "delta": "think", "summaryIndex": 0}),
    );
    let thought = mapper.notification("item/completed", &json!({"item": reasoning}));
    assert_eq!(kinds_of(&thought.drafts), ["agent.thinking"]);
    assert_eq!(thought.drafts[0].payload["text"], "think");

    let plan = mapper.notification(
        "turn/plan/updated",
        &json!({"plan": [{"step": "a", "status": "inProgress"}, {"step": "b", "status": "pending"}]}),
    );
    assert_eq!(kinds_of(&plan.drafts), ["agent.todos"]);
    assert_eq!(plan.drafts[0].payload["todos"][0]["status"], "in_progress");

    let change = json!({"type": "fileChange", "id": "p1", "status": "inProgress",
        "changes": [{"path": "/p/f.rs", "kind": {"type": "update", "move_path": null}, "diff": "@@"}]});
    let started = mapper.notification("item/started", &json!({"item": change}));
    assert_eq!(started.drafts[0].payload["name"], "Edit");
    assert_eq!(started.drafts[0].payload["path"], "/p/f.rs");
    let (asked, request) = mapper.approval(
        &json!(7),
        "item/fileChange/requestApproval",
        &json!({"itemId": "p1", "reason": "write"}),
    );
    assert_eq!(kinds_of(&asked.drafts), ["agent.permission.request"]);
    assert_eq!(request.tool_name, "Edit");
    assert_eq!(asked.drafts[0].payload["path"], "/p/f.rs");

    let failed = mapper.notification(
        "turn/completed",
        &json!({"threadId": "t", "turn": {"status": "failed", "error": {"message": "quota"}}}),
    );
    assert_eq!(
        kinds_of(&failed.drafts),
        ["agent.tool_result", "agent.result", "agent.error"]
    );
    assert_eq!(failed.drafts[1].payload["is_error"], true);
    assert_eq!(failed.drafts[1].payload["agent_session_id"], "t");

    let odd = mapper.notification("thread/name/updated", &json!({"name": "x"}));
    assert_eq!(kinds_of(&odd.drafts), ["agent.event"]);
    assert_eq!(odd.drafts[0].payload["type"], "codex");
    let retry = mapper.notification(
        "error",
        &json!({"error": {"message": "429"}, "willRetry": true}),
    );
    assert_eq!(retry.drafts[0].payload["reason"], "api_retry");
}

#[test]
fn shell_wrappers_are_unwrapped_only_when_the_script_is_one_quoted_word() {
    assert_eq!(
        unwrap_shell("/bin/bash -lc 'sleep 120'").as_deref(),
        Some("sleep 120")
    );
    assert_eq!(
        unwrap_shell(r#"bash -lc 'echo '\''hi'\'''"#).as_deref(),
        Some("echo 'hi'")
    );
    assert_eq!(unwrap_shell("/bin/bash -lc 'a' && b"), None);
    assert_eq!(unwrap_shell("python -c 'x'"), None);
    let tool = command_tool(&json!({"command": "ls -la", "cwd": "/p"}));
    assert_eq!(tool.input["command"], "ls -la");
    assert!(tool.input.get("shell_command").is_none());
}
