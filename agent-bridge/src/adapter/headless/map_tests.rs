use moor_protocol::payload::InputText;

use super::codex_exec::CodexExecMapper;
use super::gemini::GeminiMapper;
use super::*;
use crate::adapter::capture_tests::{as_log, assert_every_prefix_folds, fixture, of_kind};

/// The captures `names` (each one turn's output) as one run of `D` maps them, a prompt before
/// each turn after the first; a turn whose output ends early is cut short as the adapter
/// does (interrupted when its name says `sigint`).
fn replay<D: Dialect>(dir: &str, names: &[&str]) -> (D, Vec<Draft>) {
    let mut dialect = D::default();
    let mut drafts = Vec::new();
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            drafts.push(Draft::new(InputText {
                text: "next".into(),
            }));
        }
        dialect.turn_started();
        for line in fixture(&format!("{dir}/{name}")).lines() {
            let event: Value = serde_json::from_str(line).unwrap();
            drafts.extend(dialect.event(&event).drafts);
        }
        if !dialect.turn_over() {
            let interrupted = name.contains("sigint");
            drafts.extend(dialect.cut_short(interrupted, "exited").drafts);
        }
    }
    (dialect, drafts)
}

const GEMINI: [&str; 6] = [
    "01_text.jsonl",
    "02_resume.jsonl",
    "03_shell_default_mode.jsonl",
    "04_shell_yolo.jsonl",
    "05_stall_sigint.jsonl",
    "06_api_unreachable.jsonl",
];

const CODEX: [&str; 6] = [
    "01_text.jsonl",
    "02_resume.jsonl",
    "03_command.jsonl",
    "04_stall_sigint.jsonl",
    "05_file_change.jsonl",
    "06_api_unreachable.jsonl",
];

#[test]
fn every_prefix_of_every_headless_capture_folds_to_a_valid_state() {
    for name in GEMINI {
        let (_, drafts) = replay::<GeminiMapper>("gemini-headless", &[name]);
        assert_every_prefix_folds(name, &as_log(drafts));
    }
    for name in CODEX {
        let (_, drafts) = replay::<CodexExecMapper>("codex-exec", &[name]);
        assert_every_prefix_folds(name, &as_log(drafts));
    }
    let (_, drafts) = replay::<GeminiMapper>("gemini-headless", &GEMINI);
    assert_every_prefix_folds("gemini, all turns", &as_log(drafts));
    let (_, drafts) = replay::<CodexExecMapper>("codex-exec", &CODEX);
    assert_every_prefix_folds("codex exec, all turns", &as_log(drafts));
}

#[test]
fn gemini_turns_map_to_a_session_text_a_bash_call_and_results() {
    let (gemini, drafts) = replay::<GeminiMapper>(
        "gemini-headless",
        &["01_text.jsonl", "02_resume.jsonl", "04_shell_yolo.jsonl"],
    );
    let sessions = of_kind(&drafts, kinds::AGENT_SESSION);
    // The resumed turn names the same session: one entry for it; the yolo run is another.
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    assert_eq!(
        sessions[0].payload["agent_session_id"],
        "b8a22e50-e96c-40cb-ad25-8e77421c539f"
    );
    assert!(gemini.session_id().is_some());
    let texts = of_kind(&drafts, kinds::AGENT_TEXT);
    assert_eq!(texts[0].payload["text"], "Hello from the fake Gemini.");
    let tool = of_kind(&drafts, kinds::AGENT_TOOL_USE)[0];
    assert_eq!(tool.payload["name"], "Bash");
    assert_eq!(
        tool.payload["input"]["command"],
        "echo hi > made.txt; echo done"
    );
    let result = of_kind(&drafts, kinds::AGENT_TOOL_RESULT)[0];
    assert_eq!(result.payload["is_error"], false);
    assert_eq!(result.payload["summary"], "done");
    let results = of_kind(&drafts, kinds::AGENT_RESULT);
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|r| r.payload["subtype"] == "success"));
}

#[test]
fn an_interrupted_turn_is_cancelled_and_a_failed_one_is_an_error() {
    let (_, drafts) = replay::<GeminiMapper>(
        "gemini-headless",
        &["05_stall_sigint.jsonl", "06_api_unreachable.jsonl"],
    );
    let results = of_kind(&drafts, kinds::AGENT_RESULT);
    assert_eq!(results[0].payload["subtype"], "cancelled");
    assert_eq!(results[0].payload["terminal_reason"], "aborted_streaming");
    assert_eq!(results[1].payload["subtype"], "error_during_execution");
    assert_eq!(of_kind(&drafts, kinds::AGENT_ERROR).len(), 1);
    let (_, drafts) = replay::<CodexExecMapper>("codex-exec", &["04_stall_sigint.jsonl"]);
    let result = of_kind(&drafts, kinds::AGENT_RESULT)[0];
    assert_eq!(result.payload["subtype"], "cancelled");
}

#[test]
fn codex_exec_items_map_as_the_app_server_s_do() {
    let (codex, drafts) = replay::<CodexExecMapper>(
        "codex-exec",
        &[
            "01_text.jsonl",
            "02_resume.jsonl",
            "03_command.jsonl",
            "05_file_change.jsonl",
        ],
    );
    assert_eq!(of_kind(&drafts, kinds::AGENT_SESSION).len(), 3);
    assert!(codex.session_id().is_some());
    let tools = of_kind(&drafts, kinds::AGENT_TOOL_USE);
    assert_eq!(tools[0].payload["name"], "Bash");
    assert_eq!(
        tools[0].payload["input"]["command"],
        "echo hi > made.txt; echo done"
    );
    assert_eq!(tools[1].payload["name"], "Edit");
    assert_eq!(tools[1].payload["path"], "/tmp/cx/proj/patched.txt");
    let results = of_kind(&drafts, kinds::AGENT_TOOL_RESULT);
    assert_eq!(results[0].payload["summary"], "done\n");
    assert_eq!(
        of_kind(&drafts, kinds::AGENT_TEXT)[0].payload["text"],
        "Hello from the fake OpenAI."
    );
    assert_eq!(of_kind(&drafts, kinds::AGENT_RESULT).len(), 4);
}

#[test]
fn each_turn_continues_the_agent_s_session() {
    let command = ["gemini".to_owned(), "-y".to_owned()];
    assert_eq!(
        GeminiMapper::argv(&command, "-hi", Some("s1")),
        [
            "gemini",
            "-y",
            "--resume",
            "s1",
            "--output-format=stream-json",
            "--prompt=-hi"
        ]
    );
    let command = [
        "codex".to_owned(),
        "-s".to_owned(),
        "danger-full-access".to_owned(),
    ];
    assert_eq!(
        CodexExecMapper::argv(&command, "hi", None),
        [
            "codex",
            "exec",
            "-s",
            "danger-full-access",
            "--json",
            "--",
            "hi"
        ]
    );
    let command = ["codex".to_owned(), "exec".to_owned()];
    assert_eq!(
        CodexExecMapper::argv(&command, "hi", Some("t1")),
        ["codex", "exec", "resume", "t1", "--json", "--", "hi"]
    );
}
