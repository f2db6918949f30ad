//! Codex under `moor`, through codex-acp (the Agent Client Protocol adapter of Codex, the pinned
//! npm package `scripts/install-agents` installs), picked by name for the `acp` adapter, offline
//! against `FakeOpenAi` (a Responses API stand-in): a command approved remotely and one denied
//! remotely, a stalled model stream caught by the watchdog then interrupted, and a crash mid-tool
//! continued on the same Codex session by `session/load`, with the brief naming the command.

use moor_e2e::acp::{agent_kinds, AcpEnv, AcpRun};
use moor_e2e::fake_openai::FakeOpenAi;
use moor_protocol::kinds;
use moor_protocol::payload::PermissionDecision;
use serde_json::json;

async fn start(api: &FakeOpenAi, flags: &[(&str, &str)]) -> AcpRun {
    AcpRun::start(AcpEnv::for_codex(api), &AcpEnv::codex_command(), flags).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_runs_a_command_only_when_allowed_remotely() {
    let api = FakeOpenAi::start().await;
    let mut c = start(&api, &[]).await;
    c.wait(kinds::AGENT_SESSION, 0).await;
    let allowed = c.env.file("allowed.txt");
    let denied = c.env.file("denied.txt");

    // approved remotely
    let seq = c
        .prompt(&format!("[[bash:touch {}]]", allowed.display()))
        .await;
    let request = c.wait(kinds::AGENT_PERMISSION_REQUEST, seq).await;
    assert!(!allowed.exists(), "nothing runs before a person decides");
    let decided = c.decide(&request, PermissionDecision::Allow).await;
    let result = c.wait(kinds::AGENT_RESULT, decided).await;
    assert!(allowed.exists(), "allowed: the command ran");
    assert_eq!(result.payload["is_error"], false, "{result:?}");
    let turn = c.after(seq);
    let kinds_seen = agent_kinds(&turn);
    let at = |k: &str| {
        kinds_seen
            .iter()
            .position(|x| *x == k)
            .unwrap_or(usize::MAX)
    };
    assert!(
        at("agent.tool_use") < at("agent.permission.request")
            && at("agent.permission.request") < at("agent.permission.resolved")
            && at("agent.permission.resolved") < at("agent.tool_result")
            && at("agent.tool_result") < at("agent.result"),
        "{kinds_seen:?}"
    );
    let tool = turn
        .iter()
        .find(|e| e.kind == kinds::AGENT_TOOL_USE)
        .unwrap();
    assert_eq!(tool.payload["name"], "Bash");
    assert_eq!(
        tool.payload["input"]["command"],
        format!("touch {}", allowed.display())
    );
    let tool_result = turn
        .iter()
        .find(|e| e.kind == kinds::AGENT_TOOL_RESULT)
        .unwrap();
    assert_eq!(tool_result.payload["is_error"], false);

    // denied remotely: Codex's reject ("abort") ends the turn
    let seq = c
        .prompt(&format!("[[bash:touch {}]]", denied.display()))
        .await;
    let request = c.wait(kinds::AGENT_PERMISSION_REQUEST, seq).await;
    let decided = c.decide(&request, PermissionDecision::Deny).await;
    let result = c.wait(kinds::AGENT_RESULT, decided).await;
    assert!(!denied.exists(), "denied: the command did not run");
    assert_eq!(result.payload["subtype"], "cancelled");
    let resolved = c
        .after(seq)
        .into_iter()
        .find(|e| e.kind == kinds::AGENT_PERMISSION_RESOLVED)
        .unwrap();
    assert_eq!(resolved.payload["decision"], "deny");
    c.s.bridge.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_codex_stream_is_caught_by_the_watchdog_and_interrupted() {
    let api = FakeOpenAi::start().await;
    let mut c = start(&api, &[("--stall-timeout", "3s")]).await;
    c.wait(kinds::AGENT_SESSION, 0).await;

    let seq = c.prompt("[[stall]]").await;
    let stalled = c.wait(kinds::AGENT_STALLED, seq).await;
    let interrupt = c.input(kinds::INPUT_INTERRUPT, json!({})).await;
    let result = c.wait(kinds::AGENT_RESULT, interrupt).await;

    assert_eq!(stalled.payload["phase"], "streaming");
    assert_eq!(result.payload["subtype"], "cancelled");
    let seq = c.prompt("hello again").await;
    let result = c.wait(kinds::AGENT_RESULT, seq).await;
    assert_eq!(result.payload["is_error"], false);
    c.s.bridge.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_killed_mid_tool_is_in_the_brief_and_moor_run_again_loads_its_session() {
    // arrange: a finished turn, then moor and Codex are killed while an allowed command runs
    let api = FakeOpenAi::start().await;
    let mut c = start(&api, &[]).await;
    let session = c.wait(kinds::AGENT_SESSION, 0).await;
    let conversation = session.payload["agent_session_id"].clone();
    let seq = c.prompt("remember the word heron").await;
    c.wait(kinds::AGENT_RESULT, seq).await;
    let seq = c.prompt("[[bash:sleep 120]]").await;
    let request = c.wait(kinds::AGENT_PERMISSION_REQUEST, seq).await;
    let decided = c.decide(&request, PermissionDecision::Allow).await;
    c.wait(kinds::AGENT_PERMISSION_RESOLVED, decided).await;
    let exit = c.crash(decided).await;

    // assert: the brief names the command that was cut off
    let brief = c.brief().await;
    assert!(
        brief
            .uncertain
            .iter()
            .any(|t| t.target.as_deref() == Some("sleep 120")),
        "{brief:#?}"
    );

    // act: `moor run --session X -- codex-acp` again, then a question about the first turn
    let mut again = c.s.bridge.respawn(&[]);
    let restart = c.wait(kinds::AGENT_RESTART, exit.seq.0).await;
    // The brief quotes the cut-off command, so the fake model asks to run it again: it is not
    // run again unasked, and here the person says no.
    let again_asked = c.wait(kinds::AGENT_PERMISSION_REQUEST, restart.seq.0).await;
    assert_eq!(again_asked.payload["input"]["command"], "sleep 120");
    let denied = c.decide(&again_asked, PermissionDecision::Deny).await;
    c.wait(kinds::AGENT_RESULT, denied).await;
    let question = c.prompt("which word?").await;
    c.wait(kinds::AGENT_RESULT, question).await;

    // assert: the same Codex session, which still holds the first turn
    assert_eq!(restart.payload["reason"], "continued");
    assert_eq!(restart.payload["agent_session_id"], conversation);
    assert!(restart.payload["prompt"]
        .as_str()
        .unwrap()
        .contains("sleep 120"));
    let answer = c
        .after(question)
        .into_iter()
        .find(|e| e.kind == kinds::AGENT_TEXT)
        .unwrap();
    // (codex-acp streams its own notices, like unknown model metadata, as agent text.)
    assert!(
        answer.payload["text"]
            .as_str()
            .unwrap()
            .ends_with("Hello from the fake OpenAI. You asked me to remember heron."),
        "{answer:?}"
    );
    assert!(api
        .requests()
        .last()
        .is_some_and(|r| r.to_string().contains("remember the word heron")));
    again.kill().await;
}
