use std::collections::BTreeMap;

use moor_protocol::payload::Resolution;
use serde_json::{json, Value};

use super::*;
use crate::adapter::acp::rpc::{self, Incoming};
use crate::adapter::capture_tests::{
    answer_allowed_denied_then, answered, as_log, assert_every_prefix_folds, fixture, kinds_of,
    of_kind, turn_kinds,
};

/// A capture run through the mapper as the adapter runs it: `IN` says which of our requests each
/// response answers and how each permission request was answered.
fn replay(name: &str) -> Vec<Draft> {
    let requests: Vec<Value> = fixture(&format!("{name}.IN.jsonl"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ours: BTreeMap<u64, String> = requests
        .iter()
        .filter_map(|r| Some((r["id"].as_u64()?, r["method"].as_str()?.to_owned())))
        .collect();
    let answers: BTreeMap<String, Value> = requests
        .iter()
        .filter(|r| r.get("method").is_none())
        .map(|r| (request_id(&r["id"]), r["result"].clone()))
        .collect();
    let mut mapper = Mapper::new();
    mapper.replaying = ours.values().any(|m| m == "session/load");
    mapper.replay_ends_with_commands = name.starts_with("gemini-cli/");
    mapper.turn_started();
    let mut drafts = Vec::new();
    for line in fixture(&format!("{name}.OUT.jsonl")).lines() {
        match rpc::parse(line) {
            Incoming::Notification { params, .. } => drafts.extend(mapper.update(&params).drafts),
            Incoming::Request { id, params, .. } => {
                let (mapped, request, _) = mapper.permission(&id, &params);
                drafts.extend(mapped.drafts);
                let answer = &answers[&request.request_id]["outcome"];
                let decision = match answer["optionId"].as_str() {
                    Some("proceed_once" | "proceed_always") => Resolution::Allow,
                    Some(_) => Resolution::Deny,
                    None => Resolution::Cancelled,
                };
                drafts.push(answered(&request.request_id, decision));
            }
            Incoming::Response { id, outcome } => match ours[&id].as_str() {
                "session/prompt" => {
                    drafts.extend(mapper.turn_ended(&outcome, Some("s")).drafts);
                    mapper.turn_started();
                }
                "session/load" => drafts.extend(mapper.replay_done()),
                _ => {}
            },
            Incoming::Invalid(why) => panic!("{name}: {why}: {line}"),
        }
    }
    drafts
}

/// The entry that sums up the history a loaded session replayed.
fn replay_summary(drafts: &[Draft]) -> &Draft {
    drafts
        .iter()
        .find(|d| d.payload["subtype"] == "history_replayed")
        .expect("a replay summary")
}

const CAPTURES: [&str; 4] = [
    "gemini-cli/01_prompt_allow_deny_cancel",
    "gemini-cli/02_load_then_prompt",
    "codex-acp/01_prompt_allow_deny",
    "codex-acp/02_load_then_prompt",
];

/// Every prefix of every captured stream (Gemini CLI, Codex through codex-acp) folds to a valid state: an API-valid
/// repaired transcript, and a fold that resumes from any snapshot to the same state.
#[test]
fn every_prefix_of_every_acp_capture_gives_a_valid_transcript_and_a_consistent_fold() {
    for name in CAPTURES {
        assert_every_prefix_folds(name, &as_log(replay(name)));
    }
}

#[test]
fn gemini_asks_before_announcing_a_call_and_the_log_still_has_call_request_result() {
    let drafts = replay("gemini-cli/01_prompt_allow_deny_cancel");
    // The allowed call is announced by the permission request and finished by the agent; Gemini
    // CLI never reports the denied call again, the turn's end closes it. Then a turn is
    // cancelled mid-stream.
    assert_eq!(
        turn_kinds(&drafts),
        answer_allowed_denied_then(&["agent.text", "agent.result"])
    );
    let uses = of_kind(&drafts, "agent.tool_use");
    assert_eq!(uses[0].payload["name"], "Bash");
    assert!(uses[0].payload["input"]["command"]
        .as_str()
        .unwrap()
        .starts_with("touch "));
    let results = of_kind(&drafts, "agent.result");
    assert_eq!(results[3].payload["terminal_reason"], "aborted_streaming");
    assert_eq!(results[3].payload["is_error"], true);
    assert!(drafts
        .iter()
        .any(|d| d.kind == "agent.event" && d.payload["subtype"] == "prompt_result_meta"));
}

#[test]
fn a_loaded_session_logs_how_much_history_it_replayed_not_the_history_again() {
    let drafts = replay("gemini-cli/02_load_then_prompt");
    let replayed = replay_summary(&drafts);
    // Gemini CLI answers session/load after one update and replays the rest after.
    assert_eq!(replayed.payload["raw"]["updates"], 11);
    assert_eq!(
        of_kind(&drafts, "agent.text").len(),
        1,
        "only the new turn's answer"
    );
}

#[test]
fn allow_picks_allow_once_never_always_and_deny_picks_a_reject() {
    let pending = Pending {
        rpc_id: json!(0),
        options: vec![
            ("proceed_always".into(), "allow_always".into()),
            ("proceed_once".into(), "allow_once".into()),
            ("cancel".into(), "reject_once".into()),
        ],
    };
    assert_eq!(pending.option_for(true), Some("proceed_once"));
    assert_eq!(pending.option_for(false), Some("cancel"));
    let only_always = Pending {
        rpc_id: json!(0),
        options: vec![("a".into(), "allow_always".into())],
    };
    assert_eq!(only_always.option_for(true), None);
    assert_eq!(only_always.option_for(false), None);
}

#[test]
fn plans_unknown_updates_and_oversized_input_are_kept_bounded() {
    let mut mapper = Mapper::new();
    let plan = mapper.update(&json!({"update": {"sessionUpdate": "plan", "entries": [
        {"content": "a", "priority": "high", "status": "in_progress"}]}}));
    assert_eq!(kinds_of(&plan.drafts), ["agent.todos"]);
    assert_eq!(plan.drafts[0].payload["todos"][0]["status"], "in_progress");
    let odd = mapper
        .update(&json!({"update": {"sessionUpdate": "current_mode_update", "modeId": "yolo"}}));
    assert_eq!(kinds_of(&odd.drafts), ["agent.event"]);
    assert_eq!(odd.drafts[0].payload["type"], "acp");
    assert_eq!(odd.drafts[0].payload["subtype"], "current_mode_update");
    let huge = "x".repeat(RAW_CHARS * 2);
    let call = mapper.update(
        &json!({"update": {"sessionUpdate": "tool_call", "toolCallId": "t",
        "title": "write", "kind": "edit", "status": "pending",
        "locations": [{"path": "/p/f"}], "rawInput": {"content": huge}}}),
    );
    let input = &call.drafts[0].payload["input"];
    assert_eq!(input["truncated"], true);
    assert_eq!(call.drafts[0].payload["path"], "/p/f");
    assert_eq!(call.drafts[0].payload["name"], "Edit");
}

#[test]
fn codex_replays_before_answering_and_its_command_argv_is_kept_beside_the_command_line() {
    let loaded = replay("codex-acp/02_load_then_prompt");
    let replayed = replay_summary(&loaded);
    assert_eq!(replayed.payload["raw"]["updates"], 9);
    assert_eq!(of_kind(&loaded, "agent.tool_use").len(), 0);
    let drafts = replay("codex-acp/01_prompt_allow_deny");
    let tool = drafts.iter().find(|d| d.kind == "agent.tool_use").unwrap();
    assert_eq!(tool.payload["name"], "Bash");
    let command = tool.payload["input"]["command"].as_str().unwrap();
    assert!(command.starts_with("touch "), "{command}");
    assert_eq!(tool.payload["input"]["argv"][0], "/bin/bash");
    // Codex's "abort" answer to a permission request ends the turn as cancelled.
    let last = drafts
        .iter()
        .rev()
        .find(|d| d.kind == "agent.result")
        .unwrap();
    assert_eq!(last.payload["subtype"], "cancelled");
}
