//! The `acp` adapter through the real `moor` and `moord`, driving `moor-acp-agent` (this
//! crate's small Agent Client Protocol agent; Gemini CLI is the other ACP agent, in
//! `gemini.rs`): prompts, permission requests approved and denied remotely, an interrupt, a
//! stalled turn caught by the watchdog, and a crash mid-tool continued by `session/load`.

use moor_e2e::acp::{
    assert_continued, assert_uncertain, AcpEnv, AcpRun, ALLOWED_CALL_TURN, FINISH,
};
use moor_e2e::assert::{agent_kinds, first_of_kind};
use moor_protocol::kinds;
use moor_protocol::payload::PermissionDecision;

async fn start(flags: &[(&str, &str)]) -> AcpRun {
    let mut flags = flags.to_vec();
    flags.push(("--mode", "acp"));
    AcpRun::start(AcpEnv::new(), &AcpEnv::test_agent(), &flags).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_prompt_is_one_acp_turn_logged_as_typed_entries() {
    let mut a = start(&[]).await;
    let session = a.wait(kinds::AGENT_SESSION, 0).await;

    let seq = a.prompt("hello there").await;
    let result = a.wait(kinds::AGENT_RESULT, seq).await;

    assert!(session.payload["agent_session_id"]
        .as_str()
        .is_some_and(|s| s.starts_with("s-")));
    assert_eq!(session.payload["version"], "1.0.0");
    let turn = a.after(seq);
    assert_eq!(
        agent_kinds(&turn),
        ["agent.text", "agent.result"],
        "{turn:#?}"
    );
    let deltas: String = turn
        .iter()
        .filter(|e| e.kind == kinds::AGENT_TEXT_DELTA)
        .map(|e| e.payload["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(deltas, "you said: hello there");
    let text = first_of_kind(&turn, kinds::AGENT_TEXT);
    assert_eq!(text.payload["text"], "you said: hello there");
    assert_eq!(result.payload["is_error"], false);
    assert_eq!(result.payload["subtype"], "end_turn");
    assert!(turn
        .iter()
        .any(|e| e.kind == kinds::INPUT_APPLIED && e.payload["input_seq"] == seq));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_runs_only_when_allowed_remotely_and_not_when_denied() {
    let mut a = start(&[]).await;
    a.wait(kinds::AGENT_SESSION, 0).await;
    let allowed = a.env.file("allowed.txt");
    let denied = a.env.file("denied.txt");

    // approved remotely: allow once, the command runs
    let ok = a
        .touch_if("tool", &allowed, PermissionDecision::Allow)
        .await;
    assert_eq!(ok.result.payload["is_error"], false);
    let turn = a.after(ok.seq);
    assert_eq!(agent_kinds(&turn), ALLOWED_CALL_TURN, "{turn:#?}");
    let tool = first_of_kind(&turn, kinds::AGENT_TOOL_USE);
    assert_eq!(ok.request.payload["tool_use_id"], tool.payload["id"]);
    assert_eq!(ok.request.payload["tool_name"], "Bash");
    let resolved = first_of_kind(&turn, kinds::AGENT_PERMISSION_RESOLVED);
    assert_eq!(resolved.payload["decision"], "allow");
    assert_eq!(resolved.payload["input_seq"], ok.decided);
    let tool_result = first_of_kind(&turn, kinds::AGENT_TOOL_RESULT);
    assert_eq!(tool_result.payload["tool_use_id"], tool.payload["id"]);
    assert_eq!(tool_result.payload["is_error"], false);

    // denied remotely: the agent is told no, nothing runs
    let no = a.touch_if("tool", &denied, PermissionDecision::Deny).await;
    let turn = a.after(no.seq);
    let resolved = first_of_kind(&turn, kinds::AGENT_PERMISSION_RESOLVED);
    assert_eq!(resolved.payload["decision"], "deny");
    let tool_result = first_of_kind(&turn, kinds::AGENT_TOOL_RESULT);
    assert_eq!(tool_result.payload["is_error"], true);
    let text = first_of_kind(&turn, kinds::AGENT_TEXT);
    assert!(text.payload["text"]
        .as_str()
        .unwrap()
        .starts_with("not allowed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_turn_is_reported_stalled_and_an_interrupt_cancels_it() {
    let mut a = start(&[("--stall-timeout", "2s")]).await;
    a.wait(kinds::AGENT_SESSION, 0).await;

    let s = a.stall_then_interrupt("[[hang]]").await;

    assert_eq!(s.stalled.payload["timeout_ms"], 2000);
    assert_eq!(s.result.payload["terminal_reason"], "aborted_streaming");
    let turn = a.after(s.seq);
    assert!(turn
        .iter()
        .any(|e| e.kind == kinds::AGENT_THINKING && e.payload["text"] == "considering"));
    assert!(turn
        .iter()
        .any(|e| e.kind == kinds::INPUT_APPLIED && e.payload["input_seq"] == s.interrupt));

    // the agent takes the next prompt
    a.prompt_answered("still there?").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_dies_mid_tool_leaves_the_call_in_agent_exit_and_in_the_brief() {
    let mut a = start(&[]).await;
    a.wait(kinds::AGENT_SESSION, 0).await;

    let seq = a.prompt("[[crash-in-tool:make deploy]]").await;
    let tool = a.wait(kinds::AGENT_TOOL_USE, seq).await;
    let exit = a.wait(kinds::AGENT_EXIT, seq).await;

    assert_eq!(exit.payload["code"], 3);
    assert_eq!(exit.payload["stopped_tools"][0]["id"], tool.payload["id"]);
    assert_uncertain(&a.brief().await, "make deploy");
    a.s.bridge.wait_exit(FINISH).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_mid_tool_moor_run_again_loads_the_same_conversation_with_the_brief() {
    // arrange: one finished turn, then moor and the agent die while an allowed command runs
    let mut a = start(&[]).await;
    let conversation = a.conversation().await;
    let (interrupted, brief) = a.crash_mid_command("tool", "sleep 120").await;

    // assert: the brief (which names the command that was cut off) names the conversation
    assert_eq!(
        brief.agent_session_id.as_deref(),
        conversation.as_str(),
        "{brief:#?}"
    );

    // act: the same `moor run --session X` again, then a question about the first turn
    let (mut again, restart) = a.run_again(&interrupted).await;
    let resumed = a.wait(kinds::AGENT_RESULT, restart.seq.0).await;
    let question = a.prompt("which word?").await;
    a.wait(kinds::AGENT_RESULT, question).await;

    // assert: continued on the agent's own session, with the brief as first prompt
    assert_continued(&restart, &conversation, "sleep 120");
    assert_eq!(resumed.payload["is_error"], false);
    let replayed = a
        .after(restart.seq.0)
        .into_iter()
        .find(|e| e.kind == kinds::AGENT_EVENT && e.payload["subtype"] == "history_replayed")
        .expect("session/load replayed the history");
    assert!(replayed.payload["raw"]["updates"].as_u64().unwrap() >= 3);
    let answer = a.first_after(question, kinds::AGENT_TEXT);
    assert_eq!(
        answer.payload["text"],
        "you said: which word? (earlier: remember the word heron)"
    );
    assert!(again
        .stderr()
        .contains("continuing the agent's conversation"));
    again.kill().await;
}
