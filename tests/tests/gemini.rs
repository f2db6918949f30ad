//! The real Gemini CLI (the pinned npm package `scripts/install-agents` installs) under `moor`,
//! picked by name (auto mode runs `gemini --acp` through the `acp` adapter), offline against
//! `FakeGemini`: a shell command approved remotely and one denied remotely, a stalled model
//! stream caught by the watchdog then interrupted, and a crash mid-tool continued on the same
//! Gemini session by `session/load`, with the recovery brief naming the cut-off command.

use moor_e2e::acp::{AcpEnv, AcpRun, ALLOWED_CALL_TURN, FINISH};
use moor_e2e::assert::{agent_kinds, first_of_kind};
use moor_e2e::fake_gemini::FakeGemini;
use moor_protocol::kinds;
use moor_protocol::payload::PermissionDecision;
use serde_json::json;

async fn start(api: &FakeGemini, flags: &[(&str, &str)]) -> AcpRun {
    AcpRun::start(AcpEnv::for_gemini(api), &AcpEnv::gemini_command(), flags).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_runs_a_shell_command_only_when_allowed_remotely() {
    let api = FakeGemini::start().await;
    let mut g = start(&api, &[]).await;
    let session = g.wait(kinds::AGENT_SESSION, 0).await;
    assert!(g.s.start.payload["command"]
        .as_array()
        .unwrap()
        .contains(&json!("--acp")));
    assert_eq!(session.payload["version"], "0.61.0");
    let allowed = g.env.file("allowed.txt");
    let denied = g.env.file("denied.txt");

    // approved remotely
    let ok = g
        .touch_if("bash", &allowed, PermissionDecision::Allow)
        .await;
    assert_eq!(ok.result.payload["is_error"], false);
    let turn = g.after(ok.seq);
    // Gemini CLI's answer to the prompt carries metadata, logged after the result.
    let kinds_seen = agent_kinds(&turn);
    assert_eq!(
        kinds_seen,
        [&ALLOWED_CALL_TURN[..], &["agent.event"]].concat(),
        "{turn:#?}"
    );
    let text = first_of_kind(&turn, kinds::AGENT_TEXT);
    assert_eq!(text.payload["text"], "Tool finished.");

    // denied remotely
    let no = g.touch_if("bash", &denied, PermissionDecision::Deny).await;
    let turn = g.after(no.seq);
    let resolved = first_of_kind(&turn, kinds::AGENT_PERMISSION_RESOLVED);
    assert_eq!(resolved.payload["decision"], "deny");
    assert!(
        turn.iter()
            .any(|e| e.kind == kinds::AGENT_TOOL_RESULT && e.payload["is_error"] == true),
        "the denied call ends as an error: {turn:#?}"
    );
    g.s.bridge.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_gemini_stream_is_caught_by_the_watchdog_and_interrupted() {
    let api = FakeGemini::start().await;
    let mut g = start(&api, &[("--stall-timeout", "3s")]).await;
    g.wait(kinds::AGENT_SESSION, 0).await;

    let s = g.stall_then_interrupt("[[stall]]").await;
    assert_eq!(s.result.payload["is_error"], true);
    g.prompt_answered("hello again").await;
    g.s.bridge.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_killed_mid_tool_is_in_the_brief_and_moor_run_again_loads_its_session() {
    // arrange: a finished turn, then moor and Gemini CLI are killed while an allowed command runs
    let api = FakeGemini::start().await;
    let mut g = start(&api, &[]).await;
    let conversation = g.conversation().await;
    let created = minute_now();
    let (exit, _) = g.crash_mid_command("bash", "sleep 120").await;

    // Gemini CLI 0.61 cannot load a session in the UTC minute it was created: wait for the next
    // one (a property of the clock, not a race with the agent).
    moor_e2e::eventually(FINISH + FINISH, "the next UTC minute", || async {
        minute_now() > created
    })
    .await;

    // act: `moor run --session X -- gemini` again, then a question about the first turn
    let (mut again, restart, question) =
        g.continue_and_ask(&exit, &conversation, "sleep 120").await;

    // assert: the same Gemini session, which still holds the first turn
    let after = g.after(restart.seq.0);
    assert!(
        !after.iter().any(|e| e.kind == kinds::AGENT_ERROR),
        "session/load worked: {after:#?}"
    );
    let answer = g.first_after(question, kinds::AGENT_TEXT);
    assert_eq!(
        answer.payload["text"],
        "Hello from the fake Gemini. You asked me to remember heron."
    );
    again.kill().await;
}

/// Minutes since the epoch.
fn minute_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() / 60)
        .unwrap_or(0)
}
