//! The Codex CLI under `moor` through `codex app-server` (the pinned `@openai/codex` that
//! `scripts/install-agents` installs), picked by name for the `codex` adapter, offline against
//! `FakeOpenAi` (a Responses API stand-in): a command approved remotely and one denied remotely,
//! a patch (a file change) approved and one denied, a stalled model stream caught by the
//! watchdog then interrupted, and a crash mid-tool continued on the same Codex thread by
//! `thread/resume`, with the brief naming the command.

use moor_e2e::acp::{assert_ran_after_the_decision, AcpEnv, AcpRun};
use moor_e2e::fake_openai::FakeOpenAi;
use moor_protocol::payload::PermissionDecision;
use moor_protocol::{kinds, Entry};

async fn start(api: &FakeOpenAi, flags: &[(&str, &str)]) -> AcpRun {
    let env = AcpEnv::for_codex_app_server(api);
    AcpRun::start(env, &AcpEnv::codex_app_server_command(), flags).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_app_server_runs_a_command_only_when_allowed_remotely() {
    let api = FakeOpenAi::start().await;
    let mut c = start(&api, &[]).await;
    let session = c.wait(kinds::AGENT_SESSION, 0).await;
    assert_eq!(
        session.payload["permission_mode"], "untrusted",
        "{session:?}"
    );
    assert_eq!(session.payload["version"], "0.171.0", "{session:?}");
    let allowed = c.env.file("allowed.txt");
    let denied = c.env.file("denied.txt");

    // approved remotely
    let ok = c
        .touch_if("bash", &allowed, PermissionDecision::Allow)
        .await;
    assert_eq!(ok.result.payload["is_error"], false, "{:?}", ok.result);
    assert_ran_after_the_decision(&c.after(ok.seq));
    assert_eq!(
        ok.request.payload["input"]["command"],
        format!("touch {}", allowed.display())
    );

    // denied remotely: the call ends declined and the model carries on
    let no = c.touch_if("bash", &denied, PermissionDecision::Deny).await;
    let resolved = c.first_after(no.seq, kinds::AGENT_PERMISSION_RESOLVED);
    assert_eq!(resolved.payload["decision"], "deny");
    let declined = c.first_after(no.seq, kinds::AGENT_TOOL_RESULT);
    assert_eq!(declined.payload["is_error"], true, "{declined:?}");
    assert_eq!(no.result.payload["subtype"], "success", "{:?}", no.result);
    c.s.bridge.kill().await;
}

/// Prompts a model call of `apply_patch` adding `name` with one line, which Codex runs as a file
/// change, answers its permission request with `decision` and waits for the turn to end;
/// returns the request.
async fn patch(c: &mut AcpRun, name: &str, decision: PermissionDecision) -> Entry {
    let script = format!(
        "[[bash:apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: {name}\n+hi\n*** End Patch\nEOF\n]]"
    );
    let seq = c.prompt(&script).await;
    let request = c.wait(kinds::AGENT_PERMISSION_REQUEST, seq).await;
    assert!(
        !c.env.file(name).exists(),
        "nothing is written before a person decides"
    );
    let decided = c.decide(&request, decision).await;
    let result = c.wait(kinds::AGENT_RESULT, decided).await;
    assert_eq!(result.payload["is_error"], false, "{result:?}");
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_patch_is_an_edit_that_lands_only_when_allowed_remotely() {
    let api = FakeOpenAi::start().await;
    let mut c = start(&api, &[]).await;
    c.wait(kinds::AGENT_SESSION, 0).await;

    let allowed = patch(&mut c, "patched.txt", PermissionDecision::Allow).await;
    let denied = patch(&mut c, "refused.txt", PermissionDecision::Deny).await;

    let file = c.env.file("patched.txt");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hi\n");
    assert!(
        !c.env.file("refused.txt").exists(),
        "denied: nothing written"
    );
    assert_eq!(allowed.payload["tool_name"], "Edit", "{allowed:?}");
    assert_eq!(allowed.payload["path"], file.display().to_string());
    let edit = c
        .after(0)
        .into_iter()
        .find(|e| {
            e.kind == kinds::AGENT_TOOL_USE && e.payload["id"] == allowed.payload["tool_use_id"]
        })
        .expect("the patch's call is logged");
    assert!(
        edit.seq < allowed.seq,
        "the call, then its request: {edit:?}"
    );
    assert_eq!(edit.payload["name"], "Edit", "{edit:?}");
    assert_eq!(edit.payload["path"], file.display().to_string(), "{edit:?}");
    let applied = c.first_after(allowed.seq.0, kinds::AGENT_TOOL_RESULT);
    assert_eq!(applied.payload["is_error"], false, "{applied:?}");
    let declined = c.first_after(denied.seq.0, kinds::AGENT_TOOL_RESULT);
    assert_eq!(declined.payload["is_error"], true, "{declined:?}");
    c.s.bridge.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_codex_app_server_stream_is_caught_by_the_watchdog_and_interrupted() {
    let api = FakeOpenAi::start().await;
    let mut c = start(&api, &[("--stall-timeout", "3s")]).await;
    c.wait(kinds::AGENT_SESSION, 0).await;

    let stalled = c.stall_then_interrupt("[[stall]]").await;
    assert_eq!(
        stalled.result.payload["terminal_reason"], "aborted_streaming",
        "{:?}",
        stalled.result
    );
    c.prompt_answered("hello again").await;
    c.s.bridge.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_app_server_killed_mid_tool_is_in_the_brief_and_moor_run_again_resumes_its_thread() {
    // arrange: a finished turn, then moor and Codex are killed while an allowed command runs
    let api = FakeOpenAi::start().await;
    let mut c = start(&api, &[]).await;
    let thread = c.conversation().await;
    let (exit, _) = c.crash_mid_command("bash", "sleep 120").await;

    // act: `moor run --session X -- codex` again, then a question about the first turn
    let (mut again, restart, question) = c.continue_and_ask(&exit, &thread, "sleep 120").await;

    // assert: the same Codex thread, which still holds the first turn
    let resumed = c.first_after(restart.seq.0, kinds::AGENT_SESSION);
    assert_eq!(resumed.payload["agent_session_id"], thread, "{resumed:?}");
    let answer = c.first_after(question, kinds::AGENT_TEXT);
    assert_eq!(
        answer.payload["text"], "Hello from the fake OpenAI. You asked me to remember heron.",
        "{answer:?}"
    );
    assert!(api.last_request_mentions("remember the word heron"));
    again.kill().await;
}
