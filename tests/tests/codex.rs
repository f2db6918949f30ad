//! Codex under `moor`, through codex-acp (the Agent Client Protocol adapter of Codex, the pinned
//! npm package `scripts/install-agents` installs), picked by name for the `acp` adapter, offline
//! against `FakeOpenAi` (a Responses API stand-in): a command approved remotely and one denied
//! remotely, a stalled model stream caught by the watchdog then interrupted, and a crash mid-tool
//! continued on the same Codex session by `session/load`, with the brief naming the command.

use moor_e2e::acp::{assert_ran_after_the_decision, AcpEnv, AcpRun};
use moor_e2e::fake_openai::FakeOpenAi;
use moor_protocol::kinds;
use moor_protocol::payload::PermissionDecision;

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
    let ok = c
        .touch_if("bash", &allowed, PermissionDecision::Allow)
        .await;
    assert_eq!(ok.result.payload["is_error"], false, "{:?}", ok.result);
    assert_ran_after_the_decision(&c.after(ok.seq));

    // denied remotely: Codex's reject ("abort") ends the turn
    let no = c.touch_if("bash", &denied, PermissionDecision::Deny).await;
    assert_eq!(no.result.payload["subtype"], "cancelled");
    let resolved = c.first_after(no.seq, kinds::AGENT_PERMISSION_RESOLVED);
    assert_eq!(resolved.payload["decision"], "deny");
    c.s.bridge.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_codex_stream_is_caught_by_the_watchdog_and_interrupted() {
    let api = FakeOpenAi::start().await;
    let mut c = start(&api, &[("--stall-timeout", "3s")]).await;
    c.wait(kinds::AGENT_SESSION, 0).await;

    c.stall_then_interrupt("[[stall]]").await;
    c.prompt_answered("hello again").await;
    c.s.bridge.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_killed_mid_tool_is_in_the_brief_and_moor_run_again_loads_its_session() {
    // arrange: a finished turn, then moor and Codex are killed while an allowed command runs
    let api = FakeOpenAi::start().await;
    let mut c = start(&api, &[]).await;
    let conversation = c.conversation().await;
    let (exit, _) = c.crash_mid_command("bash", "sleep 120").await;

    // act: `moor run --session X -- codex-acp` again, then a question about the first turn
    let (mut again, _, question) = c.continue_and_ask(&exit, &conversation, "sleep 120").await;

    // assert: the same Codex session, which still holds the first turn
    let answer = c.first_after(question, kinds::AGENT_TEXT);
    // (codex-acp streams its own notices, like unknown model metadata, as agent text.)
    assert!(
        answer.payload["text"]
            .as_str()
            .unwrap()
            .ends_with("Hello from the fake OpenAI. You asked me to remember heron."),
        "{answer:?}"
    );
    assert!(api.last_request_mentions("remember the word heron"));
    again.kill().await;
}
