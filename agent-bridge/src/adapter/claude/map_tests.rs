//! The mapping against recorded Claude Code 2.1.332 captures (`tests/fixtures/claude-code/`).

use super::*;
use crate::adapter::capture_tests::{assert_every_prefix_folds, fixture, kinds_of};

fn map_all(name: &str) -> (Vec<Draft>, Vec<Signal>) {
    let mut mapper = Mapper::new();
    let (mut drafts, mut signals) = (Vec::new(), Vec::new());
    for line in fixture(&format!("claude-code/{name}")).lines() {
        let m = mapper.map_line(line);
        drafts.extend(m.drafts);
        signals.extend(m.signals);
    }
    (drafts, signals)
}

#[test]
fn a_text_turn_maps_to_session_text_and_result() {
    let (drafts, _) = map_all("01_text.stream.jsonl");
    assert_eq!(
        kinds_of(&drafts),
        ["agent.session", "agent.text", "agent.result"]
    );
    let session = &drafts[0].payload;
    assert_eq!(
        session["agent_session_id"],
        "782542fa-061f-4cbf-bdfe-e1db8eef26dc"
    );
    assert_eq!(session["model"], "claude-opus-5-5");
    assert_eq!(session["cwd"], "/home/dev/project");
    assert!(session["tools"].as_array().unwrap().len() > 5);
    assert_eq!(drafts[1].payload["text"], "Hello from the fake model.");
    let result = &drafts[2].payload;
    assert_eq!(result["subtype"], "success");
    assert_eq!(result["is_error"], false);
    assert_eq!(result["num_turns"], 1);
    assert_eq!(result["cost_usd"], 0.0008);
    assert!(result["duration_ms"].is_u64());
}

#[test]
fn a_tool_call_maps_to_tool_use_and_a_bounded_result_in_order() {
    let (drafts, signals) = map_all("02_bash_echo_autoallowed.stream.jsonl");
    assert_eq!(
        kinds_of(&drafts),
        [
            "agent.session",
            "agent.text",
            "agent.tool_use",
            "agent.tool_result",
            "agent.text",
            "agent.result"
        ]
    );
    let tool = &drafts[2].payload;
    assert_eq!(tool["name"], "Bash");
    assert_eq!(tool["input"]["command"], "echo hi");
    assert_eq!(tool["path"], Value::Null);
    let result = &drafts[3].payload;
    assert_eq!(result["tool_use_id"], tool["id"]);
    assert_eq!(result["is_error"], false);
    assert_eq!(result["summary"], "hi");
    assert!(signals.contains(&Signal::ToolStarted {
        id: tool["id"].as_str().unwrap().into(),
        name: "Bash".into()
    }));
    assert!(signals.contains(&Signal::TurnEnded { success: true }));
}

#[test]
fn file_tools_carry_their_path_and_denials_are_error_results() {
    let (drafts, _) = map_all("03_write_permission_denied.stream.jsonl");
    let tool = drafts.iter().find(|d| d.kind == "agent.tool_use").unwrap();
    assert_eq!(tool.payload["name"], "Write");
    assert_eq!(tool.payload["path"], "/home/dev/project/hello.txt");
    let result = drafts
        .iter()
        .find(|d| d.kind == "agent.tool_result")
        .unwrap();
    assert_eq!(result.payload["is_error"], true);
    // The config-driven denial notice is kept, not dropped.
    assert!(drafts
        .iter()
        .any(|d| d.kind == "agent.event" && d.payload["subtype"] == "permission_denied"));
    let res = drafts.iter().find(|d| d.kind == "agent.result").unwrap();
    assert_eq!(res.payload["permission_denials"], 1);
}

#[test]
fn partial_messages_give_text_deltas_that_add_up_to_the_final_text() {
    let (drafts, _) = map_all("06_bash_include_partial_messages.stream.jsonl");
    let deltas: String = drafts
        .iter()
        .filter(|d| d.kind == "agent.text.delta")
        .take(4)
        .map(|d| d.payload["text"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "I'll run a command.");
    let first_text = drafts.iter().find(|d| d.kind == "agent.text").unwrap();
    assert_eq!(first_text.payload["text"], "I'll run a command.");
    // Block starts/stops and tool input JSON are not entries of their own.
    assert!(!drafts.iter().any(|d| d.kind == "agent.event"));
}

#[test]
fn a_can_use_tool_request_is_a_pending_permission_entry_and_a_signal() {
    let (drafts, signals) = map_all("08_persistent_stdio_permissions.OUT.jsonl");
    let req = drafts
        .iter()
        .find(|d| d.kind == "agent.permission.request")
        .unwrap();
    assert_eq!(
        req.payload["request_id"],
        "47afc91c-cbe0-4eed-8ae4-88843d7a8f08"
    );
    assert_eq!(req.payload["tool_name"], "Bash");
    assert_eq!(req.payload["input"]["command"], "touch x.txt");
    assert_eq!(req.payload["path"], "/home/dev/project/x.txt");
    assert!(signals.iter().any(|s| matches!(s,
        Signal::Permission(p) if p.request_id == "47afc91c-cbe0-4eed-8ae4-88843d7a8f08"
            && p.input["command"] == "touch x.txt")));
    // Three turns, one session entry: the per-turn init is not repeated.
    assert_eq!(
        drafts.iter().filter(|d| d.kind == "agent.session").count(),
        1
    );
    assert_eq!(
        drafts.iter().filter(|d| d.kind == "agent.result").count(),
        3
    );
}

#[test]
fn an_interrupted_turn_ends_in_an_error_result() {
    let (drafts, signals) = map_all("13_interrupt.OUT.jsonl");
    let results: Vec<_> = drafts.iter().filter(|d| d.kind == "agent.result").collect();
    assert_eq!(results[0].payload["terminal_reason"], "aborted_streaming");
    assert_eq!(results[0].payload["is_error"], true);
    assert!(drafts
        .iter()
        .any(|d| d.kind == "agent.user" && d.payload["text"] == "[Request interrupted by user]"));
    assert!(signals.contains(&Signal::TurnEnded { success: false }));
    assert!(signals
        .iter()
        .any(|s| matches!(s, Signal::ControlResponse { request_id, error: None } if request_id == "req_int_0")));
}

#[test]
fn a_failed_resume_is_an_error_result_naming_the_reason() {
    let (drafts, _) = map_all("10_resume_unknown_id.stream.jsonl");
    assert_eq!(kinds_of(&drafts), ["agent.result", "agent.error"]);
    assert_eq!(drafts[0].payload["subtype"], "error_during_execution");
    assert!(drafts[0].payload["errors"][0]
        .as_str()
        .unwrap()
        .contains("No conversation found"));
    // The failure is an error entry of its own, saying what failed.
    let error = &drafts[1].payload;
    assert_eq!(error["reason"], "error_during_execution");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("No conversation found"), "{message}");
}

#[test]
fn an_interrupted_turn_is_not_an_agent_error() {
    let (drafts, _) = map_all("13_interrupt.OUT.jsonl");
    assert!(!kinds_of(&drafts).contains(&"agent.error"), "{drafts:?}");
}

#[test]
fn model_api_retries_are_errors_with_their_count_and_the_failed_turn_names_them() {
    let mut mapper = Mapper::new();
    let retry = |n: u32| {
        format!(
            r#"{{"type":"system","subtype":"api_retry","attempt":{n},"max_retries":2,"retry_delay_ms":600,"error_status":529,"error":"overloaded_error","session_id":"s"}}"#
        )
    };
    let first = mapper.map_line(&retry(1));
    assert_eq!(kinds_of(&first.drafts), ["agent.error"]);
    let e = &first.drafts[0].payload;
    assert_eq!(
        (e["retries"].clone(), e["status"].clone()),
        (1.into(), 529.into())
    );
    assert_eq!(e["reason"], "api_retry");
    assert!(e["message"].as_str().unwrap().contains("529"), "{e}");
    mapper.map_line(&retry(2));
    let failed = mapper.map_line(
        r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 529 Overloaded","terminal_reason":"api_error","total_cost_usd":0,"session_id":"s"}"#,
    );
    assert_eq!(kinds_of(&failed.drafts), ["agent.result", "agent.error"]);
    let e = &failed.drafts[1].payload;
    assert_eq!(e["retries"], 2);
    assert_eq!(e["reason"], "api_error");
    assert!(
        e["message"].as_str().unwrap().contains("API Error: 529"),
        "{e}"
    );
    // The count is per turn.
    let next = mapper.map_line(&retry(1));
    assert_eq!(next.drafts[0].payload["retries"], 1);
}

#[test]
fn unknown_and_malformed_lines_are_kept_as_event_and_error_entries() {
    let mut mapper = Mapper::new();
    let unknown = mapper.map_line(r#"{"type":"brand_new","x":1}"#);
    assert_eq!(kinds_of(&unknown.drafts), ["agent.event"]);
    assert_eq!(unknown.drafts[0].payload["type"], "brand_new");
    assert_eq!(unknown.drafts[0].payload["raw"]["x"], 1);
    for bad in ["not json at all", "[1,2]", r#"{"type":"assistant""#] {
        let m = mapper.map_line(bad);
        assert_eq!(kinds_of(&m.drafts), ["agent.error"], "{bad}");
        assert_eq!(m.drafts[0].payload["line"], bad);
    }
    assert!(mapper.map_line("  ").drafts.is_empty());
    let odd_block = mapper.map_line(
        r#"{"type":"assistant","message":{"id":"m","content":[{"type":"hologram","z":2}]}}"#,
    );
    assert_eq!(kinds_of(&odd_block.drafts), ["agent.event"]);
}

#[test]
fn todo_writes_become_todo_entries_and_long_results_are_bounded() {
    let mut mapper = Mapper::new();
    let todo = mapper.map_line(
        r#"{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"t1","name":"TodoWrite","input":{"todos":[{"content":"a","status":"pending","activeForm":"A"}]}}]}}"#,
    );
    assert_eq!(kinds_of(&todo.drafts), ["agent.todos", "agent.tool_use"]);
    assert_eq!(todo.drafts[0].payload["todos"][0]["content"], "a");
    let long = "é".repeat(kinds::TOOL_RESULT_SUMMARY_CHARS + 10);
    let line = serde_json::json!({"type":"user","message":{"role":"user","content":[
        {"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text": long}]}]}});
    let m = mapper.map_line(&line.to_string());
    let p = &m.drafts[0].payload;
    assert_eq!(p["truncated"], true);
    assert_eq!(p["bytes"], long.len());
    assert_eq!(
        p["summary"].as_str().unwrap().chars().count(),
        kinds::TOOL_RESULT_SUMMARY_CHARS
    );
}

/// The capture `name` as the log would hold it.
fn as_log(name: &str) -> Vec<moor_protocol::Entry> {
    crate::adapter::capture_tests::as_log(map_all(name).0)
}

const CAPTURES: [&str; 8] = [
    "01_text.stream.jsonl",
    "02_bash_echo_autoallowed.stream.jsonl",
    "03_write_permission_denied.stream.jsonl",
    "04_write_acceptEdits.stream.jsonl",
    "06_bash_include_partial_messages.stream.jsonl",
    "08_persistent_stdio_permissions.OUT.jsonl",
    "10_resume_unknown_id.stream.jsonl",
    "13_interrupt.OUT.jsonl",
];

#[test]
fn every_prefix_of_every_real_capture_gives_a_valid_transcript_and_a_consistent_fold() {
    for name in CAPTURES {
        assert_every_prefix_folds(name, &as_log(name));
    }
}

/// The entries mapped from two captures are the golden typed entries in
/// `protocol/tests/fixtures/entry_body_list.json`, which the protocol round-trips and the web
/// client type-checks (`scripts/gen-ts`). `MOOR_BLESS=1` rewrites the file after a deliberate
/// change to the mapping.
#[test]
fn mapped_captures_are_the_golden_typed_entries_both_sides_check() {
    // arrange
    let path = format!(
        "{}/../protocol/tests/fixtures/entry_body_list.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut drafts = map_all("08_persistent_stdio_permissions.OUT.jsonl").0;
    drafts.extend(map_all("06_bash_include_partial_messages.stream.jsonl").0);
    // act
    let bodies: Vec<moor_protocol::EntryBody> = drafts
        .iter()
        .map(|d| d.body().unwrap_or_else(|e| panic!("{}: {e}", d.kind)))
        .collect();
    let encoded = serde_json::to_value(&bodies).unwrap();
    // assert
    for (d, body) in drafts.iter().zip(&encoded.as_array().unwrap()[..]) {
        assert_eq!(
            body["payload"], d.payload,
            "{} re-encodes as spooled",
            d.kind
        );
    }
    if std::env::var_os("MOOR_BLESS").is_some() {
        let text = serde_json::to_string_pretty(&encoded).unwrap();
        std::fs::write(&path, text + "\n").unwrap();
    }
    let golden: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(encoded, golden, "{path} (MOOR_BLESS=1 rewrites it)");
}
