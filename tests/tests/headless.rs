//! The headless adapters under `moor` with the real agents (the pinned npm packages
//! `scripts/install-agents` installs), one process per turn, offline against the fake model
//! APIs: Gemini CLI as `gemini -p … --output-format stream-json` (`--mode gemini-headless`) and
//! Codex as `codex exec --json` (`--mode codex-exec`). For each: two prompts where the second
//! continues the agent's own session, a shell command the agent's approval mode allows, a
//! permission answer refused (nothing asks), a stalled stream caught by the watchdog and
//! interrupted, and a crash mid-command continued by `moor run --session` again with the brief.

use moor_e2e::acp::{assert_continued, AcpEnv, AcpRun, FINISH};
use moor_e2e::assert::first_of_kind;
use moor_e2e::fake_gemini::FakeGemini;
use moor_e2e::fake_openai::FakeOpenAi;
use moor_protocol::{kinds, Entry};
use serde_json::{json, Value};

/// Gemini CLI headless with `--yolo`: its shell tool runs without asking (headless Gemini CLI
/// leaves tools that would need approval out of the model's tool list).
async fn gemini(api: &FakeGemini, flags: &[(&str, &str)]) -> AcpRun {
    let mut env = AcpEnv::for_gemini(api);
    env.adapter = "gemini-headless";
    let mut command = AcpEnv::gemini_command();
    command.push("--yolo".into());
    let flags = [&[("--mode", "gemini-headless")], flags].concat();
    AcpRun::start(env, &command, &flags).await
}

/// `codex exec` (the test project is not a git repository; `config.toml` has
/// `sandbox_mode = "danger-full-access"`, and `codex exec` never asks for approval).
async fn codex(api: &FakeOpenAi, flags: &[(&str, &str)]) -> AcpRun {
    let mut env = AcpEnv::for_codex_app_server(api);
    env.adapter = "codex-exec";
    let mut command = AcpEnv::codex_app_server_command();
    command.extend(["exec".into(), "--skip-git-repo-check".into()]);
    let flags = [&[("--mode", "codex-exec")], flags].concat();
    AcpRun::start(env, &command, &flags).await
}

/// The `agent.event`s saying a turn's process started, after `seq`.
fn turns_started(run: &AcpRun, seq: u64) -> Vec<Value> {
    run.after(seq)
        .into_iter()
        .filter(|e| e.kind == kinds::AGENT_EVENT && e.payload["subtype"] == "turn_started")
        .map(|e| e.payload["raw"].clone())
        .collect()
}

/// Kills the process groups of every turn the log names (what a crash leaves running).
fn kill_turns(run: &AcpRun) {
    for raw in turns_started(run, 0) {
        let pid = raw["pid"].as_i64().and_then(|p| i32::try_from(p).ok());
        if let Some(pid) = pid.and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

/// Two prompts, the second continuing the first's session; a command that runs; a permission
/// answer refused (no request is ever pending). `answer` is the fake's reply to a plain prompt.
async fn continues_runs_and_refuses(run: &mut AcpRun, answer: &str) {
    // arrange: a first turn
    run.prompt_answered("remember the word heron").await;
    let conversation = run.conversation().await;

    // act: a second prompt, a command, a permission answer
    let question = run.prompt_answered("which word?").await;
    let made = run.env.file("made.txt");
    let command = format!("touch {}", made.display());
    let tool = run.prompt_answered(&format!("[[bash:{command}]]")).await;
    let permission = run
        .server
        .api()
        .post_input_kind_raw(
            run.s.id,
            "permission",
            kinds::INPUT_PERMISSION,
            json!({"decision": "allow"}),
        )
        .await;

    // assert: the same session, which still holds the first turn
    let resumed = turns_started(run, question);
    assert_eq!(resumed[0]["resume"], conversation, "{resumed:?}");
    let text = run.first_after(question, kinds::AGENT_TEXT);
    assert_eq!(
        text.payload["text"],
        format!("{answer} You asked me to remember heron.")
    );
    assert!(made.exists(), "the allowed command ran");
    let used = run.first_after(tool, kinds::AGENT_TOOL_USE);
    assert_eq!(used.payload["name"], "Bash", "{used:?}");
    assert_eq!(used.payload["input"]["command"], command, "{used:?}");
    let result = run.first_after(tool, kinds::AGENT_TOOL_RESULT);
    assert_eq!(result.payload["is_error"], false, "{result:?}");
    // Nothing is ever pending: the server refuses the answer (and `moor` would, too).
    assert_eq!(permission.status, 409, "{permission:?}");
    run.s.bridge.kill().await;
}

/// A stalled stream reported, interrupted (the turn ends cancelled), then, with `follow_up`, a
/// prompt answered. (Gemini CLI 0.61 keeps an interrupted prompt in the session and sends it
/// again joined to the next one, so the fake would stall again: no follow-up for it.)
async fn stalls_then_interrupts(run: &mut AcpRun, follow_up: bool) {
    let stalled = run.stall_then_interrupt("[[stall]]").await;
    assert_eq!(stalled.result.payload["is_error"], true);
    if follow_up {
        run.prompt_answered("hello again").await;
    }
    run.s.bridge.kill().await;
}

/// A finished turn, then `moor` and the turn's process killed while a command runs; `moor run
/// --session` again continues the agent's session with the brief, which names the command.
async fn crash_then_continue(run: &mut AcpRun, answer: &str) {
    // arrange
    run.prompt_answered("remember the word heron").await;
    let conversation = run.conversation().await;
    let seq = run.prompt("[[bash:sleep 3]]").await;
    run.wait(kinds::AGENT_TOOL_USE, seq).await;
    run.s.bridge.kill().await;
    kill_turns(run);
    let interrupted: Entry = run
        .s
        .tail
        .wait_kind("session.interrupted", seq, FINISH, |_| true)
        .await;

    // act
    let (mut again, restart) = run.run_again(&interrupted).await;
    run.wait(kinds::AGENT_RESULT, restart.seq.0).await;
    let question = run.prompt_answered("which word?").await;

    // assert
    assert_continued(&restart, &conversation, "sleep 3");
    let briefed = turns_started(run, restart.seq.0);
    assert_eq!(briefed[0]["resume"], conversation, "{briefed:?}");
    let text = first_of_kind(&run.after(question), kinds::AGENT_TEXT).clone();
    assert_eq!(
        text.payload["text"],
        format!("{answer} You asked me to remember heron.")
    );
    again.kill().await;
    kill_turns(run);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_gemini_continues_its_session_runs_an_allowed_command_and_refuses_permission_answers(
) {
    let api = FakeGemini::start().await;
    let mut g = gemini(&api, &[]).await;
    continues_runs_and_refuses(&mut g, "Hello from the fake Gemini.").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_headless_gemini_turn_is_caught_by_the_watchdog_and_interrupted() {
    let api = FakeGemini::start().await;
    let mut g = gemini(&api, &[("--stall-timeout", "3s"), ("--stop-grace", "2s")]).await;
    stalls_then_interrupts(&mut g, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_gemini_killed_mid_command_continues_its_session_with_the_brief() {
    let api = FakeGemini::start().await;
    let mut g = gemini(&api, &[]).await;
    crash_then_continue(&mut g, "Hello from the fake Gemini.").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_continues_its_thread_runs_an_allowed_command_and_refuses_permission_answers() {
    let api = FakeOpenAi::start().await;
    let mut c = codex(&api, &[]).await;
    continues_runs_and_refuses(&mut c, "Hello from the fake OpenAI.").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_codex_exec_turn_is_caught_by_the_watchdog_and_interrupted() {
    let api = FakeOpenAi::start().await;
    let mut c = codex(&api, &[("--stall-timeout", "3s"), ("--stop-grace", "2s")]).await;
    stalls_then_interrupts(&mut c, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_killed_mid_command_continues_its_thread_with_the_brief() {
    let api = FakeOpenAi::start().await;
    let mut c = codex(&api, &[]).await;
    crash_then_continue(&mut c, "Hello from the fake OpenAI.").await;
}
